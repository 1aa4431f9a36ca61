package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func TestFaultFSDropsUnsyncedBytes(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(OS, 1)
	path := filepath.Join(dir, "a")
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("durable"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte(" and lost"), 7)
	require.NoError(t, err)
	require.EqualValues(t, 7, fs.DurableSize(path))

	require.NoError(t, fs.Crash(CrashOptions{}))
	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, ErrCrashed)
	require.NoError(t, f.Close())
	data, err := ReadFile(fs, path)
	require.NoError(t, err)
	require.Equal(t, "durable", string(data))
}

// Bytes written over durable ones are as lost in a crash as appended
// ones until the file is synced (a write in place, such as over blocks
// pre-written with zeros, is no more durable than an append).
func TestFaultFSOverwriteIsLostUntilSynced(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(OS, 1)
	f, err := fs.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 8192), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("synced"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("lost"), 4096)
	require.NoError(t, err)
	require.NoError(t, fs.Crash(CrashOptions{}))
	b, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	require.Len(t, b, 8192)
	require.Equal(t, "synced", string(b[:6]))
	require.Equal(t, make([]byte, 4), b[4096:4100], "an unsynced overwrite survived the crash")
}

func TestFaultFSTornWritesAndRenames(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(OS, 2)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	f, err := fs.OpenFile(a, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 1000), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt(make([]byte, 1000), 1000)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fs.Rename(a, b))
	require.EqualValues(t, 1000, fs.DurableSize(b), "durability follows the rename")
	require.NoError(t, fs.Crash(CrashOptions{KeepSomeUnsynced: true, GarbleKept: true}))
	fi, err := fs.Stat(b)
	require.NoError(t, err)
	require.GreaterOrEqual(t, fi.Size(), int64(1000))
	require.LessOrEqual(t, fi.Size(), int64(2000))

	// WriteFileAtomic leaves the old or the new content, never a mix.
	require.NoError(t, WriteFileAtomic(fs, b, []byte("new")))
	require.NoError(t, fs.Crash(CrashOptions{}))
	data, err := ReadFile(fs, b)
	require.NoError(t, err)
	require.Equal(t, "new", string(data))
}

func TestFaultInjection(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(OS, 3)
	path := filepath.Join(dir, "seg.log")
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()

	remove := fs.Inject(Fault{Op: OpSync, PathSuffix: ".log", Err: EIO, After: 1, Times: 1})
	require.NoError(t, f.Sync())
	err = f.Sync()
	require.True(t, errors.Is(err, syscall.EIO), "%v", err)
	require.NoError(t, f.Sync(), "Times bounds the fault")
	remove()

	fs.Inject(Fault{Op: OpWrite, PathSuffix: ".log", Err: ENOSPC, Partial: true, Times: 1})
	n, err := f.WriteAt([]byte("0123456789"), 0)
	require.True(t, errors.Is(err, syscall.ENOSPC))
	require.Equal(t, 5, n, "half the bytes were written")
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 5, size)
	require.Equal(t, 1, fs.Count(OpWrite))

	require.NoError(t, fs.FlipBit(path, 0, 0))
	buf := make([]byte, 1)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, byte('0')^1, buf[0])
	require.NoError(t, fs.TruncateFile(path, 2))
	size, err = f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 2, size)
}

func TestOSMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	f, err := OS.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("hello"), 0)
	require.NoError(t, err)
	m, err := f.Map(1 << 20) // longer than the file: allowed
	require.NoError(t, err)
	require.Equal(t, "hello", string(m.Bytes()[:5]))
	_, err = f.WriteAt([]byte(" world"), 5)
	require.NoError(t, err)
	require.Equal(t, "hello world", string(m.Bytes()[:11]), "writes show through the shared map")
	require.NoError(t, m.Close())
	names, err := OS.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, []string{"m"}, names)
}

func TestFaultFSFailedSyncDropsPagesUntilRewritten(t *testing.T) {
	for _, rewrite := range []bool{false, true} {
		dir := t.TempDir()
		fs := NewFaultFS(OS, 2)
		path := filepath.Join(dir, "a")
		f, err := fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("aaaa"), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		_, err = f.WriteAt([]byte("bbbb"), 4)
		require.NoError(t, err)
		fs.Inject(Fault{Op: OpSync, Err: ENOSPC, Times: 1})
		require.ErrorIs(t, f.Sync(), syscall.ENOSPC)
		if rewrite {
			_, err = f.WriteAt([]byte("bbbb"), 4)
			require.NoError(t, err)
		}
		// This fsync succeeds, but covers only pages dirtied since the
		// failure.
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		require.NoError(t, fs.Crash(CrashOptions{}))
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		if rewrite {
			require.Equal(t, "aaaabbbb", string(got))
		} else {
			require.Equal(t, "aaaa\x00\x00\x00\x00", string(got))
		}
	}
}

func TestFaultMatchesPathSubstringAndAddsLatency(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaultFS(OS, 1)
	for _, sub := range []string{"orders-0", "orders-1"} {
		require.NoError(t, fs.MkdirAll(filepath.Join(dir, sub), 0o755))
	}
	open := func(sub string) File {
		f, err := fs.OpenFile(filepath.Join(dir, sub, "00000000000000000000.log"), os.O_CREATE|os.O_RDWR, 0o644)
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := open("orders-0"), open("orders-1")

	remove := fs.Inject(Fault{Op: OpSync, PathContains: "orders-0", Err: EIO})
	require.ErrorIs(t, a.Sync(), syscall.EIO)
	require.NoError(t, b.Sync(), "another replica's directory is not matched")
	remove()
	require.NoError(t, a.Sync())

	// A fault without an error only slows the operation down.
	const latency = 50 * time.Millisecond
	remove = fs.Inject(Fault{Op: OpWrite, PathContains: "orders-1", Latency: latency})
	start := time.Now()
	_, err := b.WriteAt([]byte("slow"), 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), latency)
	remove()
	data, err := ReadFile(fs, b.Name())
	require.NoError(t, err)
	require.Equal(t, "slow", string(data), "the slowed write happened")
}
