package quota

import (
	"io"
	"syscall"

	"google.golang.org/grpc/mem"
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
// readyreader.Reader documents; io.EOF when the peer closed.
func (c *limitedConn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	if err := c.waitReady(); err != nil {
		return nil, 0, err
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok || !rawReads {
		return blockingRead(c.Conn, size, pool)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return blockingRead(c.Conn, size, pool)
	}
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	// raw.Read calls the function at once and, while it reports false,
	// again each time the poller finds the socket readable: the buffer is
	// held only across one read system call.
	err = raw.Read(func(fd uintptr) bool {
		buf = pool.Get(size)
		for {
			n, rerr = readFD(fd, *buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK {
			pool.Put(buf)
			buf = nil
			return false
		}
		return true
	})
	switch {
	case err != nil: // closed or past a deadline
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	case rerr != nil:
		pool.Put(buf)
		return nil, 0, rerr
	case n <= 0:
		pool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, n, nil
}

// blockingRead is ReadOnReady for a connection without a file descriptor
// (a test's pipe): the buffer is held while the read waits.
func blockingRead(r io.Reader, size int, pool mem.BufferPool) (*[]byte, int, error) {
	buf := pool.Get(size)
	n, err := r.Read(*buf)
	if n == 0 {
		pool.Put(buf)
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, 0, err
	}
	// Bytes first: an error with them comes back on the next read.
	return buf, n, nil
}
