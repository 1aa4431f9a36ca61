package storage

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// producerBatch builds a batch of n records of producer pid at epoch,
// starting at sequence seq.
func idemBatch(t testing.TB, pid int64, epoch int16, seq int32, n int, txn bool) []byte {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(pid, epoch, seq)
	b.SetTransactional(txn)
	for i := 0; i < n; i++ {
		require.NoError(t, b.AppendKV(epoch0.UnixMilli(), []byte(fmt.Sprintf("k%d", i)), []byte("v")))
	}
	batch, err := b.Build()
	require.NoError(t, err)
	return bytes.Clone(batch)
}

// confirmed marks a transactional batch's transaction as confirmed by its
// coordinator on l, as the storage node does before appending it.
func confirmed(l *Log, batch []byte) []byte {
	if h, ok := record.ParseBatchHeader(batch); ok && h.Attributes.Transactional() {
		l.VerifiedTxn(l.BeginTxnCheck(h.ProducerID), h.ProducerID, h.ProducerEpoch)
	}
	return batch
}

func TestIdempotentAppends(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	app := func(b []byte) (AppendResult, error) { return l.AppendAsLeader(b, 0, record.FromClient) }

	r0, err := app(idemBatch(t, 7, 0, 0, 5, false))
	require.NoError(t, err)
	r1, err := app(idemBatch(t, 7, 0, 5, 3, false))
	require.NoError(t, err)
	require.Equal(t, int64(5), r1.FirstOffset)

	// A retry of either batch is answered with its original offsets and
	// appends nothing.
	for _, want := range []AppendResult{r0, r1} {
		seq := int32(want.FirstOffset)
		n := int(want.LastOffset - want.FirstOffset + 1)
		got, err := app(idemBatch(t, 7, 0, seq, n, false))
		require.NoError(t, err)
		require.True(t, got.Duplicate)
		require.Equal(t, want.FirstOffset, got.FirstOffset)
		require.Equal(t, want.LastOffset, got.LastOffset)
	}
	require.Equal(t, int64(8), l.LogEndOffset())

	// A gap, a batch that overlaps but is not a retry, an old epoch, and
	// a new epoch not starting at 0 are refused and change nothing.
	_, err = app(idemBatch(t, 7, 0, 9, 1, false))
	requireCode(t, err, errs.OutOfOrderSequenceNumber)
	_, err = app(idemBatch(t, 7, 0, 5, 1, false))
	requireCode(t, err, errs.OutOfOrderSequenceNumber)
	_, err = app(idemBatch(t, 7, 1, 3, 1, false))
	requireCode(t, err, errs.OutOfOrderSequenceNumber)
	require.Equal(t, int64(8), l.LogEndOffset())

	// A new epoch at 0 is accepted and fences the old one.
	_, err = app(idemBatch(t, 7, 1, 0, 1, false))
	require.NoError(t, err)
	_, err = app(idemBatch(t, 7, 0, 8, 1, false))
	requireCode(t, err, errs.InvalidProducerEpoch)

	// Another producer is independent, and an unknown producer may start
	// anywhere (Kafka's rule for expired producers).
	_, err = app(idemBatch(t, 8, 0, 100, 2, false))
	require.NoError(t, err)

	// Two batches of one producer in one append cannot be deduplicated as
	// a unit and are refused.
	two := append(idemBatch(t, 8, 0, 102, 1, false), idemBatch(t, 8, 0, 103, 1, false)...)
	_, err = app(two)
	requireCode(t, err, errs.InvalidRecord)
	require.Equal(t, int64(11), l.LogEndOffset())
}

func TestIdempotenceWindowIsFiveBatches(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	for i := int32(0); i < 6; i++ {
		_, err := l.AppendAsLeader(idemBatch(t, 1, 0, i, 1, false), 0, record.FromClient)
		require.NoError(t, err)
	}
	// Batches 1..5 are remembered; batch 0 fell out of the window.
	for i := int32(1); i < 6; i++ {
		res, err := l.AppendAsLeader(idemBatch(t, 1, 0, i, 1, false), 0, record.FromClient)
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, int64(i), res.FirstOffset)
	}
	_, err := l.AppendAsLeader(idemBatch(t, 1, 0, 0, 1, false), 0, record.FromClient)
	requireCode(t, err, errs.OutOfOrderSequenceNumber)
}

func TestSequenceWrapsAtMaxInt32(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	_, err := l.AppendAsLeader(idemBatch(t, 1, 0, math.MaxInt32-1, 2, false), 0, record.FromClient)
	require.NoError(t, err)
	_, err = l.AppendAsLeader(idemBatch(t, 1, 0, 0, 1, false), 0, record.FromClient)
	require.NoError(t, err)
}

// copyToFollower appends everything the leader has from the follower's end.
func copyToFollower(t *testing.T, leader, follower *Log) {
	t.Helper()
	for from := follower.LogEndOffset(); from < leader.LogEndOffset(); {
		res, err := leader.Read(from, leader.LogEndOffset(), 1<<20)
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		from = res.NextOffset
		res.Release()
		_, err = follower.AppendAsFollower(buf)
		require.NoError(t, err)
	}
}

// randomProducerTraffic appends a mix of plain, idempotent and
// transactional batches with commit and abort markers, and retries.
func randomProducerTraffic(t *testing.T, l *Log, rng *rand.Rand, n int) {
	t.Helper()
	seq := map[int64]int32{}
	open := map[int64]bool{}
	for i := 0; i < n; i++ {
		pid := int64(rng.IntN(4))
		switch k := rng.IntN(10); {
		case k == 0:
			_, err := l.AppendAsLeader(simpleBatch(t, 1, int64(i)), 0, record.FromClient)
			require.NoError(t, err)
		case k <= 2 && open[pid]:
			ct := record.ControlCommit
			if rng.IntN(2) == 0 {
				ct = record.ControlAbort
			}
			_, err := l.AppendAsLeader(record.AppendEndTxnMarker(nil, pid, 0, ct, 3, epoch0.UnixMilli()), 0, record.FromCoordinator)
			require.NoError(t, err)
			open[pid] = false
		default:
			txn := pid >= 2
			cnt := 1 + rng.IntN(3)
			res, err := l.AppendAsLeader(confirmed(l, idemBatch(t, pid, 0, seq[pid], cnt, txn)), 0, record.FromClient)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			if rng.IntN(4) == 0 { // a retry
				dup, err := l.AppendAsLeader(idemBatch(t, pid, 0, seq[pid], cnt, txn), 0, record.FromClient)
				require.NoError(t, err)
				require.True(t, dup.Duplicate)
				require.Equal(t, res.FirstOffset, dup.FirstOffset)
			}
			seq[pid] += int32(cnt)
			open[pid] = open[pid] || txn
		}
	}
}

func TestProducerStateOnFollowersAndAfterRecovery(t *testing.T) {
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048"})
	rng := rand.New(rand.NewPCG(1, 2))
	leaderDir, followerDir := t.TempDir(), t.TempDir()
	leader := openLog(t, leaderDir, cfg, Options{})
	follower := openLog(t, followerDir, cfg, Options{})
	randomProducerTraffic(t, leader, rng, 300)
	copyToFollower(t, leader, follower)
	want := leader.Producers()
	wantAborted := leader.AbortedTransactions(0, leader.LogEndOffset())
	wantFirst, wantOpen := leader.FirstUnstableOffset()
	require.NotEmpty(t, wantAborted, "the traffic aborted transactions")
	require.Greater(t, leader.NumSegments(), 3)

	check := func(what string, l *Log) {
		t.Helper()
		require.Equal(t, want, l.Producers(), what)
		require.Equal(t, wantAborted, l.AbortedTransactions(0, l.LogEndOffset()), what)
		first, open := l.FirstUnstableOffset()
		require.Equal(t, wantOpen, open, what)
		require.Equal(t, wantFirst, first, what)
	}
	check("follower", follower)
	require.NoError(t, follower.Close())

	// After a crash, from the last roll's snapshot plus a replay of the
	// active segment.
	last := leader.snapshotOffsets()
	require.Less(t, last[len(last)-1], leader.LogEndOffset())
	leader.abandon()
	leader = openLog(t, leaderDir, cfg, Options{})
	check("recovered", leader)

	// After a clean shutdown, from the snapshot written at close.
	require.NoError(t, leader.Close())
	last = leader.snapshotOffsets()
	require.Equal(t, leader.LogEndOffset(), last[len(last)-1])
	leader = openLog(t, leaderDir, cfg, Options{})
	check("reopened", leader)

	// With every snapshot lost or damaged, from the whole log.
	leader.abandon()
	for i, off := range leader.snapshotOffsets() {
		name := fmt.Sprintf("%s/%s", leaderDir, segmentFileName(off, snapshotSuffix))
		if i%2 == 0 {
			require.NoError(t, vfs.OS.Remove(name))
		} else {
			require.NoError(t, vfs.WriteFileAtomic(vfs.OS, name, []byte("SLPS garbage")))
		}
	}
	leader = openLog(t, leaderDir, cfg, Options{})
	check("rebuilt", leader)
	require.NoError(t, leader.Close())
}

func TestTruncationRewindsProducerState(t *testing.T) {
	cfg := testConfig(t, map[string]string{"segment.bytes": "1024"})
	l := openLog(t, t.TempDir(), cfg, Options{})
	defer l.Close()
	var cut int64
	for i := int32(0); i < 30; i++ {
		res, err := l.AppendAsLeader(confirmed(l, idemBatch(t, 1, 0, i, 1, i >= 20)), 0, record.FromClient)
		require.NoError(t, err)
		if i == 15 {
			cut = res.FirstOffset
		}
	}
	require.Greater(t, l.NumSegments(), 2)
	require.NoError(t, l.TruncateTo(cut))
	p := l.Producers()
	require.Len(t, p, 1)
	require.Equal(t, int32(14), p[0].LastSequence)
	_, open := l.FirstUnstableOffset()
	require.False(t, open, "the truncated transaction is gone")
	// The truncated batch is new again, not a retry.
	res, err := l.AppendAsLeader(idemBatch(t, 1, 0, 15, 1, false), 0, record.FromClient)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, cut, res.FirstOffset)
	for _, off := range l.snapshotOffsets() {
		require.LessOrEqual(t, off, l.LogEndOffset(), "snapshot beyond the log end kept")
	}

	require.NoError(t, l.TruncateFullyAndStartAt(100))
	require.Empty(t, l.Producers())
	require.Empty(t, l.snapshotOffsets())
}

func TestTransactionsTrackedPerPartition(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	app := func(b []byte, o record.Origin) AppendResult {
		res, err := l.AppendAsLeader(confirmed(l, b), 0, o)
		require.NoError(t, err)
		return res
	}
	app(simpleBatch(t, 2, 0), record.FromClient)                // 0-1
	a := app(idemBatch(t, 5, 0, 0, 2, true), record.FromClient) // 2-3
	c := app(idemBatch(t, 6, 0, 0, 1, true), record.FromClient) // 4
	app(idemBatch(t, 5, 0, 2, 1, true), record.FromClient)      // 5
	first, open := l.FirstUnstableOffset()
	require.True(t, open)
	require.Equal(t, a.FirstOffset, first)
	m := app(record.AppendEndTxnMarker(nil, 5, 0, record.ControlAbort, 1, 0), record.FromCoordinator) // 6
	first, _ = l.FirstUnstableOffset()
	require.Equal(t, c.FirstOffset, first)
	app(record.AppendEndTxnMarker(nil, 6, 0, record.ControlCommit, 1, 0), record.FromCoordinator) // 7
	_, open = l.FirstUnstableOffset()
	require.False(t, open)
	aborted := []AbortedTxn{{ProducerID: 5, FirstOffset: a.FirstOffset, LastOffset: m.FirstOffset}}
	require.Equal(t, aborted, l.AbortedTransactions(0, 8))
	require.Equal(t, aborted, l.AbortedTransactions(4, 5), "overlapping range")
	require.Empty(t, l.AbortedTransactions(0, 2), "range before the transaction")
	require.Empty(t, l.AbortedTransactions(7, 8), "range after its marker")

	// A marker with an epoch older than the producer's is refused (a
	// deposed coordinator or fenced producer), and so is the producer.
	app(idemBatch(t, 5, 2, 0, 1, false), record.FromClient)
	_, err := l.AppendAsLeader(record.AppendEndTxnMarker(nil, 5, 1, record.ControlAbort, 1, 0), 0, record.FromCoordinator)
	requireCode(t, err, errs.InvalidProducerEpoch)
	// So is a marker from an older coordinator epoch than the last one.
	app(idemBatch(t, 6, 0, 1, 1, true), record.FromClient)
	_, err = l.AppendAsLeader(record.AppendEndTxnMarker(nil, 6, 0, record.ControlAbort, 0, 0), 0, record.FromCoordinator)
	requireCode(t, err, errs.TransactionCoordinatorFenced)
	_, open = l.FirstUnstableOffset()
	require.True(t, open, "the refused marker ended nothing")
}

// KIP-890: a transactional batch opens a transaction on a partition only
// after the coordinator confirmed it, and a marker in between withdraws the
// confirmation, so a late batch of an ended transaction is refused.
func TestTransactionalBatchNeedsConfirmation(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	_, err := l.AppendAsLeader(idemBatch(t, 3, 0, 0, 1, true), 0, record.FromClient)
	requireCode(t, err, errs.InvalidTxnState)
	require.Zero(t, l.LogEndOffset())

	require.True(t, l.VerifiedTxn(l.BeginTxnCheck(3), 3, 0))
	_, err = l.AppendAsLeader(idemBatch(t, 3, 0, 0, 1, true), 0, record.FromClient)
	require.NoError(t, err)
	require.True(t, l.InTransaction(3, 0))
	_, err = l.AppendAsLeader(idemBatch(t, 3, 0, 1, 1, true), 0, record.FromClient)
	require.NoError(t, err, "later batches of the open transaction need no new confirmation")

	// A confirmation given, then the transaction ends before the batch
	// arrives: the batch is refused.
	_, err = l.AppendAsLeader(record.AppendEndTxnMarker(nil, 3, 0, record.ControlCommit, 0, 0), 0, record.FromCoordinator)
	require.NoError(t, err)
	require.True(t, l.VerifiedTxn(l.BeginTxnCheck(3), 3, 0))
	_, err = l.AppendAsLeader(record.AppendEndTxnMarker(nil, 3, 0, record.ControlAbort, 0, 0), 0, record.FromCoordinator)
	require.NoError(t, err)
	_, err = l.AppendAsLeader(idemBatch(t, 3, 0, 2, 1, true), 0, record.FromClient)
	requireCode(t, err, errs.InvalidTxnState)
	_, open := l.FirstUnstableOffset()
	require.False(t, open)

	// The coordinator's answer arrives after a marker was written: the
	// check was withdrawn while the question was out, and the late batch is
	// refused even though the coordinator said yes (before the transaction
	// ended).
	check := l.BeginTxnCheck(3)
	_, err = l.AppendAsLeader(record.AppendEndTxnMarker(nil, 3, 0, record.ControlAbort, 0, 0), 0, record.FromCoordinator)
	require.NoError(t, err)
	require.False(t, l.VerifiedTxn(check, 3, 0))
	_, err = l.AppendAsLeader(idemBatch(t, 3, 0, 2, 1, true), 0, record.FromClient)
	requireCode(t, err, errs.InvalidTxnState)

	// A confirmation for another epoch does not count.
	require.True(t, l.VerifiedTxn(l.BeginTxnCheck(3), 3, 1))
	_, err = l.AppendAsLeader(idemBatch(t, 3, 0, 2, 1, true), 0, record.FromClient)
	requireCode(t, err, errs.InvalidTxnState)
	// Coordinators' own transactional writes (offsets) are not checked.
	_, err = l.AppendAsLeader(idemBatch(t, 4, 0, 0, 1, true), 0, record.FromCoordinator)
	require.NoError(t, err)
}

func TestIdleProducersExpire(t *testing.T) {
	clock := NewManualClock(epoch0)
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{Clock: clock, ProducerIDExpiration: time.Hour})
	defer l.Close()
	_, err := l.AppendAsLeader(idemBatch(t, 1, 0, 0, 1, false), 0, record.FromClient) // timestamp epoch0
	require.NoError(t, err)
	_, err = l.AppendAsLeader(confirmed(l, idemBatch(t, 2, 0, 0, 1, true)), 0, record.FromClient) // open transaction
	require.NoError(t, err)
	clock.Advance(59 * time.Minute)
	require.Equal(t, 0, l.ExpireProducers())
	clock.Advance(2 * time.Minute)
	res, err := l.EnforceRetention()
	require.NoError(t, err)
	require.Equal(t, 1, res.ExpiredProducers, "the idle producer goes, the one with an open transaction stays")
	p := l.Producers()
	require.Len(t, p, 1)
	require.Equal(t, int64(2), p[0].ProducerID)
	// The expired producer is accepted again at any sequence.
	_, err = l.AppendAsLeader(idemBatch(t, 1, 0, 40, 1, false), 0, record.FromClient)
	require.NoError(t, err)
}

func TestProducerSnapshotRoundTrip(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	randomProducerTraffic(t, l, rand.New(rand.NewPCG(3, 4)), 200)
	ps := l.producers
	got, err := decodeProducerState(ps.encode())
	require.NoError(t, err)
	require.Equal(t, ps, got)
	require.NoError(t, l.Close())
}

func FuzzProducerSnapshot(f *testing.F) {
	for i := 0; i < 3; i++ {
		l := openLog(f, f.TempDir(), testConfig(f, nil), Options{})
		randomProducerTrafficF(f, l, rand.New(rand.NewPCG(uint64(i), 9)), 40)
		f.Add(l.producers.encode())
		_ = l.Close()
	}
	f.Add(newProducerState(0).encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := decodeProducerState(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		require.Equal(t, data, ps.encode())
	})
}

// randomProducerTrafficF is randomProducerTraffic for a fuzz seed corpus.
func randomProducerTrafficF(f *testing.F, l *Log, rng *rand.Rand, n int) {
	seq := map[int64]int32{}
	for i := 0; i < n; i++ {
		pid := int64(rng.IntN(3))
		if rng.IntN(5) == 0 {
			ct := record.ControlType(rng.IntN(2))
			if _, err := l.AppendAsLeader(record.AppendEndTxnMarker(nil, pid, 0, ct, 1, 0), 0, record.FromCoordinator); err != nil {
				f.Fatal(err)
			}
			continue
		}
		if _, err := l.AppendAsLeader(confirmed(l, idemBatch(f, pid, 0, seq[pid], 1, pid == 2)), 0, record.FromClient); err != nil {
			f.Fatal(err)
		}
		seq[pid]++
	}
}
