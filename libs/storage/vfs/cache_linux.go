package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// DropCache asks the kernel to drop the file's clean pages in [off,
// off+n) from the page cache. Dirty pages are only queued for writeback and
// stay; callers drop what an fsync has already made clean.
func (f osFile) DropCache(off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var aerr error
	// Control holds the descriptor open for the call, so a concurrent Close
	// cannot hand its number to another file meanwhile.
	if err := rc.Control(func(fd uintptr) { aerr = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED) }); err != nil {
		return err
	}
	if aerr != nil {
		return &os.PathError{Op: "fadvise", Path: f.Name(), Err: aerr}
	}
	return nil
}

// DropCache unmaps the whole pages inside [off, off+n) from this process's
// page tables (the mapping stays valid: a later read faults the page back
// in from the page cache or the disk). The kernel never drops a page from
// the page cache while a process maps it, so this comes before the file's
// DropCache.
func (m osMapping) DropCache(off, n int64) error {
	page := int64(os.Getpagesize())
	from := (off + page - 1) / page * page
	to := min(off+n, int64(len(m))) / page * page
	if from >= to {
		return nil
	}
	return unix.Madvise(m[from:to], unix.MADV_DONTNEED)
}

// StartWriteback starts the writeback of [off, off+n) (sync_file_range).
func (f osFile) StartWriteback(off, n int64) error {
	return f.syncFileRange("starting writeback", off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// AwaitWriteback writes back [off, off+n) and waits for it (sync_file_range
// with both waits).
func (f osFile) AwaitWriteback(off, n int64) error {
	return f.syncFileRange("writing back", off, n,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
}

func (f osFile) syncFileRange(op string, off, n int64, flags int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.SyncFileRange(int(fd), off, n, flags)
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: serr}
	}
	return nil
}
