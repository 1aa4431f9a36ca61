package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes the file's data and the metadata needed to read it back
// (its size), skipping the mtime update that fsync would also write.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
