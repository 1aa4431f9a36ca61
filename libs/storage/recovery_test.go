package storage

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// requireLogSound checks that everything readable is whole, valid batches
// with increasing offsets ending at the log end offset.
func requireLogSound(t *testing.T, l *Log) {
	t.Helper()
	from, end := l.LogStartOffset(), l.LogEndOffset()
	prev := from - 1
	for from < end {
		res, err := l.Read(from, end, 1<<20)
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		next := res.NextOffset
		res.Release()
		require.NotEmpty(t, buf, "no data at %d below log end %d", from, end)
		sum, err := record.Validate(buf, record.ValidateOptions{Origin: record.FromReplica, MaxBatchBytes: 1 << 30})
		require.NoError(t, err)
		require.Greater(t, sum.FirstOffset, prev, "offsets repeat")
		prev = sum.LastOffset
		from = next
	}
	require.Equal(t, end, prev+1)
}

func TestCrashKeepsAcknowledgedAppends(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		dir := t.TempDir()
		fs := vfs.NewFaultFS(vfs.OS, seed)
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := testConfig(t, map[string]string{"segment.bytes": "4096"})
		l := openLog(t, dir, cfg, Options{FS: fs})
		var acked int64
		for i := 0; i < 40; i++ {
			b := simpleBatch(t, 1+rng.IntN(6), int64(i))
			if rng.IntN(3) == 0 {
				res, err := l.AppendAsLeader(b, 1, record.FromClient)
				require.NoError(t, err)
				_ = res
				continue
			}
			res, err := l.AppendSync(context.Background(), b, 1, record.FromClient)
			require.NoError(t, err)
			acked = res.LastOffset + 1
		}
		require.NoError(t, fs.Crash(vfs.CrashOptions{KeepSomeUnsynced: seed%2 == 0, GarbleKept: seed%4 == 0}))
		require.Error(t, l.Close(), "handles from before the crash are dead")

		l = openLog(t, dir, cfg, Options{FS: fs})
		require.GreaterOrEqual(t, l.LogEndOffset(), acked, "seed %d: acknowledged appends lost", seed)
		requireLogSound(t, l)
		offs, _ := readAll(t, l, 0, acked)
		require.Len(t, offs, int(acked))
		res, err := l.AppendAsLeader(simpleBatch(t, 2, 99), 2, record.FromClient)
		require.NoError(t, err)
		require.Equal(t, l.LogEndOffset()-2, res.FirstOffset)
		requireLogSound(t, l)
		require.NoError(t, l.Close())
	}
}

func TestRecoveryScansOnlyTheTail(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"sluice.fsync.before.ack": "false"})
	l := openLog(t, dir, cfg, Options{})
	for i := 0; i < 100; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 5, int64(i)), 0, record.FromClient)
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush())
	flushed := l.LogEndOffset()
	sizeAtFlush := l.Size()
	for i := 0; i < 10; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 5, int64(i)), 0, record.FromClient)
		require.NoError(t, err)
	}
	tail := l.Size() - sizeAtFlush
	end := l.LogEndOffset()
	l.abandon()

	l = openLog(t, dir, cfg, Options{})
	require.Equal(t, end, l.LogEndOffset())
	require.Positive(t, l.RecoveryScannedBytes())
	require.LessOrEqual(t, l.RecoveryScannedBytes(), tail+int64(cfg.IndexIntervalBytes)+2*int64(len(simpleBatch(t, 5, 0))),
		"recovery scanned more than the unflushed tail (flushed up to %d)", flushed)
	requireLogSound(t, l)
	require.NoError(t, l.Close())

	l = openLog(t, dir, cfg, Options{})
	require.Zero(t, l.RecoveryScannedBytes(), "a clean shutdown skips the scan")
	require.Equal(t, end, l.LogEndOffset())
	requireLogSound(t, l)
	require.NoError(t, l.Close())
}

func activeLogPath(t *testing.T, l *Log) string {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.activeSegment().path(logSuffix)
}

func TestRecoveryTruncatesCorruptTail(t *testing.T) {
	cases := map[string]func(fs *vfs.FaultFS, path string, pos int64) error{
		"bit flip": func(fs *vfs.FaultFS, path string, pos int64) error {
			return fs.FlipBit(path, pos+record.BatchHeaderSize+3, 2)
		},
		"torn":   func(fs *vfs.FaultFS, path string, pos int64) error { return fs.TruncateFile(path, pos+30) },
		"length": func(fs *vfs.FaultFS, path string, pos int64) error { return fs.FlipBit(path, pos+9, 6) },
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewFaultFS(vfs.OS, 3)
			cfg := testConfig(t, map[string]string{"sluice.fsync.before.ack": "false", "segment.bytes": "1048576"})
			l := openLog(t, dir, cfg, Options{FS: fs})
			var positions []int64
			for i := 0; i < 20; i++ {
				positions = append(positions, l.Size())
				_, err := l.AppendAsLeader(simpleBatch(t, 3, int64(i)), 0, record.FromClient)
				require.NoError(t, err)
			}
			path := activeLogPath(t, l)
			l.abandon()
			require.NoError(t, damage(fs, path, positions[12]))

			l = openLog(t, dir, cfg, Options{FS: fs})
			require.EqualValues(t, 12*3, l.LogEndOffset(), "truncated at the damaged batch")
			requireLogSound(t, l)
			_, err := l.AppendAsLeader(simpleBatch(t, 3, 1), 0, record.FromClient)
			require.NoError(t, err)
			requireLogSound(t, l)
			require.NoError(t, l.Close())
		})
	}
}

func TestDamageBelowRecoveryPointFailsOpen(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 4)
	cfg := testConfig(t, map[string]string{"segment.bytes": "1048576"})
	l := openLog(t, dir, cfg, Options{FS: fs})
	for i := 0; i < 20; i++ {
		_, err := l.AppendSync(context.Background(), simpleBatch(t, 3, int64(i)), 0, record.FromClient)
		require.NoError(t, err)
	}
	lastBatch := l.Size() - int64(len(simpleBatch(t, 3, 0)))
	require.NoError(t, l.Flush())
	path := activeLogPath(t, l)
	l.abandon()
	// Bit rot in a durable batch that recovery re-reads (the tail after the
	// last index entry) must not be cut away silently: Open refuses.
	require.NoError(t, fs.FlipBit(path, lastBatch+record.BatchHeaderSize+2, 1))
	_, err := Open(dir, cfg, Options{FS: fs})
	requireCode(t, err, errs.StorageError)
}

func TestFsyncFailureTakesLogOffline(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 5)
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{FS: fs})
	_, err := l.AppendSync(context.Background(), simpleBatch(t, 1, 1), 0, record.FromClient)
	require.NoError(t, err)
	fs.Inject(vfs.Fault{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.EIO, Times: 1})
	_, err = l.AppendSync(context.Background(), simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	// The fault is gone, but the log stays offline: no retry-and-continue.
	_, err = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	_, err = l.Read(0, 10, 100)
	requireCode(t, err, errs.StorageError)
	require.Error(t, l.WaitDurable(context.Background(), 2))
	require.Error(t, l.Err())
	require.Error(t, l.Close())
}

func TestWriteErrorsLeaveNoPartialBatch(t *testing.T) {
	for _, e := range []error{vfs.ENOSPC, vfs.EIO} {
		dir := t.TempDir()
		fs := vfs.NewFaultFS(vfs.OS, 6)
		cfg := testConfig(t, nil)
		l := openLog(t, dir, cfg, Options{FS: fs})
		_, err := l.AppendSync(context.Background(), simpleBatch(t, 3, 1), 0, record.FromClient)
		require.NoError(t, err)
		size := l.Size()
		fs.Inject(vfs.Fault{Op: vfs.OpWrite, PathSuffix: ".log", Err: e, Partial: true})
		_, err = l.AppendAsLeader(simpleBatch(t, 3, 1), 0, record.FromClient)
		requireCode(t, err, errs.StorageError)
		fi, serr := os.Stat(activeLogPath(t, l))
		require.NoError(t, serr)
		require.Equal(t, size, fi.Size(), "the partial write was undone")
		_ = l.Close() // offline: reports the write error
		fs.ClearFaults()
		l = openLog(t, dir, cfg, Options{FS: fs})
		require.EqualValues(t, 3, l.LogEndOffset())
		requireLogSound(t, l)
		require.NoError(t, l.Close())
	}
}

func TestCheckpointWriteFailureTakesLogOffline(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 7)
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{FS: fs})
	_, err := l.AppendAsLeader(simpleBatch(t, 3, 1), 0, record.FromClient)
	require.NoError(t, err)
	fs.Inject(vfs.Fault{Op: vfs.OpSyncDir, Err: vfs.EIO})
	requireCode(t, l.Flush(), errs.StorageError)
	_, err = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	_ = l.Close() // offline
}

func TestDamagedIndexIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "4096", "index.interval.bytes": "256"})
	l := openLog(t, dir, cfg, Options{})
	for i := 0; i < 150; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, int64(i)), 0, record.FromClient)
		require.NoError(t, err)
	}
	end := l.LogEndOffset()
	require.NoError(t, l.Close())
	// Garble the first segment's index and drop the second's time index.
	require.NoError(t, os.WriteFile(filepath.Join(dir, segmentFileName(0, indexSuffix)), []byte("garbage!garbage!"), 0o644))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var bases []int64
	for _, n := range names {
		if b, ok := parseSegmentFileName(n.Name(), logSuffix); ok {
			bases = append(bases, b)
		}
	}
	require.Greater(t, len(bases), 2)
	require.NoError(t, os.Remove(filepath.Join(dir, segmentFileName(bases[1], timeIndexSuffix))))

	l = openLog(t, dir, cfg, Options{})
	require.Equal(t, end, l.LogEndOffset())
	offs, _ := readAll(t, l, 0, end)
	require.Len(t, offs, int(end))
	for o := int64(0); o < end; o += 7 {
		res, err := l.Read(o, end, 1)
		require.NoError(t, err)
		h, _ := record.ParseBatchHeader(res.Chunks[0].Data)
		require.LessOrEqual(t, h.BaseOffset, o)
		require.GreaterOrEqual(t, h.LastOffset(), o)
		res.Release()
	}
	require.NoError(t, l.Close())
}

// Retention may delete the segment the recovery point names; recovery then
// starts at the first segment at or below the point instead.
func TestRecoveryAfterRetentionDeletedTheRecoveryPointSegment(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "2048", "retention.bytes": "4096", "sluice.fsync.before.ack": "false"})
	l := openLog(t, dir, cfg, Options{})
	for i := 0; i < 20; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, 1), 0, record.FromClient)
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush())
	for i := 0; i < 60; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, 1), 0, record.FromClient)
		require.NoError(t, err)
	}
	res, err := l.EnforceRetention()
	require.NoError(t, err)
	require.Positive(t, res.DeletedSegments)
	start, end := l.LogStartOffset(), l.LogEndOffset()
	l.abandon()

	l = openLog(t, dir, cfg, Options{})
	require.Equal(t, end, l.LogEndOffset())
	require.Equal(t, start, l.LogStartOffset())
	requireLogSound(t, l)
	require.NoError(t, l.Close())
}
