//go:build unix

package quota

import "syscall"

// rawReads: ReadOnReady reads the socket's descriptor itself.
const rawReads = true

func readFD(fd uintptr, b []byte) (int, error) { return syscall.Read(int(fd), b) }
