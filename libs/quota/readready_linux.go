//go:build linux

package quota

import "syscall"

// rawReads: ReadOnReady reads the socket's descriptor itself, on Linux
// only, where grpc-go makes the same raw reads and its tests run.
const rawReads = true

func readFD(fd uintptr, b []byte) (int, error) { return syscall.Read(int(fd), b) }
