package wire

import (
	"crypto/tls"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

// Why connections read through a ReadyReader: a bufio.Reader keeps its
// buffer for the connection's life, and an idle connection spends that
// life blocked in a read into it. With the 256 KiB socket buffer under
// every TLS connection and a Kafka listener's reader on every plaintext
// one, thousands of idle clients held gigabytes of buffers that held
// nothing. A ReadyReader takes a buffer from a pool only once the socket
// has bytes to read (ReadOnReady) and gives it back as soon as everything
// in it is consumed, as grpc-go does for its own plaintext connections: a
// busy connection keeps a buffer from one drain to the next, an idle one
// holds none.

// ReadyReader is a buffered reader of a connection that holds its buffer
// only while the buffer has bytes not yet read. When the buffer is empty
// a Read of at least the buffer's size reads the connection straight
// into the caller's slice, as bufio.Reader does; a smaller one waits,
// without a buffer, until the connection is readable, then reads it into
// a buffer from the pool.
//
// Only a bare *net.TCPConn is read with system calls of the reader's
// own (as grpc-go does): a wrapper with a Read of its own, say one that
// buffered bytes while it peeked, either offers ReadOnReady or is read
// through its Read, holding the buffer while that waits (as a
// bufio.Reader would). A TLS connection is read straight into the
// caller's slice whenever the buffer is empty: a reader above TLS needs
// no buffer of its own to wait, since crypto/tls decrypts a whole record
// at a time into its own.
//
// A ReadyReader is not safe for concurrent use.
type ReadyReader struct {
	conn    net.Conn
	size    int
	pool    mem.BufferPool
	onReady func(size int, pool mem.BufferPool) (*[]byte, int, error)
	buf     *[]byte // nil while empty
	r, w    int
}

// ReadyConn is a connection that can wait until it is readable before it
// takes a buffer to read into (quota.LimitListener's connections).
// ReadOnReady reads at most size bytes into a buffer from pool and returns
// the buffer (for pool.Put by the caller), the bytes read and an error;
// io.EOF when the peer closed. It is grpc-go's optional read method on a
// server connection, found the same way.
type ReadyConn interface {
	ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error)
}

// NewReadyReader returns a reader of conn with buffers of size bytes from
// pool.
func NewReadyReader(conn net.Conn, size int, pool mem.BufferPool) *ReadyReader {
	r := &ReadyReader{conn: conn, size: size, pool: pool}
	switch c := conn.(type) {
	case ReadyConn:
		r.onReady = c.ReadOnReady
	case *TLSConn, *tls.Conn:
		// Straight reads: crypto/tls holds the decrypted record.
	default:
		r.onReady = func(size int, pool mem.BufferPool) (*[]byte, int, error) { return ReadOnReady(conn, size, pool) }
		if tc, ok := conn.(*net.TCPConn); ok && rawReads {
			if raw, err := tc.SyscallConn(); err == nil {
				r.onReady = func(size int, pool mem.BufferPool) (*[]byte, int, error) {
					return readRawOnReady(raw, size, pool)
				}
			}
		}
	}
	return r
}

// Buffered returns how many bytes the buffer holds; a reader holds a
// buffer exactly when this is not zero.
func (b *ReadyReader) Buffered() int { return b.w - b.r }

// Read reads up to len(p) bytes into p.
func (b *ReadyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= b.size || b.onReady == nil {
			return b.conn.Read(p)
		}
		buf, n, err := b.onReady(b.size, b.pool)
		if err != nil {
			return 0, err
		}
		b.buf, b.r, b.w = buf, 0, n
	}
	n := copy(p, (*b.buf)[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.drop()
	}
	return n, nil
}

// drop gives the emptied buffer back.
func (b *ReadyReader) drop() {
	b.pool.Put(b.buf)
	b.buf, b.r, b.w = nil, 0, 0
}

// ReadOnReady waits until conn is readable, then reads at most size bytes
// into a buffer from pool, as ReadyConn documents: through conn's own
// ReadOnReady if it has one, else with a read system call on its socket
// once the poller finds it readable (Linux) when it is a bare
// *net.TCPConn. Any other is read while it holds the buffer.
func ReadOnReady(conn net.Conn, size int, pool mem.BufferPool) (*[]byte, int, error) {
	if rc, ok := conn.(ReadyConn); ok {
		return rc.ReadOnReady(size, pool)
	}
	if tc, ok := conn.(*net.TCPConn); ok && rawReads {
		if raw, err := tc.SyscallConn(); err == nil {
			return readRawOnReady(raw, size, pool)
		}
	}
	return blockingRead(conn, size, pool)
}

// readRawOnReady reads the socket behind raw once it is readable: raw.Read
// calls the function at once and, while it reports false, again each time
// the poller finds the socket readable, so the buffer is held only across
// one read system call. Deadlines and Close end the wait as they end a
// Read.
func readRawOnReady(raw syscall.RawConn, size int, pool mem.BufferPool) (*[]byte, int, error) {
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	err := raw.Read(func(fd uintptr) bool {
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
// (a pipe): the buffer is held while the read waits.
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
