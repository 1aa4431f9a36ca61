package storage

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

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

	l, fs, copies, pool, end := copiedLog(t, 1<<20)
	remove := fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO})
	checkRead(t, l, 0, end, 3000, "map")
	remove()
	require.Zero(t, copies.InFlight())
	require.Zero(t, pool.out.Load())

	// A read that fails after the window was placed: the walk goes on
	// through the map.
	remove = fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO, After: 1})
	checkRead(t, l, 0, end, 1, "")
	remove()
	require.Zero(t, copies.InFlight())
	checkRead(t, l, 0, end, 3000, "copy")
	require.Zero(t, pool.out.Load())
}
