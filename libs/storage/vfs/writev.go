package vfs

// VecWriterAt is a File that writes several buffers at an offset in one
// system call (pwritev).
type VecWriterAt interface {
	// WriteVecAt writes bufs, concatenated, at off. Like WriteAt it
	// returns an error when it writes less than all of them.
	WriteVecAt(bufs [][]byte, off int64) (int, error)
}

// WriteVecAt writes bufs, concatenated, at off: in vectored writes where f
// supports them (VecWriterAt), else buffer by buffer with WriteAt. A
// failure may leave some of the bytes written, as WriteAt's does.
func WriteVecAt(f File, bufs [][]byte, off int64) error {
	if v, ok := f.(VecWriterAt); ok {
		_, err := v.WriteVecAt(bufs, off)
		return err
	}
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
