package quota

import (
	"google.golang.org/grpc/mem"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// ReadOnReady is grpc-go's optional read method on a connection (its
// internal readyreader.Reader): grpc-go finds it on the net.Conn its
// listener accepted and then takes its read buffer from a pool only once
// the socket has bytes to read, giving it back when they are consumed. An
// idle connection then holds no read buffer. Without it grpc-go makes that
// optimisation only for a bare *net.TCPConn, so every connection through
// LimitListener kept a buffered reader of its own for its whole life: with
// the servers' 256 KiB read buffer (wire.SocketBuffer) the 6,500 idle gRPC
// connections of the connection benchmark held 1.6 GiB of heap.
//
// It reads at most size bytes into a buffer from pool and returns the
// buffer (for pool.Put by the caller), the bytes read and an error, as
// readyreader.Reader documents; io.EOF when the peer closed. The raw read
// (Linux) is wire.ReadOnReady's, which the Kafka listener and the socket
// under TLS connections use too.
func (c *limitedConn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	if err := c.waitReady(); err != nil {
		return nil, 0, err
	}
	return wire.ReadOnReady(c.Conn, size, pool)
}
