package storage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/libs/testutil"
)

// logRecorder is a slog handler that keeps records.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the first record with msg at level.
func (r *logRecorder) find(level slog.Level, msg string) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Level == level && rec.Message == msg {
			attrs := map[string]string{}
			rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			return attrs, true
		}
	}
	return nil, false
}

// appendAcked appends n single-record batches with fsync before ack and
// returns their values.
func appendAcked(t *testing.T, l *Log, n int, tag string) []string {
	t.Helper()
	var vals []string
	for i := 0; i < n; i++ {
		b := makeBatch(t, record.CodecNone, 1, []string{"k"}, tag)
		_, err := l.AppendSync(context.Background(), b, 0, record.FromClient)
		require.NoError(t, err)
		vals = append(vals, tag+"-0-k")
	}
	return vals
}

func TestENOSPCOnWriteTakesLogOfflineAndReopenBringsItBack(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 11)
	rec := &logRecorder{}
	var offline atomic.Int32
	opts := Options{FS: fs, Logger: slog.New(rec), OnOffline: func(error) { offline.Add(1) }}
	l := openLog(t, dir, testConfig(t, nil), opts)
	defer l.Close()
	want := appendAcked(t, l, 5, "a")

	// The disk is full: a write stores half its bytes and fails.
	fs.Inject(vfs.Fault{Op: vfs.OpWrite, Err: vfs.ENOSPC, Partial: true})
	_, err := l.AppendAsLeader(simpleBatch(t, 3, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	require.ErrorIs(t, l.Err(), vfs.ENOSPC)
	require.True(t, Transient(l.Err()))
	require.EqualValues(t, 1, offline.Load(), "the offline hook runs once")
	attrs, ok := rec.find(slog.LevelError, "log offline after I/O error")
	require.True(t, ok, "an ERROR names the failure")
	require.Contains(t, attrs["path"], ".log")
	require.Contains(t, attrs["err"], "no space left on device")

	// Still full: reopening fails and the log stays offline.
	require.Error(t, l.Reopen())
	require.Error(t, l.Err())
	_, err = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	require.EqualValues(t, 1, offline.Load(), "a failed reopen is not a new outage")

	// Space is back: the log comes back without a restart, with every
	// acknowledged record and nothing of the torn append.
	fs.ClearFaults()
	require.NoError(t, l.Reopen())
	require.NoError(t, l.Err())
	_, ok = rec.find(slog.LevelInfo, "log back online after recovery")
	require.True(t, ok)
	require.EqualValues(t, 5, l.LogEndOffset())
	want = append(want, appendAcked(t, l, 3, "b")...)
	offsets, values := readAll(t, l, 0, l.LogEndOffset())
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7}, offsets)
	require.Equal(t, want, values)
	requireLogSound(t, l)
	require.NoError(t, l.Reopen(), "reopening a healthy log does nothing")
}

func TestENOSPCOnFsyncReopenRewritesTheUnsyncedTail(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 12)
	cfg := testConfig(t, nil)
	l := openLog(t, dir, cfg, Options{FS: fs})
	want := appendAcked(t, l, 3, "a")
	// Appended, then the fsync fails: Linux drops the dirty pages.
	_, err := l.AppendAsLeader(makeBatch(t, record.CodecNone, 1, []string{"k"}, "b"), 0, record.FromClient)
	require.NoError(t, err)
	fs.Inject(vfs.Fault{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.ENOSPC, Times: 1})
	requireCode(t, l.Flush(), errs.StorageError)
	require.True(t, Transient(l.Err()))
	_, err = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError) // no appending after a failed fsync

	require.NoError(t, l.Reopen())
	want = append(want, "b-0-k")
	want = append(want, appendAcked(t, l, 2, "c")...)
	require.EqualValues(t, 6, l.DurableOffset())

	// Power fails: every record acknowledged after the reopen survives,
	// which needs the record whose fsync failed to have been written again.
	require.NoError(t, fs.Crash(vfs.CrashOptions{}))
	_ = l.Close() // handles from before the crash fail
	l = openLog(t, dir, cfg, Options{FS: fs})
	defer l.Close()
	_, values := readAll(t, l, 0, l.LogEndOffset())
	require.Equal(t, want, values)
	requireLogSound(t, l)
}

func TestReopenRefusesALogThatLostRecords(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 13)
	l := openLog(t, dir, testConfig(t, nil), Options{FS: fs})
	defer l.Close()
	appendAcked(t, l, 3, "a")
	_, err := l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	require.NoError(t, err)
	fs.Inject(vfs.Fault{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.EIO, Times: 1})
	requireCode(t, l.Flush(), errs.StorageError)
	// The unsynced tail is gone from the file behind the log's back (the
	// kernel evicted the dropped pages and read back what the disk has).
	require.NoError(t, fs.TruncateFile(activeLogPath(t, l), l.durablePos.Position))
	err = l.Reopen()
	requireCode(t, err, errs.StorageError)
	require.Contains(t, err.Error(), "restart the node")
	require.False(t, Transient(l.Err()), "not retried")
	_, err = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
}

// fakeDisk is a file system's free space, set by the test.
type fakeDisk struct{ free atomic.Int64 }

func (d *fakeDisk) FreeBytes(string) (int64, error) { return d.free.Load(), nil }

func TestAppendsRefusedBelowReserve(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(10 << 20)
	guard := NewSpaceGuard(SpaceGuardOptions{Dir: "/data", ReserveBytes: 8 << 20, FreeBytes: disk.FreeBytes, RefreshInterval: time.Nanosecond})
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{Space: guard})
	defer l.Close()
	b := simpleBatch(t, 2, 1)
	_, err := l.AppendAsLeader(bytes.Clone(b), 0, record.FromClient)
	require.NoError(t, err)

	disk.free.Store(8<<20 + 10)
	_, err = l.AppendAsLeader(bytes.Clone(b), 0, record.FromClient)
	requireCode(t, err, errs.StorageError)
	require.True(t, errs.IsRetriable(err), "the client retries")
	require.Contains(t, err.Error(), "below the reserve of 8.0 MiB (storage.disk-reserve-bytes)")
	require.True(t, strings.Contains(err.Error(), "resume"), err.Error())
	_, err = l.AppendAsFollower(makeFollowerBatch(t, l.LogEndOffset()))
	requireCode(t, err, errs.StorageError)
	require.NoError(t, l.Err(), "a refused append does not take the log offline")
	require.EqualValues(t, 2, l.LogEndOffset())

	disk.free.Store(20 << 20) // space freed
	_, err = l.AppendAsLeader(bytes.Clone(b), 0, record.FromClient)
	require.NoError(t, err)
	require.EqualValues(t, 4, l.LogEndOffset())
}

func TestSpaceGuardCountsAppendsBetweenMeasurements(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(10 << 20)
	guard := NewSpaceGuard(SpaceGuardOptions{Dir: "/data", ReserveBytes: 8 << 20, FreeBytes: disk.FreeBytes, RefreshInterval: time.Hour})
	require.NoError(t, guard.Admit(1<<20))
	disk.free.Store(1 << 30) // not read again within the interval...
	free, err := guard.FreeBytes()
	require.NoError(t, err)
	require.EqualValues(t, 9<<20, free, "appends count against the last measurement")
	// ...unless the estimate falls below the reserve: then it is read again
	// before refusing.
	require.NoError(t, guard.Admit(2<<20))
	free, err = guard.FreeBytes()
	require.NoError(t, err)
	require.EqualValues(t, 1<<30-2<<20, free)
	require.Nil(t, NewSpaceGuard(SpaceGuardOptions{Dir: "/data"}), "no reserve, no guard")
	require.NoError(t, (*SpaceGuard)(nil).Admit(1<<40))
}

// makeFollowerBatch builds a batch as a leader would have stamped it.
func makeFollowerBatch(t *testing.T, base int64) []byte {
	b := simpleBatch(t, 1, 1)
	record.AssignOffsets(b, base, 0)
	return b
}

// Readers and appenders keep going while the log goes offline and is
// reopened underneath them: under -race this checks Reopen's locking, and
// every read sees whole batches.
func TestReopenUnderConcurrentReadsAndAppends(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 14)
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{FS: fs})
	defer l.Close()
	appendAcked(t, l, 20, "a")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := l.Read(l.LogStartOffset(), l.LogEndOffset(), 4096)
				if err != nil {
					continue // offline for a moment
				}
				buf := res.AppendTo(nil)
				res.Release()
				if _, err := record.Validate(buf, record.ValidateOptions{Origin: record.FromReplica, MaxBatchBytes: 1 << 20}); err != nil {
					t.Errorf("read a torn batch: %v", err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_, _ = l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient) // fails while offline
		}
	}()
	for range 5 {
		remove := fs.Inject(vfs.Fault{Op: vfs.OpWrite, PathSuffix: ".log", Err: vfs.ENOSPC, Partial: true})
		testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
			if l.Err() == nil {
				return errors.New("the appender has not hit the fault")
			}
			return nil
		})
		remove()
		require.NoError(t, l.Reopen())
	}
	cancel()
	wg.Wait()
	requireLogSound(t, l)
	require.NoError(t, l.Flush())
}

// Reopen never cuts bytes the log had published: a reader may still hold
// them mapped, and touching a page cut from under a map kills the process
// (SIGBUS). Damage found there keeps the log offline until a restart,
// whose recovery runs before any reader. (Reopen's recovery used to
// truncate at the damaged batch through its new file handle.)
func TestReopenDoesNotCutPublishedBytes(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.OS, 15)
	l := openLog(t, dir, testConfig(t, nil), Options{FS: fs})
	defer l.Close()
	appendAcked(t, l, 3, "a")
	for range 5 { // published, not yet fsynced
		_, err := l.AppendAsLeader(makeBatch(t, record.CodecNone, 1, []string{"k"}, "b"), 0, record.FromClient)
		require.NoError(t, err)
	}
	held, err := l.Read(0, l.LogEndOffset(), 1<<20) // slices of the segment's map
	require.NoError(t, err)
	require.NotEmpty(t, held.Chunks)
	defer held.Release()
	path := filepath.Join(dir, segmentFileName(0, logSuffix))
	st, err := os.Stat(path)
	require.NoError(t, err)
	// A published byte past the last fsync goes bad (a page the kernel
	// dropped and read back), and the next fsync fails: offline.
	require.NoError(t, fs.FlipBit(path, st.Size()-10, 3))
	fs.Inject(vfs.Fault{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.ENOSPC, Times: 1})
	requireCode(t, l.Flush(), errs.StorageError)

	err = l.Reopen()
	requireCode(t, err, errs.StorageError)
	require.ErrorContains(t, err, "restart the node")
	require.Error(t, l.Err(), "the log stays offline")
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, st.Size(), after.Size(), "the file was not cut under the held map")
	sum := 0
	for _, c := range held.Chunks { // every held page can still be touched
		for _, b := range c.Data {
			sum += int(b)
		}
	}
	require.Positive(t, sum)
}
