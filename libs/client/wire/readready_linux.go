//go:build linux

package wire

import "syscall"

// rawReads: ReadOnReady reads a socket's descriptor itself, on Linux only,
// where grpc-go makes the same raw reads.
const rawReads = true

func readFD(fd uintptr, b []byte) (int, error) { return syscall.Read(int(fd), b) }
