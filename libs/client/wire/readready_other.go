//go:build !linux

package wire

// rawReads: no read(2) on a socket's descriptor here, so ReadOnReady
// reads through the connection and holds its buffer while it waits.
const rawReads = false

func readFD(uintptr, []byte) (int, error) { panic("wire: readFD without rawReads") }
