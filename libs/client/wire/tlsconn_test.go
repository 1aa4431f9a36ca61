package wire_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// countingConn counts the write system calls made on a socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// selfSigned returns a server configuration with a fresh certificate for
// 127.0.0.1 and a client configuration trusting it.
func selfSigned(t testing.TB) (*tls.Config, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"h2"}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

// One 1 MiB Write over TLS leaves in writes of up to wire.SocketBuffer
// bytes on each side (crypto/tls alone makes one per 16 KiB record: 64),
// and the bytes arrive intact both ways, also while both sides write from
// two goroutines at once.
func TestTLSGathersRecordsIntoLargeWrites(t *testing.T) {
	serverCfg, clientCfg := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()

	payload := make([]byte, 1<<20)
	_, err = rand.Read(payload)
	require.NoError(t, err)

	type side struct {
		raw  *countingConn
		conn net.Conn
	}
	accepted := make(chan side, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			close(accepted)
			return
		}
		raw := &countingConn{Conn: c}
		tc := wire.BufferedTLSServer(raw, serverCfg)
		if err := tc.Handshake(); err != nil {
			close(accepted)
			return
		}
		accepted <- side{raw: raw, conn: tc}
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	require.NoError(t, err)
	craw := &countingConn{Conn: c}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cconn, _, err := wire.TLSCredentials(clientCfg).ClientHandshake(ctx, "127.0.0.1", craw)
	require.NoError(t, err)
	defer cconn.Close()
	srv, ok := <-accepted
	require.True(t, ok, "server handshake failed")
	defer srv.conn.Close()

	// One Write each way: 1 MiB in 256 KiB system calls (a record can
	// spill into a fifth).
	maxWrites := int64(len(payload)/wire.SocketBuffer + 1)
	for _, dir := range []struct{ from, to side }{{side{craw, cconn}, srv}, {srv, side{craw, cconn}}} {
		before := dir.from.raw.writes.Load()
		done := make(chan []byte, 1)
		go func() {
			got := make([]byte, len(payload))
			_, err := io.ReadFull(dir.to.conn, got)
			if err != nil {
				got = nil
			}
			done <- got
		}()
		n, err := dir.from.conn.Write(payload)
		require.NoError(t, err)
		require.Equal(t, len(payload), n)
		require.True(t, bytes.Equal(payload, <-done), "payload changed in transit")
		require.LessOrEqual(t, dir.from.raw.writes.Load()-before, maxWrites, "records gathered into SocketBuffer writes")
	}

	// A response in pieces (no writev under TLS): gathered the same way.
	pieces := net.Buffers{[]byte("head"), payload[:300<<10], []byte("mid"), payload[300<<10:]}
	want := bytes.Join(pieces, nil)
	before := srv.raw.writes.Load()
	done := make(chan []byte, 1)
	go func() {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(cconn, got); err != nil {
			got = nil
		}
		done <- got
	}()
	n, err := srv.conn.(*wire.TLSConn).WriteBuffers(&pieces)
	require.NoError(t, err)
	require.Equal(t, int64(len(want)), n)
	require.Empty(t, pieces, "the buffers are consumed")
	require.True(t, bytes.Equal(want, <-done), "pieces changed in transit")
	require.LessOrEqual(t, srv.raw.writes.Load()-before, maxWrites)

	// Two writers at once on each side (with -race): every record
	// arrives whole and in its writer's order.
	const chunks, size = 64, 40 << 10
	var wg sync.WaitGroup
	for _, s := range []side{{craw, cconn}, srv} {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range chunks {
					msg := bytes.Repeat([]byte{byte(w)}, size)
					msg[0] = byte(i)
					if _, err := s.conn.Write(msg); err != nil {
						return
					}
				}
			}()
		}
	}
	check := func(conn net.Conn) error {
		next := [2]int{}
		buf := make([]byte, size)
		for range 2 * chunks {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return err
			}
			w := int(buf[size-1])
			if w > 1 || int(buf[0]) != next[w]%256 || !bytes.Equal(buf[1:], bytes.Repeat([]byte{byte(w)}, size-1)) {
				return io.ErrUnexpectedEOF
			}
			next[w]++
		}
		return nil
	}
	errs := make(chan error, 2)
	go func() { errs <- check(cconn) }()
	go func() { errs <- check(srv.conn) }()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	wg.Wait()
}

// Close does not wait behind a gathered write to a peer that stopped
// reading (close_notify would wait for crypto/tls's 5 s write deadline):
// the blocked Write fails and Close returns.
func TestTLSCloseBreaksABlockedWrite(t *testing.T) {
	serverCfg, clientCfg := selfSigned(t)
	c, raw := tcpPair(t)
	srv := wire.BufferedTLSServer(raw, serverCfg)
	handshook := make(chan error, 1)
	go func() { handshook <- srv.Handshake() }()
	cl := tls.Client(c, clientCfg)
	require.NoError(t, cl.Handshake())
	require.NoError(t, <-handshook)

	// The client reads nothing: the server's writes fill the socket
	// buffers and block.
	written := make(chan error, 1)
	go func() {
		big := make([]byte, 64<<10) // under SocketBuffer: the socket write happens after the TLS Write returns
		for {
			if _, err := srv.Write(big); err != nil {
				written <- err
				return
			}
		}
	}()
	require.Never(t, func() bool { return len(written) > 0 }, 200*time.Millisecond, 10*time.Millisecond, "the writes block")
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		require.FailNow(t, "Close waited behind the blocked write")
	}
	select {
	case err := <-written:
		require.Error(t, err)
	case <-time.After(3 * time.Second):
		require.FailNow(t, "the blocked Write did not fail after Close")
	}
}

// The handshake runs on first use, as with tls.Server, also when that use
// is a Write (or WriteBuffers): the server's handshake messages leave at
// once instead of being gathered behind the Write, which waited for the
// client's answer to them for ever.
func TestTLSWriteBeforeHandshake(t *testing.T) {
	serverCfg, clientCfg := selfSigned(t)
	for _, method := range []string{"Write", "WriteBuffers"} {
		t.Run(method, func(t *testing.T) {
			c, raw := tcpPair(t)
			srv := wire.BufferedTLSServer(raw, serverCfg)
			defer srv.Close()
			cl := tls.Client(c, clientCfg)
			defer cl.Close()

			msg := []byte("first use is a write")
			got := make(chan []byte, 1)
			go func() {
				b := make([]byte, len(msg))
				if _, err := io.ReadFull(cl, b); err != nil {
					b = nil
				}
				got <- b
			}()
			written := make(chan error, 1)
			go func() {
				var err error
				if method == "Write" {
					_, err = srv.Write(msg)
				} else {
					bufs := net.Buffers{msg[:5], msg[5:]}
					_, err = srv.WriteBuffers(&bufs)
				}
				written <- err
			}()
			select {
			case err := <-written:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				_ = c.Close()
				_ = raw.Close() // ends the stuck handshake
				require.FailNow(t, "the first Write did not complete: the handshake waited behind it")
			}
			require.Equal(t, msg, <-got)
		})
	}
}
