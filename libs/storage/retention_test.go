package storage

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

var epoch0 = time.UnixMilli(1_700_000_000_000)

func TestRetentionByTime(t *testing.T) {
	clock := NewManualClock(epoch0)
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048", "retention.ms": "60000"})
	l := openLog(t, dir, cfg, Options{Clock: clock})
	// Twenty minutes of data, one batch every ten seconds of record time.
	for i := 0; i < 120; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, epoch0.UnixMilli()+int64(i)*10_000), 0, record.FromClient)
		require.NoError(t, err)
	}
	end := l.LogEndOffset()
	segsBefore := l.NumSegments()
	require.Greater(t, segsBefore, 5)

	// Nothing is older than a minute yet (the clock is at the first record).
	res, err := l.EnforceRetention()
	require.NoError(t, err)
	require.Zero(t, res.DeletedSegments)

	// Five minutes after the first record: segments whose newest record is
	// more than a minute old go; the rest stay.
	clock.Set(epoch0.Add(5 * time.Minute))
	res, err = l.EnforceRetention()
	require.NoError(t, err)
	require.Positive(t, res.DeletedSegments)
	start := l.LogStartOffset()
	require.Equal(t, res.LogStartOffset, start)
	require.Positive(t, start)
	_, err = l.Read(start-1, end, 100)
	requireCode(t, err, errs.OffsetOutOfRange)
	// Every record newer than now - retention.ms is still there: batch i
	// holds offsets 4i..4i+3 at record time 10s*i, so the cutoff of 240 s
	// is batch 24.
	require.LessOrEqual(t, start, int64(24*4))
	offs, _ := readAll(t, l, start, end)
	require.Len(t, offs, int(end-start))
	requireLogSound(t, l)

	// An hour later everything has expired, the active segment included: it
	// is rolled and deleted, and the log start reaches the log end.
	clock.Set(epoch0.Add(time.Hour))
	_, err = l.EnforceRetention()
	require.NoError(t, err)
	require.Equal(t, end, l.LogStartOffset())
	require.Equal(t, 1, l.NumSegments())
	require.NoError(t, l.Close())

	// The log start offset survives a restart.
	l = openLog(t, dir, cfg, Options{Clock: clock})
	require.Equal(t, end, l.LogStartOffset())
	require.Equal(t, end, l.LogEndOffset())
	ar, err := l.AppendAsLeader(simpleBatch(t, 1, clock.Now().UnixMilli()), 0, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, end, ar.FirstOffset)
	require.NoError(t, l.Close())
}

func TestRetentionBySize(t *testing.T) {
	clock := NewManualClock(epoch0)
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048", "retention.bytes": "5000", "retention.ms": "-1"})
	l := openLog(t, t.TempDir(), cfg, Options{Clock: clock})
	defer l.Close()
	for i := 0; i < 100; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, epoch0.UnixMilli()), 0, record.FromClient)
		require.NoError(t, err)
	}
	res, err := l.EnforceRetention()
	require.NoError(t, err)
	require.Positive(t, res.DeletedSegments)
	// As in Kafka, a segment goes only if the log stays at least
	// retention.bytes without it.
	require.GreaterOrEqual(t, l.Size(), int64(5000))
	require.Less(t, l.Size(), int64(5000+2048))
	requireLogSound(t, l)

	// cleanup.policy=compact alone never deletes by retention.
	cfg2 := cfg
	cfg2.CleanupPolicy = CleanupCompact
	require.NoError(t, l.SetConfig(cfg2))
	for i := 0; i < 50; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, epoch0.UnixMilli()), 0, record.FromClient)
		require.NoError(t, err)
	}
	res, err = l.EnforceRetention()
	require.NoError(t, err)
	require.Zero(t, res.DeletedSegments)
}

func TestDeleteRecordsBefore(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048", "retention.ms": "-1"})
	l := openLog(t, dir, cfg, Options{})
	for i := 0; i < 60; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, 1), int32(i/20), record.FromClient)
		require.NoError(t, err)
	}
	end := l.LogEndOffset()
	segs := l.NumSegments()
	start, err := l.DeleteRecordsBefore(150)
	require.NoError(t, err)
	require.EqualValues(t, 150, start)
	require.Less(t, l.NumSegments(), segs)
	_, err = l.Read(149, end, 100)
	requireCode(t, err, errs.OffsetOutOfRange)
	offs, _ := readAll(t, l, 150, end)
	require.EqualValues(t, 150, offs[0])
	_, err = l.DeleteRecordsBefore(end + 1)
	requireCode(t, err, errs.OffsetOutOfRange)
	// The epoch cache forgets epochs wholly before the log start.
	require.Equal(t, []EpochEntry{{1, 150}, {2, 160}}, l.Epochs())
	require.NoError(t, l.Close())
	l = openLog(t, dir, cfg, Options{})
	require.EqualValues(t, 150, l.LogStartOffset())
	require.Equal(t, []EpochEntry{{1, 150}, {2, 160}}, l.Epochs())
	require.NoError(t, l.Close())
}

func TestEpochCacheAndTruncation(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048"})
	l := openLog(t, dir, cfg, Options{})
	// Epoch 1: offsets 0..39; epoch 3: 40..79; epoch 4: 80..119.
	for _, e := range []int32{1, 3, 4} {
		for i := 0; i < 10; i++ {
			_, err := l.AppendAsLeader(simpleBatch(t, 4, 1), e, record.FromClient)
			require.NoError(t, err)
		}
	}
	require.Equal(t, []EpochEntry{{1, 0}, {3, 40}, {4, 80}}, l.Epochs())
	for _, tc := range []struct {
		ask       int32
		epoch     int32
		endOffset int64
	}{
		{0, 0, 0}, // older than anything: the first start
		{1, 1, 40},
		{2, 1, 40}, // unknown epoch between: the floor's end
		{3, 3, 80},
		{4, 4, 120}, // latest: the log end
		{5, UndefinedEpoch, UndefinedOffset},
		{UndefinedEpoch, UndefinedEpoch, UndefinedOffset},
	} {
		e, o := l.EndOffsetForEpoch(tc.ask)
		require.Equal(t, tc.epoch, e, "epoch for %d", tc.ask)
		require.Equal(t, tc.endOffset, o, "end offset for %d", tc.ask)
	}

	// A follower diverged after 60: truncate there (mid-epoch 3, across a
	// segment boundary).
	require.NoError(t, l.TruncateTo(60))
	require.EqualValues(t, 60, l.LogEndOffset())
	require.Equal(t, []EpochEntry{{1, 0}, {3, 40}}, l.Epochs())
	requireLogSound(t, l)
	// A truncation point inside a batch removes the whole batch.
	require.NoError(t, l.TruncateTo(58))
	require.EqualValues(t, 56, l.LogEndOffset())
	// The replica then follows a new leader in epoch 5.
	b := simpleBatch(t, 4, 1)
	record.AssignOffsets(b, 56, 5)
	_, err := l.AppendAsFollower(b)
	require.NoError(t, err)
	require.Equal(t, []EpochEntry{{1, 0}, {3, 40}, {5, 56}}, l.Epochs())
	require.NoError(t, l.Close())

	l = openLog(t, dir, cfg, Options{})
	require.EqualValues(t, 60, l.LogEndOffset())
	require.Equal(t, []EpochEntry{{1, 0}, {3, 40}, {5, 56}}, l.Epochs())
	requireLogSound(t, l)
	// Truncating below the log start empties the log there.
	require.NoError(t, l.TruncateFullyAndStartAt(1000))
	require.EqualValues(t, 1000, l.LogStartOffset())
	require.EqualValues(t, 1000, l.LogEndOffset())
	require.Empty(t, l.Epochs())
	require.NoError(t, l.Close())
	l = openLog(t, dir, cfg, Options{})
	require.EqualValues(t, 1000, l.LogEndOffset())
	require.NoError(t, l.Close())
}

func TestFollowerAppendChecks(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	mk := func(base int64, epoch int32, n int) []byte {
		b := simpleBatch(t, n, 1)
		record.AssignOffsets(b, base, epoch)
		return b
	}
	_, err := l.AppendAsFollower(mk(0, 2, 3))
	require.NoError(t, err)
	_, err = l.AppendAsFollower(mk(2, 2, 3))
	requireCode(t, err, errs.InvalidRecord) // overlaps
	_, err = l.AppendAsFollower(mk(3, 1, 3))
	requireCode(t, err, errs.InvalidRecord) // epoch goes back
	// Gaps are allowed (a compacted leader log has them); offsets never
	// repeat.
	two := append(mk(10, 2, 2), mk(20, 3, 1)...)
	res, err := l.AppendAsFollower(two)
	require.NoError(t, err)
	require.EqualValues(t, 10, res.FirstOffset)
	require.EqualValues(t, 20, res.LastOffset)
	require.EqualValues(t, 21, l.LogEndOffset())
	require.Equal(t, []EpochEntry{{2, 0}, {3, 20}}, l.Epochs())
	// Reading into a gap starts at the next batch.
	r, err := l.Read(5, 21, 1<<20)
	require.NoError(t, err)
	h, _ := record.ParseBatchHeader(r.Chunks[0].Data)
	require.EqualValues(t, 10, h.BaseOffset)
	r.Release()
	requireLogSound(t, l)
}

func TestReadBoundsAndTimestamps(t *testing.T) {
	clock := NewManualClock(epoch0)
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "2048"}), Options{Clock: clock})
	defer l.Close()
	for i := 0; i < 50; i++ {
		// Timestamps 0, 100, 200, ... within each batch +0..+3.
		_, err := l.AppendAsLeader(simpleBatch(t, 4, int64(i)*100), 0, record.FromClient)
		require.NoError(t, err)
	}
	// The high watermark bounds reads to whole batches below it.
	r, err := l.Read(0, 42, 1<<20)
	require.NoError(t, err)
	sum, err := record.Validate(r.AppendTo(nil), record.ValidateOptions{Origin: record.FromReplica})
	require.NoError(t, err)
	require.EqualValues(t, 39, sum.LastOffset)
	require.EqualValues(t, 40, r.NextOffset)
	r.Release()
	// maxBytes returns whole batches but at least one.
	r, err = l.Read(0, 200, 1)
	require.NoError(t, err)
	require.Len(t, r.Chunks, 1)
	require.Equal(t, len(simpleBatch(t, 4, 0)), r.Bytes)
	r.Release()
	// Reads span segments.
	r, err = l.Read(0, 200, 1<<20)
	require.NoError(t, err)
	require.Greater(t, len(r.Chunks), 1)
	require.EqualValues(t, 200, r.NextOffset)
	r.Release()

	for _, tc := range []struct{ ts, offset, found int64 }{
		{-5, 0, 0}, {0, 0, 0}, {1, 1, 1}, {350, 16, 400}, {4903, 199, 4903},
	} {
		off, ts, ok, err := l.OffsetForTimestamp(tc.ts)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, tc.offset, off, "offset for %d", tc.ts)
		require.Equal(t, tc.found, ts)
	}
	_, _, ok, err := l.OffsetForTimestamp(4904)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestLogAppendTime(t *testing.T) {
	clock := NewManualClock(epoch0)
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"message.timestamp.type": "LogAppendTime"}), Options{Clock: clock})
	defer l.Close()
	res, err := l.AppendAsLeader(simpleBatch(t, 3, 5), 0, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, epoch0.UnixMilli(), res.LogAppendTime)
	r, err := l.Read(0, 3, 1000)
	require.NoError(t, err)
	var it record.Iterator
	it.Reset(r.AppendTo(nil))
	r.Release()
	for it.Next() {
		require.Equal(t, epoch0.UnixMilli(), it.Record().Timestamp)
	}
	require.NoError(t, it.Err())
}

func TestChunksOutliveDeletion(t *testing.T) {
	clock := NewManualClock(epoch0)
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048", "retention.ms": "1000"})
	l := openLog(t, t.TempDir(), cfg, Options{Clock: clock})
	for i := 0; i < 40; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, epoch0.UnixMilli()), 0, record.FromClient)
		require.NoError(t, err)
	}
	r, err := l.Read(0, l.LogEndOffset(), 1<<20)
	require.NoError(t, err)
	want := r.AppendTo(nil)
	clock.Advance(time.Hour)
	res, err := l.EnforceRetention()
	require.NoError(t, err)
	require.Positive(t, res.DeletedSegments)
	require.NoError(t, l.Close())
	// The segments are deleted and the log closed; the chunks still read.
	require.True(t, bytes.Equal(want, r.AppendTo(nil)))
	r.Release()
}
