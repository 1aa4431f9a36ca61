package vfs

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxIovecs is the most buffers one pwritev takes (IOV_MAX on Linux).
const maxIovecs = 1024

// WriteVecAt implements VecWriterAt with pwritev, continuing after short
// writes.
func (f osFile) WriteVecAt(bufs [][]byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	total := 0
	for len(bufs) > 0 {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			break
		}
		batch := bufs[:min(len(bufs), maxIovecs)]
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			for {
				n, werr = unix.Pwritev(int(fd), batch, off)
				if werr != unix.EINTR {
					return true
				}
			}
		}); err != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if werr != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
		}
		if n == 0 {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		total += n
		off += int64(n)
		// Drop what was written: whole buffers, then part of one.
		for n > 0 {
			if n < len(bufs[0]) {
				bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
				n = 0
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return total, nil
}
