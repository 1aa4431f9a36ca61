// Package vfs is the small file system interface through which the storage
// engine does all of its disk access, with an OS implementation and a
// fault-injecting one for tests (FaultFS) that can drop bytes not yet
// fsynced on a simulated crash, flip bits, truncate files and fail any
// operation with an error such as EIO or ENOSPC.
//
// The interface has only what a segmented log needs: positional reads and
// writes, fdatasync, truncate, read-only shared memory maps, renames and
// directory syncs.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// FS is a file system.
type FS interface {
	// OpenFile opens a file with os.OpenFile flags.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file; removing a missing file is an error wrapping
	// os.ErrNotExist.
	Remove(name string) error
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes a file.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
}

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable (fdatasync where available).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the file's current size.
	Size() (int64, error)
	// Name returns the name the file was opened with.
	Name() string
	// Map maps the first length bytes of the file read-only and shared:
	// later writes to the file show through. length may exceed the file's
	// size; touching a page past the end of the file faults (SIGBUS), so
	// callers only read below the size they wrote.
	Map(length int) (Mapping, error)
}

// CacheDropper is implemented by the OS's files and mappings, whose pages
// live in the kernel's page cache.
type CacheDropper interface {
	// DropCache releases the cached pages of [off, off+n): for a mapping,
	// this process's references to them; for a file, the kernel's copy of
	// those that are clean.
	DropCache(off, n int64) error
}

// Writebacker is implemented by the OS's files: it moves a range of dirty
// pages to the disk ahead of the kernel's own writeback. It makes nothing
// durable (no metadata, no cache flush); a log that does not fsync before
// acknowledging uses it to keep its dirty pages few, because on ext4 an
// fsync of any other file commits the journal, and the commit first writes
// the ordered data of every file whose new blocks are in it: gigabytes of
// another log's dirt make a small fsync wait for seconds.
type Writebacker interface {
	// StartWriteback starts writing the dirty pages of [off, off+n) and
	// returns without waiting for them.
	StartWriteback(off, n int64) error
	// AwaitWriteback writes whatever of [off, off+n) is still dirty and
	// waits until the whole range is on the disk. An error is a write
	// error the next Sync may no longer report, so the caller must treat
	// it as a failed Sync.
	AwaitWriteback(off, n int64) error
}

// Mapping is a read-only memory map of a file.
type Mapping interface {
	// Bytes returns the mapped memory. It must not be used after Close.
	Bytes() []byte
	// Close unmaps the memory.
	Close() error
}

// ReadFile reads a whole file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return nil, err
	}
	return buf[:n], nil
}

// WriteFileAtomic replaces name with data so that after a crash the file
// holds either the old or the new content, never a mix: it writes a
// temporary file, fsyncs it, renames it over name and fsyncs the directory.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		_ = f.Close() // the write error is the one to report
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // the sync error is the one to report
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}
