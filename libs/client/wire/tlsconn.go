package wire

import (
	"context"
	"crypto/tls"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
)

// Why TLS connections get buffers of their own: in plaintext one read or
// write system call moves up to SocketBuffer bytes, because grpc-go's
// buffered reader and writer sit right on the socket. Over TLS they sit on
// a crypto/tls.Conn, which writes every record (at most 16 KiB) with a
// system call of its own and reads the socket about one record at a time,
// so a 256 KiB flush became 16 writes and every 16 KiB received a read:
// 16 times the system calls of plaintext on both ends, which cost more CPU
// than the encryption itself (AES-GCM, in hardware). TLSCredentials and
// BufferedTLSServer put a buffered reader under the TLS layer and gather
// the records of one Write into write system calls of up to SocketBuffer
// bytes.

// TLSCredentials returns gRPC transport credentials for cfg, like
// credentials.NewTLS, whose connections read and write the socket in
// chunks of up to SocketBuffer bytes (a record more for writes) rather than
// one TLS record at a time.
func TLSCredentials(cfg *tls.Config) credentials.TransportCredentials {
	return &bufferedCreds{TransportCredentials: credentials.NewTLS(cfg)}
}

type bufferedCreds struct {
	credentials.TransportCredentials
}

func (c *bufferedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	bc := newBufferedConn(raw)
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, bc)
	if err != nil {
		return nil, nil, err
	}
	return &gatherConn{Conn: conn, raw: bc}, info, nil
}

func (c *bufferedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	bc := newBufferedConn(raw)
	conn, info, err := c.TransportCredentials.ServerHandshake(bc)
	if err != nil {
		return nil, nil, err
	}
	return &gatherConn{Conn: conn, raw: bc}, info, nil
}

func (c *bufferedCreds) Clone() credentials.TransportCredentials {
	return &bufferedCreds{TransportCredentials: c.TransportCredentials.Clone()}
}

// BufferedTLSServer is tls.Server(raw, cfg) with the buffering of
// TLSCredentials: a server speaking TLS on a raw protocol (the Kafka
// listener) uses it in place of tls.Server. The handshake runs on first
// use, as with tls.Server; ConnectionState and Handshake are the TLS
// connection's.
func BufferedTLSServer(raw net.Conn, cfg *tls.Config) *TLSConn {
	bc := newBufferedConn(raw)
	t := tls.Server(bc, cfg)
	return &TLSConn{Conn: t, gather: gatherConn{Conn: t, raw: bc}}
}

// TLSConn is a server-side TLS connection made by BufferedTLSServer.
type TLSConn struct {
	*tls.Conn
	gather gatherConn
}

// Write encrypts p and sends its records in writes of up to SocketBuffer
// bytes. A Write before the handshake runs the handshake first: its
// messages must leave while it waits for the client's, not be gathered
// until the Write ends (the server would wait for an answer to a flight
// it never sent).
func (c *TLSConn) Write(p []byte) (int, error) {
	if err := c.Conn.Handshake(); err != nil {
		return 0, err
	}
	return c.gather.Write(p)
}

// WriteBuffers writes every buffer of v, in order, gathering their records
// into writes of up to SocketBuffer bytes, and consumes v as
// net.Buffers.WriteTo does; a response sent in pieces (a header, then
// page-cache chunks) uses it in place of the writev of a plain socket.
// Like Write, it runs the handshake first if it has not run.
func (c *TLSConn) WriteBuffers(v *net.Buffers) (int64, error) {
	if err := c.Conn.Handshake(); err != nil {
		return 0, err
	}
	c.gather.raw.hold()
	var n int64
	var err error
	for len(*v) > 0 && err == nil {
		b := (*v)[0]
		var m int
		m, err = c.Conn.Write(b)
		n += int64(m)
		if m == len(b) {
			*v = (*v)[1:]
		} else {
			(*v)[0] = b[m:]
		}
	}
	if ferr := c.gather.raw.release(); err == nil && ferr != nil {
		err = ferr
	}
	return n, err
}

// Close closes the connection; see gatherConn.Close.
func (c *TLSConn) Close() error { return c.gather.Close() }

// gatherConn gathers the records a Write of the TLS connection makes into
// writes of up to SocketBuffer bytes.
type gatherConn struct {
	net.Conn
	raw *bufferedConn
}

// Close closes the TLS connection, sending close_notify; but while a
// gathered write is in flight (a peer that stopped reading) it closes the
// socket at once, as crypto/tls does when Close meets a Write in flight:
// close_notify would wait behind that write for the TLS layer's 5 s
// deadline.
func (c *gatherConn) Close() error {
	if !c.raw.mu.TryLock() {
		return c.raw.Conn.Close()
	}
	c.raw.mu.Unlock()
	return c.Conn.Close()
}

func (c *gatherConn) Write(p []byte) (int, error) {
	c.raw.hold()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.release(); err == nil && ferr != nil {
		err = ferr
	}
	return n, err
}

// gatherPool holds the buffers that gather a Write's records; a
// connection holds one only while a Write runs.
var gatherPool = sync.Pool{New: func() any { b := make([]byte, 0, SocketBuffer+maxRecord); return &b }}

// maxRecord is the most a TLS record takes on the wire: 16 KiB of
// plaintext and its header, padding and tag.
const maxRecord = 16<<10 + 256

// socketReadPool holds the read buffers under TLS connections: a
// connection takes one when its socket has bytes to read and gives it back
// once the TLS layer has consumed them, so an idle connection holds none.
var socketReadPool mem.BufferPool = sharedPool

// bufferedConn is the socket under a TLS connection: reads are buffered
// (in a buffer held only while it has bytes not yet read; see ReadyReader),
// and while a Write of the TLS connection runs (holds > 0) the records it
// writes are gathered, sent whenever SocketBuffer bytes are full and when
// it ends. The TLS layer writes whole records in order under its own
// lock; records it writes while another goroutine's Write holds (an alert,
// a key update answer) join the gathered ones, in order, since every
// write to the socket goes through mu.
type bufferedConn struct {
	net.Conn
	r     *ReadyReader
	mu    sync.Mutex
	holds int
	buf   *[]byte
}

func newBufferedConn(raw net.Conn) *bufferedConn {
	return &bufferedConn{Conn: raw, r: NewReadyReader(raw, SocketBuffer, socketReadPool)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufferedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds > 0 {
		if c.buf == nil {
			c.buf = gatherPool.Get().(*[]byte)
		}
		// A large Write (a 1 MiB fetch chunk) leaves in SocketBuffer
		// pieces, as in plaintext, rather than growing the buffer.
		if len(*c.buf) > 0 && len(*c.buf)+len(p) > SocketBuffer {
			if _, err := c.Conn.Write(*c.buf); err != nil {
				return 0, err
			}
			*c.buf = (*c.buf)[:0]
		}
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *bufferedConn) hold() {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// release ends one hold and sends what was gathered.
func (c *bufferedConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds--
	if c.buf == nil {
		return nil
	}
	b := c.buf
	c.buf = nil
	_, err := c.Conn.Write(*b)
	if cap(*b) <= SocketBuffer+maxRecord {
		*b = (*b)[:0]
		gatherPool.Put(b)
	}
	return err
}
