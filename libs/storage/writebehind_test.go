package storage

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// wbFS is the OS file system with every file's writeback calls recorded
// (and passed on to the OS), and optionally failing.
type wbFS struct {
	vfs.FS
	mu        sync.Mutex
	calls     []wbCall
	failAwait error
}

type wbCall struct {
	file   string
	await  bool
	off, n int64
}

type wbFile struct {
	vfs.File
	fs *wbFS
}

func (fs *wbFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return wbFile{f, fs}, nil
}

func (fs *wbFS) record(c wbCall) []wbCall {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.calls = append(fs.calls, c)
	return fs.calls
}

func (fs *wbFS) recorded() []wbCall {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]wbCall(nil), fs.calls...)
}

func (f wbFile) StartWriteback(off, n int64) error {
	f.fs.record(wbCall{file: filepath.Base(f.Name()), off: off, n: n})
	return f.File.(vfs.Writebacker).StartWriteback(off, n)
}

func (f wbFile) AwaitWriteback(off, n int64) error {
	f.fs.record(wbCall{file: filepath.Base(f.Name()), await: true, off: off, n: n})
	f.fs.mu.Lock()
	err := f.fs.failAwait
	f.fs.mu.Unlock()
	if err != nil {
		return &os.PathError{Op: "writing back", Path: f.Name(), Err: err}
	}
	return f.File.(vfs.Writebacker).AwaitWriteback(off, n)
}

func appendBytes(t *testing.T, l *Log, n int64) {
	t.Helper()
	for written := int64(0); written < n; {
		res, err := l.AppendAsLeader(simpleBatch(t, 20, 1000), 0, record.FromClient)
		require.NoError(t, err)
		written += int64(res.Bytes)
	}
}

// A log that does not fsync before acknowledging writes its data back in
// ranges of WriteBehindBytes as it goes: each range is started once it is
// full, and the one before is waited for first, so no more than two ranges
// are dirty. Without it the kernel holds gigabytes of the log dirty, and on
// ext4 any fsync on the file system (a transaction coordinator's state
// write) waits for them.
func TestWriteBehindWritesBackEveryRangeAndWaitsForThePrevious(t *testing.T) {
	fs := &wbFS{FS: vfs.OS}
	const wb = 16 << 10
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "1048576", "sluice.fsync.before.ack": "false"}),
		Options{FS: fs, WriteBehindBytes: wb})
	defer l.Close()
	// The flusher starts a range when appends wake it, every
	// WriteBehindBytes, from where the last range ended; one that runs late
	// merges ranges. What is not started stays under two ranges. Each round
	// appends more than that, so each round starts at least one range.
	var calls []wbCall
	var size int64
	for round := 1; round <= 4; round++ {
		appendBytes(t, l, 2*wb+4<<10)
		size = l.activeSegment().size
		caughtUp := func() bool {
			calls = fs.recorded()
			return len(calls) > 0 && size-(calls[len(calls)-1].off+calls[len(calls)-1].n) < 2*wb
		}
		if !assert.Eventually(t, caughtUp, 10*time.Second, time.Millisecond) {
			t.Fatalf("round %d: the log has %d bytes; write-behind calls %+v", round, size, calls)
		}
	}

	var started, awaited int64 // where the started and awaited ranges end
	for i, c := range calls {
		require.Equal(t, "00000000000000000000.log", c.file)
		if c.await {
			// The range awaited is the one started before, and it is
			// awaited before the next one starts.
			require.Equal(t, awaited, c.off, "call %d", i)
			require.Equal(t, started, c.off+c.n, "call %d", i)
			awaited = started
			continue
		}
		require.Equal(t, started, c.off, "call %d: ranges start where the last one ended", i)
		require.GreaterOrEqual(t, c.n, int64(wb/2), "call %d", i)
		require.Equal(t, awaited, started, "call %d: the range before was awaited first", i)
		started = c.off + c.n
	}
	starts := 0
	for _, c := range calls {
		if !c.await {
			starts++
		}
	}
	require.GreaterOrEqual(t, starts, 4, "%+v", calls)
}

// A log that fsyncs before acknowledging needs no write-behind: its group
// commits write everything back.
func TestWriteBehindLeavesFsyncingLogsAlone(t *testing.T) {
	fs := &wbFS{FS: vfs.OS}
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "1048576", "sluice.fsync.before.ack": "true"}),
		Options{FS: fs, WriteBehindBytes: 16 << 10})
	defer l.Close()
	appendBytes(t, l, 200<<10)
	require.NoError(t, l.Flush())
	require.Empty(t, fs.recorded())
}

// A writeback that fails is a failed fsync: waiting for the range consumes
// the error, so the next fdatasync would not report it and acknowledged data
// could be lost silently. The log goes offline instead.
func TestWriteBehindFailureTakesTheLogOffline(t *testing.T) {
	fs := &wbFS{FS: vfs.OS, failAwait: syscall.EIO}
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "1048576", "sluice.fsync.before.ack": "false"}),
		Options{FS: fs, WriteBehindBytes: 16 << 10})
	defer l.Close()
	require.Eventually(t, func() bool {
		_, _ = l.AppendAsLeader(simpleBatch(t, 20, 1000), 0, record.FromClient)
		return l.Err() != nil
	}, 10*time.Second, time.Millisecond)
	require.ErrorContains(t, l.Err(), "writing back")
	require.ErrorContains(t, l.Err(), syscall.EIO.Error())
	_, err := l.AppendAsLeader(simpleBatch(t, 2, 1000), 0, record.FromClient)
	require.Error(t, err)
}
