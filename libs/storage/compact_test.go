package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

type seenRecord struct {
	offset int64
	key    string
	value  []byte // nil: tombstone
}

// readRecords decodes every record of the log.
func readRecords(t *testing.T, l *Log) []seenRecord {
	t.Helper()
	var out []seenRecord
	var it record.Iterator
	from, end := l.LogStartOffset(), l.LogEndOffset()
	for from < end {
		res, err := l.Read(from, end, 1<<20)
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		from = res.NextOffset
		res.Release()
		it.Reset(buf)
		for it.Next() {
			r := it.Record()
			out = append(out, seenRecord{r.Offset, string(r.Key), bytes.Clone(r.Value)})
		}
		require.NoError(t, it.Err())
	}
	return out
}

func compactConfig(t *testing.T) Config {
	return testConfig(t, map[string]string{
		"cleanup.policy": "compact", "segment.bytes": "2048", "delete.retention.ms": "60000",
		"min.compaction.lag.ms": "0",
	})
}

// writeUpdates appends n batches of random updates to 30 keys, some of them
// tombstones, with every codec, and returns the records in append order.
func writeUpdates(t *testing.T, l *Log, rng *rand.Rand, n int, ts int64) []seenRecord {
	var all []seenRecord
	codecs := []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd}
	for i := 0; i < n; i++ {
		b := record.NewBuilder(codecs[i%len(codecs)])
		var recs []seenRecord
		for j := 0; j < 1+rng.IntN(5); j++ {
			k := fmt.Sprintf("key-%02d", rng.IntN(30))
			var v []byte
			if rng.IntN(8) > 0 {
				v = []byte(fmt.Sprintf("%s=%d.%d", k, i, j))
			}
			require.NoError(t, b.AppendKV(ts, []byte(k), v))
			recs = append(recs, seenRecord{key: k, value: v})
		}
		batch, err := b.Build()
		require.NoError(t, err)
		res, err := l.AppendAsLeader(batch, 0, record.FromClient)
		require.NoError(t, err)
		for j := range recs {
			recs[j].offset = res.FirstOffset + int64(j)
		}
		all = append(all, recs...)
	}
	return all
}

// checkCompacted checks the compaction contract: below cleanedTo each key
// appears at most once, as its latest record; every record at or after
// cleanedTo is untouched; offsets keep their order.
func checkCompacted(t *testing.T, written, got []seenRecord, cleanedTo int64, tombstonesGone bool) {
	t.Helper()
	// The compacted prefix keeps, per key, the latest record of the prefix
	// (a later record outside it supersedes it only in a later pass).
	latest, latestBelow := map[string]seenRecord{}, map[string]seenRecord{}
	for _, r := range written {
		latest[r.key] = r
		if r.offset < cleanedTo {
			latestBelow[r.key] = r
		}
	}
	seen := map[string]bool{}
	prev := int64(-1)
	byOffset := map[int64]seenRecord{}
	for _, r := range written {
		byOffset[r.offset] = r
	}
	for _, r := range got {
		require.Greater(t, r.offset, prev, "order kept")
		prev = r.offset
		w, ok := byOffset[r.offset]
		require.True(t, ok, "offset %d was never written", r.offset)
		require.Equal(t, w.key, r.key)
		require.Equal(t, w.value, r.value, "value at %d", r.offset)
		if r.offset < cleanedTo {
			require.False(t, seen[r.key], "key %s twice in the compacted part", r.key)
			require.Equal(t, latestBelow[r.key].offset, r.offset, "only the latest record of %s survives", r.key)
			if tombstonesGone {
				require.NotNil(t, r.value, "tombstone of %s past its horizon", r.key)
			}
		}
		seen[r.key] = true
	}
	// Every key's latest record survives, unless it is a tombstone past
	// its horizon; every record after cleanedTo survives.
	gotOffsets := map[int64]bool{}
	for _, r := range got {
		gotOffsets[r.offset] = true
	}
	for k, r := range latest {
		if r.value == nil && tombstonesGone && r.offset < cleanedTo {
			continue
		}
		require.True(t, gotOffsets[r.offset], "latest record of %s (offset %d) lost", k, r.offset)
	}
	for _, r := range written {
		if r.offset >= cleanedTo {
			require.True(t, gotOffsets[r.offset], "uncleaned record at %d lost", r.offset)
		}
	}
}

func TestCompactionKeepsLatestValuePerKey(t *testing.T) {
	clock := NewManualClock(epoch0)
	dir := t.TempDir()
	cfg := compactConfig(t)
	l := openLog(t, dir, cfg, Options{Clock: clock})
	rng := rand.New(rand.NewPCG(11, 12))
	written := writeUpdates(t, l, rng, 150, epoch0.UnixMilli())
	require.NoError(t, l.Flush())
	sizeBefore := l.Size()

	res, err := l.Compact(context.Background(), true)
	require.NoError(t, err)
	require.Positive(t, res.Segments)
	require.Positive(t, res.RecordsRemoved)
	require.Less(t, l.Size(), sizeBefore)
	got := readRecords(t, l)
	checkCompacted(t, written, got, res.CleanedTo, false)
	requireLogSound(t, l)

	// Tombstones stay until delete.retention.ms after they were first
	// cleaned, then go.
	clock.Advance(59 * time.Second)
	res2, err := l.Compact(context.Background(), true)
	require.NoError(t, err)
	require.Zero(t, res2.TombstonesRemoved)
	clock.Advance(2 * time.Second)
	res3, err := l.Compact(context.Background(), true)
	require.NoError(t, err)
	require.Positive(t, res3.TombstonesRemoved)
	got = readRecords(t, l)
	checkCompacted(t, written, got, res3.CleanedTo, true)

	// More updates, another pass, then a restart: the same records.
	written = append(written, writeUpdates(t, l, rng, 60, clock.Now().UnixMilli())...)
	require.NoError(t, l.Flush())
	res4, err := l.Compact(context.Background(), true)
	require.NoError(t, err)
	got = readRecords(t, l)
	checkCompacted(t, written, got, res4.CleanedTo, false)
	require.NoError(t, l.Close())
	l = openLog(t, dir, cfg, Options{Clock: clock})
	require.Equal(t, got, readRecords(t, l))
	require.NoError(t, l.Close())
}

func TestCompactionRunsAlongsideAppendsAndReads(t *testing.T) {
	clock := NewManualClock(epoch0)
	cfg := compactConfig(t)
	cfg.FsyncBeforeAck = false
	l := openLog(t, t.TempDir(), cfg, Options{Clock: clock})
	defer l.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	written := writeUpdates(t, l, rng, 100, epoch0.UnixMilli())
	require.NoError(t, l.Flush())

	var mu sync.Mutex
	stop := make(chan struct{})
	appended := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // appender: a bounded amount, so the test's cost is too
		defer wg.Done()
		defer close(appended)
		r := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 300; i++ {
			recs := writeUpdates(t, l, r, 1, epoch0.UnixMilli())
			mu.Lock()
			written = append(written, recs...)
			mu.Unlock()
		}
	}()
	go func() { // reader: whatever it reads is whole, valid batches
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := l.Read(l.LogStartOffset(), l.LogEndOffset(), 64<<10)
			if err != nil {
				t.Error(err)
				return
			}
			if len(res.Chunks) > 0 {
				if _, err := record.Validate(res.AppendTo(nil), record.ValidateOptions{Origin: record.FromReplica}); err != nil {
					t.Error(err)
				}
			}
			res.Release()
		}
	}()
	// Compact over and over while the appender runs.
	var cleanedTo int64
	passes := 0
	for done := false; !done || passes < 3; passes++ {
		select {
		case <-appended:
			done = true
		default:
		}
		res, err := l.Compact(context.Background(), true)
		require.NoError(t, err)
		cleanedTo = max(cleanedTo, res.CleanedTo)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d compactions alongside %d appended records", passes, len(written))
	require.Positive(t, cleanedTo)
	checkCompacted(t, written, readRecords(t, l), cleanedTo, false)
	requireLogSound(t, l)
}

func TestCompactionTransactions(t *testing.T) {
	clock := NewManualClock(epoch0)
	l := openLog(t, t.TempDir(), compactConfig(t), Options{Clock: clock})
	defer l.Close()
	ts := epoch0.UnixMilli()
	appendKV := func(pid int64, txn bool, key, value string) {
		b := record.NewBuilder(record.CodecNone)
		if pid >= 0 {
			b.SetProducer(pid, 0, 0)
		}
		b.SetTransactional(txn)
		require.NoError(t, b.AppendKV(ts, []byte(key), []byte(value)))
		batch, err := b.Build()
		require.NoError(t, err)
		if txn {
			l.VerifiedTxn(l.BeginTxnCheck(pid), pid, 0)
		}
		_, err = l.AppendAsLeader(bytes.Clone(batch), 0, record.FromClient)
		require.NoError(t, err)
	}
	marker := func(pid int64, t2 record.ControlType) {
		_, err := l.AppendAsLeader(record.AppendEndTxnMarker(nil, pid, 0, t2, 1, ts), 0, record.FromCoordinator)
		require.NoError(t, err)
	}
	appendKV(-1, false, "a", "a1")  // 0
	appendKV(7, true, "a", "a2")    // 1: aborted below
	appendKV(8, true, "b", "b1")    // 2: committed below
	marker(7, record.ControlAbort)  // 3
	marker(8, record.ControlCommit) // 4
	appendKV(-1, false, "b", "b2")  // 5
	appendKV(9, true, "c", "c1")    // 6: still open
	for i := 0; i < 40; i++ {       // fill and roll segments
		appendKV(-1, false, fmt.Sprintf("z%d", i), string(make([]byte, 100)))
	}
	require.NoError(t, l.Flush())
	_, err := l.Compact(context.Background(), true)
	require.NoError(t, err)
	var got []string
	controls := 0
	var it record.Iterator
	res, err := l.Read(0, l.LogEndOffset(), 1<<20)
	require.NoError(t, err)
	it.Reset(res.AppendTo(nil))
	res.Release()
	for it.Next() {
		r := it.Record()
		if it.Batch().Attributes.Control() {
			controls++
			continue
		}
		if r.Offset < 7 {
			got = append(got, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
		}
	}
	require.NoError(t, it.Err())
	// a1 survives: the later a2 was aborted. b1 is superseded by b2. The
	// open transaction's c1 is kept. Markers stay until their horizon.
	require.Equal(t, []string{"0:a=a1", "5:b=b2", "6:c=c1"}, got)
	require.Equal(t, 2, controls)
}

func TestCompactionSwapSurvivesCrash(t *testing.T) {
	clock := NewManualClock(epoch0)
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 9)
	cfg := compactConfig(t)
	l := openLog(t, dir, cfg, Options{Clock: clock, FS: fs})
	rng := rand.New(rand.NewPCG(31, 32))
	written := writeUpdates(t, l, rng, 120, epoch0.UnixMilli())
	require.NoError(t, l.Flush())
	sizeBefore := l.Size()
	// Fail right after the commit point: deleting the old segments.
	fs.Inject(vfs.Fault{Op: vfs.OpRemove, PathSuffix: logSuffix, Err: vfs.EIO})
	_, err := l.Compact(context.Background(), true)
	require.Error(t, err)
	l.abandon()
	fs.ClearFaults()

	l = openLog(t, dir, cfg, Options{Clock: clock, FS: fs})
	names, err := fs.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		require.NotContains(t, n, swapSuffix)
		require.NotContains(t, n, cleanedSuffix)
	}
	require.Less(t, l.Size(), sizeBefore, "the interrupted swap was completed")
	got := readRecords(t, l)
	requireLogSound(t, l)
	// The first group was swapped in during recovery; whatever was cleaned
	// obeys the contract, and nothing written is lost beyond compaction.
	cleanedTo := int64(0)
	if len(got) > 0 {
		for _, s := range l.segs[:len(l.segs)-1] {
			if s.base == 0 {
				cleanedTo = s.next
			}
		}
	}
	checkCompacted(t, written, got, cleanedTo, false)
	require.NoError(t, l.Close())
}

func TestCleanerRunsRetentionAndCompaction(t *testing.T) {
	clock := NewManualClock(epoch0)
	cfg := compactConfig(t)
	cfg.CleanupPolicy = CleanupCompact | CleanupDelete
	cfg.RetentionMs = 3_600_000
	cfg.MinCleanableDirtyRatio = 0.1
	compacted := openLog(t, t.TempDir(), cfg, Options{Clock: clock})
	defer compacted.Close()
	plain := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "2048", "retention.ms": "60000"}), Options{Clock: clock})
	defer plain.Close()

	rng := rand.New(rand.NewPCG(41, 42))
	written := writeUpdates(t, compacted, rng, 120, epoch0.UnixMilli())
	for i := 0; i < 40; i++ {
		_, err := plain.AppendAsLeader(simpleBatch(t, 4, epoch0.UnixMilli()), 0, record.FromClient)
		require.NoError(t, err)
	}
	c := NewCleaner(CleanerOptions{Interval: time.Hour})
	defer c.Close()
	c.Add(compacted)
	c.Add(plain)
	sizeBefore := compacted.Size()
	clock.Advance(2 * time.Minute) // past the plain log's retention, not the compacted one's
	c.Trigger()
	testutilEventually(t, func() error {
		if compacted.Size() >= sizeBefore {
			return fmt.Errorf("compacted log still %d bytes", compacted.Size())
		}
		// A pass swaps cleaned segments in group by group and records how
		// far it cleaned only at its end: the size shrinks first.
		if compacted.cleanedOffset() == 0 {
			return errors.New("compaction pass not finished")
		}
		if plain.LogStartOffset() != plain.LogEndOffset() {
			return fmt.Errorf("plain log starts at %d, ends at %d", plain.LogStartOffset(), plain.LogEndOffset())
		}
		return nil
	})
	checkCompacted(t, written, readRecords(t, compacted), compacted.cleanedOffset(), false)
	c.Remove(plain)
}

// errAfter is a context whose Err starts failing after n calls: a cleaner
// stopped at a chosen point of a pass.
type errAfter struct {
	context.Context
	n int
}

func (c *errAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// A pass stopped at any point fails cleanly: no panic, no leftover output,
// a sound log that lost nothing a compaction keeps (groups cleaned before
// the stop stay cleaned), and the next pass finishes the work.
func TestCompactionStoppedMidwayLeavesASoundLog(t *testing.T) {
	stopped := 0
	for stopAt := 0; stopAt < 12; stopAt++ {
		clock := NewManualClock(epoch0)
		dir := t.TempDir()
		l := openLog(t, dir, compactConfig(t), Options{Clock: clock})
		rng := rand.New(rand.NewPCG(21, uint64(stopAt)))
		written := writeUpdates(t, l, rng, 150, epoch0.UnixMilli())
		require.NoError(t, l.Flush())

		_, err := l.Compact(&errAfter{Context: context.Background(), n: stopAt}, true)
		if err != nil {
			stopped++
			require.ErrorIs(t, err, context.Canceled)
		}
		entries, rerr := os.ReadDir(dir)
		require.NoError(t, rerr)
		for _, e := range entries {
			require.NotContains(t, e.Name(), cleanedSuffix, "stop after %d checks left %s", stopAt, e.Name())
		}
		requireLogSound(t, l)
		got := readRecords(t, l)
		byOffset := map[int64]seenRecord{}
		latest := map[string]int64{}
		for _, r := range written {
			byOffset[r.offset] = r
			latest[r.key] = r.offset
		}
		present := map[int64]bool{}
		for i, r := range got {
			require.Equal(t, byOffset[r.offset], r, "stop after %d checks: record at %d", stopAt, r.offset)
			require.True(t, i == 0 || got[i-1].offset < r.offset, "order kept")
			present[r.offset] = true
		}
		for k, off := range latest {
			require.True(t, present[off], "stop after %d checks: latest record of %s lost", stopAt, k)
		}

		res, err := l.Compact(context.Background(), true)
		require.NoError(t, err)
		checkCompacted(t, written, readRecords(t, l), res.CleanedTo, false)
		require.NoError(t, l.Close())
	}
	require.Positive(t, stopped, "no pass was stopped: the test checks nothing")
}

// badBatches returns two batches with a valid header and CRC whose records
// do not decode, for offsets from base on: random bytes as records, and a
// record count above the records present. Old logs may hold such batches
// (they were once accepted from producers); replicas copy them as they are.
func badBatches(t *testing.T, base int64, epoch int32) [][]byte {
	t.Helper()
	build := func(codec record.Codec) []byte {
		b := record.NewBuilder(codec)
		for i := range 3 {
			require.NoError(t, b.AppendKV(epoch0.UnixMilli(), []byte(fmt.Sprintf("bad-%d", i)), []byte("some value of a few bytes")))
		}
		out, err := b.Build()
		require.NoError(t, err)
		return bytes.Clone(out)
	}
	random := build(record.CodecNone)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := record.BatchHeaderSize; i < len(random); i++ {
		random[i] = byte(rng.Uint32())
	}
	record.UpdateCRC(random)
	short := build(record.CodecZstd)
	binary.BigEndian.PutUint32(short[57:], 4) // record count
	binary.BigEndian.PutUint32(short[23:], 3) // last offset delta
	record.UpdateCRC(short)
	var out [][]byte
	for _, b := range [][]byte{random, short} {
		record.SetBaseOffset(b, base)
		record.SetPartitionLeaderEpoch(b, epoch)
		base += int64(record.LastOffsetDelta(b)) + 1
		out = append(out, b)
	}
	return out
}

// A batch compaction cannot decode is kept as it is, reported, and counted;
// the log stays online and compaction goes on around it, also after a
// restart. (It used to fail the log with KAFKA_STORAGE_ERROR on every pass.)
func TestCompactionKeepsUnreadableBatch(t *testing.T) {
	clock := NewManualClock(epoch0)
	dir := t.TempDir()
	cfg := compactConfig(t)
	l := openLog(t, dir, cfg, Options{Clock: clock})
	rng := rand.New(rand.NewPCG(21, 22))
	writeUpdates(t, l, rng, 40, epoch0.UnixMilli())
	bad := badBatches(t, l.LogEndOffset(), 0)
	for _, b := range bad {
		_, err := l.AppendAsFollower(bytes.Clone(b))
		require.NoError(t, err)
	}
	writeUpdates(t, l, rng, 40, epoch0.UnixMilli())
	require.NoError(t, l.Flush())

	for pass := range 2 {
		res, err := l.Compact(context.Background(), true)
		require.NoError(t, err, "pass %d", pass)
		require.Positive(t, res.Segments)
		require.NoError(t, l.Err(), "the log stays online")
		require.EqualValues(t, 2*(pass+1), l.UnreadableBatches(), "each bad batch counted once per pass")
		_, err = l.AppendAsLeader(makeBatch(t, record.CodecNone, epoch0.UnixMilli(), []string{"after"}, "compaction"), 0, record.FromClient)
		require.NoError(t, err, "appends go on")
	}
	// Both bad batches are still there, byte for byte.
	res, err := l.Read(l.LogStartOffset(), l.LogEndOffset(), 1<<30)
	require.NoError(t, err)
	all := res.AppendTo(nil)
	res.Release()
	for _, b := range bad {
		require.True(t, bytes.Contains(all, b[record.LogOverhead:]), "bad batch at %d kept as it was", record.BaseOffset(b))
	}
	// The rest was compacted: no key twice below the first bad batch.
	seen := map[string]bool{}
	var it record.Iterator
	it.Reset(all)
	for it.Next() {
		r := it.Record()
		if r.Offset >= record.BaseOffset(bad[0]) {
			break
		}
		require.False(t, seen[string(r.Key)], "key %s twice", r.Key)
		seen[string(r.Key)] = true
	}
	require.Equal(t, record.BaseOffset(bad[0]), it.ErrOffset(), "reading stops at the first bad batch")

	// After a restart the same pass meets the same batches and goes on.
	require.NoError(t, l.Close())
	l = openLog(t, dir, cfg, Options{Clock: clock})
	defer func() { require.NoError(t, l.Close()) }()
	_, err = l.Compact(context.Background(), true)
	require.NoError(t, err)
	require.NoError(t, l.Err())
	require.EqualValues(t, 2, l.UnreadableBatches())
}
