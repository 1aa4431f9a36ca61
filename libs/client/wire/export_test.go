package wire

import "google.golang.org/grpc/mem"

// SetSocketReadPool makes TLS connections made from now on take their
// read buffers from p; the returned function restores the pool.
func SetSocketReadPool(p mem.BufferPool) (restore func()) {
	old := socketReadPool
	socketReadPool = p
	return func() { socketReadPool = old }
}
