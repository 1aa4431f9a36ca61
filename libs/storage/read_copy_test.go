package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// countingPool is a BufferPool that counts what is out.
type countingPool struct{ out atomic.Int64 }

func (p *countingPool) Get(n int) *[]byte {
	p.out.Add(1)
	b := make([]byte, n, n+n/3) // a capacity above the length, as pools give
	return &b
}

func (p *countingPool) Put(*[]byte) { p.out.Add(-1) }

// copiedLog is a log of many segments that reads through copies, with
// small batches and, every 50th, one of about 6 KiB, larger than the index
// interval and than small reads' budgets.
func copiedLog(t *testing.T, budget int64) (*Log, *vfs.FaultFS, *ReadCopies, *countingPool, int64) {
	t.Helper()
	fs := vfs.NewFaultFS(vfs.OS, 1)
	pool := &countingPool{}
	copies := NewReadCopies(budget, pool)
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "16384"}), Options{FS: fs, Copies: copies})
	t.Cleanup(func() { _ = l.Close() })
	var end int64
	for i := range 300 {
		b := simpleBatch(t, 3+i%5, int64(1000+i))
		if i%50 == 49 {
			keys := make([]string, 60)
			for k := range keys {
				keys[k] = fmt.Sprintf("key-%03d-%s", k, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
			}
			b = makeBatch(t, record.CodecNone, int64(1000+i), keys, "big")
		}
		res, err := l.AppendAsLeader(b, 1, record.FromClient)
		require.NoError(t, err)
		end = res.LastOffset + 1
	}
	require.Greater(t, l.NumSegments(), 4)
	return l, fs, copies, pool, end
}

// checkRead reads [from, end) with budget maxBytes in a loop and checks
// every record comes back once and in order, in chunks that are copies
// (via "copy"), slices of the map ("map") or either ("").
func checkRead(t *testing.T, l *Log, from, end int64, maxBytes int, via string) {
	t.Helper()
	var it record.Iterator
	want := from
	for want < end {
		res, err := l.Read(want, end, maxBytes)
		require.NoError(t, err)
		require.NotEmpty(t, res.Chunks, "read at %d", want)
		for _, c := range res.Chunks {
			require.NotEqual(t, c.buf != nil, c.m != nil, "a chunk is a copy or holds the map")
			if via != "" {
				require.Equal(t, via == "copy", c.buf != nil, "chunk is a copy")
			}
			it.Reset(c.Data)
			for it.Next() {
				if r := it.Record(); r.Offset >= want {
					require.Equal(t, want, r.Offset)
					want++
				}
			}
			require.NoError(t, it.Err())
		}
		require.Equal(t, want, res.NextOffset)
		res.Release()
	}
}

// A copying log returns the same batches as the map would, whole, read
// with few positional reads, and gives every buffer back.
func TestReadCopiesBatchesWithFewReads(t *testing.T) {
	l, fs, copies, pool, end := copiedLog(t, 1<<20)
	for _, maxBytes := range []int{1, 700, 3000, 64 << 10} {
		for _, from := range []int64{0, 1, 17, end / 2, end - 3} {
			reads := fs.Count(vfs.OpRead)
			res, err := l.Read(from, end, maxBytes)
			require.NoError(t, err)
			// One read places the window; a batch or gap past it grows it
			// once more; a read spanning segments places one per segment.
			require.LessOrEqual(t, fs.Count(vfs.OpRead)-reads, 2*len(res.Chunks)+2, "reads for one Read of %d at %d", maxBytes, from)
			require.Positive(t, copies.InFlight())
			res.Release()
			require.Zero(t, copies.InFlight(), "released copies leave the budget")
			checkRead(t, l, from, end, maxBytes, "copy")
		}
	}
	require.Zero(t, pool.out.Load(), "every buffer back in the pool")

	// A chunk stays whole after the log closes.
	res, err := l.Read(5, end, 4096)
	require.NoError(t, err)
	want := append([]byte(nil), res.Chunks[0].Data...)
	require.NoError(t, l.Close())
	require.Equal(t, want, res.Chunks[0].Data)
	res.Release()
	require.Zero(t, pool.out.Load())
}

// Beyond the budget, or when a positional read fails, reads go through the
// map.
func TestReadCopiesFallBackToTheMap(t *testing.T) {
	l, _, copies, pool, end := copiedLog(t, 100)
	checkRead(t, l, 0, end, 3000, "map")
	require.Zero(t, copies.InFlight())
	require.Positive(t, copies.Fallbacks(FallbackBudget), "counted for the metric")
	require.Zero(t, copies.Fallbacks(FallbackReadFailed))

	l, fs, copies, pool, end := copiedLog(t, 1<<20)
	remove := fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO})
	checkRead(t, l, 0, end, 3000, "map")
	remove()
	require.Zero(t, copies.InFlight())
	require.Zero(t, pool.out.Load())
	require.Zero(t, copies.Fallbacks(FallbackBudget))
	require.Positive(t, copies.Fallbacks(FallbackReadFailed), "counted for the metric")

	// A read that fails after the window was placed: the walk goes on
	// through the map.
	remove = fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO, After: 1})
	checkRead(t, l, 0, end, 1, "")
	remove()
	require.Zero(t, copies.InFlight())
	checkRead(t, l, 0, end, 3000, "copy")
	require.Zero(t, pool.out.Load())
}

// A read's positional reads and header walk run outside the log's lock: an
// append does not wait for a read held up by a slow disk. (Read used to
// hold the read lock throughout, and an append needs the lock to publish
// its batches.)
func TestSlowReadDoesNotBlockAppends(t *testing.T) {
	l, fs, _, _, end := copiedLog(t, 1<<20)
	before := fs.Count(vfs.OpRead)
	fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Latency: 3 * time.Second, Times: 1})
	readDone := make(chan error, 1)
	go func() {
		res, err := l.Read(0, end, 64<<10)
		if err == nil {
			if len(res.Chunks) == 0 {
				err = fmt.Errorf("the read returned nothing")
			}
			res.Release()
		}
		readDone <- err
	}()
	require.Eventually(t, func() bool { return fs.Count(vfs.OpRead) > before }, 10*time.Second, time.Millisecond,
		"the read reaches the disk")
	_, err := l.AppendAsLeader(simpleBatch(t, 2, 5000), 1, record.FromClient)
	require.NoError(t, err)
	select {
	case err := <-readDone:
		t.Fatalf("the append waited for the slow read (read result: %v)", err)
	default:
	}
	require.NoError(t, <-readDone)
	checkRead(t, l, 0, l.LogEndOffset(), 8<<10, "")
}

// After a restart a segment's end is known only as its successor's base,
// so an offset in a compacted gap at a segment's end points into a
// segment that holds nothing from it on. The read must go on to the next
// segment even when the first one alone covers the read's budget; an
// empty answer would leave a consumer fetching the same offset forever.
func TestReadAcrossGapAtSegmentEndAfterRestart(t *testing.T) {
	for _, copies := range []bool{false, true} {
		t.Run(fmt.Sprintf("copies=%v", copies), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(t, map[string]string{"segment.ms": "60000", "index.interval.bytes": "128"})
			clock := NewManualClock(epoch0)
			opts := func() Options {
				o := Options{Clock: clock}
				if copies {
					o.Copies = NewReadCopies(1<<20, &countingPool{})
				}
				return o
			}
			l := openLog(t, dir, cfg, opts())
			// Offsets 0-27 are the first segment; 28-29 were compacted
			// away; the next segment, rolled by age, starts at 30.
			for base := int64(0); base < 20; base += 2 {
				n := 2
				if base == 18 {
					n = 10 // offsets 18-27, and more bytes than the read's budget and an index interval
				}
				b := simpleBatch(t, n, 1000+base)
				record.AssignOffsets(b, base, 0)
				_, err := l.AppendAsFollower(b)
				require.NoError(t, err)
			}
			clock.Advance(time.Minute)
			b := simpleBatch(t, 3, 2000)
			record.AssignOffsets(b, 30, 0)
			_, err := l.AppendAsFollower(b)
			require.NoError(t, err)
			require.Equal(t, 2, l.NumSegments())
			require.NoError(t, l.Close())

			l = openLog(t, dir, cfg, opts())
			defer l.Close()
			res, err := l.Read(28, l.LogEndOffset(), 1)
			require.NoError(t, err)
			defer res.Release()
			require.NotEmpty(t, res.Chunks, "the read goes past the gap")
			require.EqualValues(t, 30, record.BaseOffset(res.Chunks[0].Data))
			require.EqualValues(t, 33, res.NextOffset)
		})
	}
}

// Reads run outside the log's lock while appends, truncations and
// retention change it: every read still answers whole batches, contiguous
// from the one holding its offset, or OffsetOutOfRange. A small copy
// budget sends some reads through the maps. Run under -race.
func TestReadsRaceTruncationAndRetention(t *testing.T) {
	l, _, copies, pool, _ := copiedLog(t, 48<<10)
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		rd   atomic.Int64
	)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for !stop.Load() {
				start, end := l.LogStartOffset(), l.LogEndOffset()
				if end <= start {
					continue
				}
				from := start + rng.Int64N(end-start)
				res, err := l.Read(from, end, 1+rng.IntN(40<<10))
				if err != nil {
					if !errs.Is(err, errs.OffsetOutOfRange) {
						t.Errorf("read at %d: %v", from, err)
						return
					}
					continue
				}
				next := int64(-1)
				for _, c := range res.Chunks {
					for p := 0; p < len(c.Data); {
						b := c.Data[p:]
						n := record.BatchSize(b)
						base, last := record.BaseOffset(b), record.BaseOffset(b)+int64(record.LastOffsetDelta(b))
						if _, err := record.Validate(b[:n], record.ValidateOptions{Origin: record.FromReplica, MaxBatchBytes: 1 << 20}); err != nil {
							t.Errorf("read at %d: torn batch at %d: %v", from, base, err)
						}
						if next < 0 && (base > from || last < from) || next >= 0 && base != next {
							t.Errorf("read at %d: batch [%d, %d] after %d", from, base, last, next)
						}
						next = last + 1
						p += n
					}
				}
				if next >= 0 && next != res.NextOffset {
					t.Errorf("read at %d: next offset %d, batches end at %d", from, res.NextOffset, next)
				}
				res.Release()
				rd.Add(1)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 9))
	for i := range 400 {
		_, err := l.AppendAsLeader(simpleBatch(t, 1+rng.IntN(8), int64(i)), 1, record.FromClient)
		require.NoError(t, err)
		switch {
		case i%25 == 7:
			require.NoError(t, l.TruncateTo(l.LogEndOffset()-int64(1+rng.IntN(30))))
		case i%60 == 31:
			_, err := l.DeleteRecordsBefore(l.LogStartOffset() + int64(rng.IntN(200)))
			require.NoError(t, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads; log [%d, %d) in %d segments", rd.Load(), l.LogStartOffset(), l.LogEndOffset(), l.NumSegments())
	require.Positive(t, rd.Load())
	require.Zero(t, copies.InFlight(), "every copy went back")
	require.Zero(t, pool.out.Load())
}

// A segment that outgrows its map is mapped again, longer; a read that
// planned with the shorter map walks it with no lock held. Truncation must
// wait for the readers of that older map too, not only the current one's,
// or their pages past the new end of file would fault. (The active
// segment outgrows its map when segment.bytes is raised after it was
// created.)
func TestTruncationWaitsForReadersOfAnOlderMap(t *testing.T) {
	cfg := testConfig(t, map[string]string{"segment.bytes": "16384"})
	l := openLog(t, t.TempDir(), cfg, Options{})
	defer l.Close()
	for l.Size() < 12<<10 {
		_, err := l.AppendAsLeader(simpleBatch(t, 20, 1), 1, record.FromClient)
		require.NoError(t, err)
	}
	old, err := l.Read(0, l.LogEndOffset(), 1<<20) // through the first map, held
	require.NoError(t, err)
	require.NotEmpty(t, old.Chunks)
	bigger := testConfig(t, map[string]string{"segment.bytes": "1048576"})
	require.NoError(t, l.SetConfig(bigger))
	for l.Size() < 40<<10 { // past the first map's length, in the same segment
		_, err := l.AppendAsLeader(simpleBatch(t, 20, 1), 1, record.FromClient)
		require.NoError(t, err)
	}
	require.Equal(t, 1, l.NumSegments())
	res, err := l.Read(0, l.LogEndOffset(), 1<<20) // maps the segment again, longer
	require.NoError(t, err)
	require.True(t, old.Chunks[0].m != res.Chunks[0].m, "a second, longer map")
	res.Release()

	// What truncation waits for (retention.go, truncateLocked) includes the
	// older map while its chunk is held, and not once it is released.
	seg := l.segs[0]
	require.True(t, slices.Contains(seg.retireMap(), old.Chunks[0].m), "truncation would wait for the older map's reader")
	var it record.Iterator // the held chunk is still readable
	it.Reset(old.Chunks[0].Data)
	for it.Next() {
	}
	require.NoError(t, it.Err())
	old.Release()
	res, err = l.Read(0, l.LogEndOffset(), 1<<20) // a current map again
	require.NoError(t, err)
	res.Release()
	require.Len(t, seg.retireMap(), 1, "only the current map: the released one is dropped")
	require.NoError(t, l.TruncateTo(5))
	require.EqualValues(t, 0, l.LogEndOffset(), "the batch holding offset 5 starts at 0")
}
