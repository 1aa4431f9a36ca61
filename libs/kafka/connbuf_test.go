package kafka

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/mem"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// countBuffers makes the package's connections count the read buffers and
// writers they hold, for the test's length.
func countBuffers(t *testing.T) (readsHeld, writersHeld func() int64, readsTaken *atomic.Int64) {
	var rGets, rPuts, wGets, wPuts atomic.Int64
	oldPool, oldGet, oldPut := readPool, getWriter, putWriter
	readPool = countingPool{inner: oldPool, gets: &rGets, puts: &rPuts}
	getWriter = func(w io.Writer) *bufio.Writer { wGets.Add(1); return oldGet(w) }
	putWriter = func(bw *bufio.Writer) { wPuts.Add(1); oldPut(bw) }
	t.Cleanup(func() { readPool, getWriter, putWriter = oldPool, oldGet, oldPut })
	return func() int64 { return rGets.Load() - rPuts.Load() },
		func() int64 { return wGets.Load() - wPuts.Load() }, &rGets
}

type countingPool struct {
	inner      mem.BufferPool
	gets, puts *atomic.Int64
}

func (p countingPool) Get(size int) *[]byte { p.gets.Add(1); return p.inner.Get(size) }
func (p countingPool) Put(b *[]byte)        { p.puts.Add(1); p.inner.Put(b) }

// readCountingListener's connections count the bytes the server has read
// from them; they wait for bytes as quota.LimitListener's do (ReadOnReady).
type readCountingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *readCountingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &readCountingConn{Conn: nc, l: l}, nil
}

type readCountingConn struct {
	net.Conn
	l *readCountingListener
}

func (c *readCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}

func (c *readCountingConn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	b, n, err := wire.ReadOnReady(c.Conn, size, pool)
	c.l.read.Add(int64(n))
	return b, n, err
}

// echoServer answers Produce v8 with the digest of the first partition's
// record batches as the error message, so a response shows the request
// was parsed whole.
func echoServer(t *testing.T, tlsCfg *tls.Config) (*Server, *readCountingListener) {
	mux := NewMux()
	mux.Handle(0, 3, 8, func(_ context.Context, req *Request) (Reply, error) {
		r := req.Msg.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = r.Topics[0].Topic
		rp := kmsg.NewProduceResponseTopicPartition()
		msg := digest(r.Topics[0].Partitions[0].Records)
		rp.ErrorMessage = &msg
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return Now(resp), nil
	})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := &readCountingListener{Listener: inner}
	s := NewServer(Config{}, mux, lis, ServerOptions{TLS: tlsCfg})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s, lis
}

func digest(b []byte) string { return fmt.Sprintf("%d:%08x", len(b), crc32.ChecksumIEEE(b)) }

// produceFrame is a Produce v8 request frame (its size first) carrying
// records.
func produceFrame(corr int32, records []byte) []byte {
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(8)
	r.Acks, r.TimeoutMillis = 1, 1000
	tp := kmsg.NewProduceRequestTopic()
	tp.Topic = "t"
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = records
	tp.Partitions = append(tp.Partitions, p)
	r.Topics = append(r.Topics, tp)
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, r, corr)
}

// readEcho reads a Produce v8 response and returns its correlation id and
// the digest it echoes.
func readEcho(t *testing.T, nc net.Conn) (int32, string) {
	t.Helper()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	var size [4]byte
	_, err := io.ReadFull(nc, size[:])
	require.NoError(t, err)
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(nc, frame)
	require.NoError(t, err)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(8)
	require.NoError(t, resp.ReadFrom(frame[4:]))
	return int32(binary.BigEndian.Uint32(frame)), *resp.Topics[0].Partitions[0].ErrorMessage
}

// An idle Kafka connection holds neither a read buffer nor a writer: the
// reader takes its buffer when the socket has bytes and gives it back once
// it has read them, the writer its buffer for the responses queued and
// back after they are flushed, in plaintext and over TLS.
func TestIdleConnectionHoldsNoBuffers(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plaintext"
		if withTLS {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) {
			readsHeld, writersHeld, readsTaken := countBuffers(t)
			var serverCfg, clientCfg *tls.Config
			if withTLS {
				serverCfg, clientCfg = selfSigned(t)
			}
			s, _ := echoServer(t, serverCfg)
			nc, err := net.Dial("tcp", s.Addr().String())
			require.NoError(t, err)
			if withTLS {
				nc = tls.Client(nc, clientCfg)
			}
			defer nc.Close()
			for corr, size := range []int{10, 40 << 10, 1 << 20, 1} {
				records := bytes.Repeat([]byte{byte(corr + 1)}, size)
				_, err := nc.Write(produceFrame(int32(corr), records))
				require.NoError(t, err)
				gotCorr, echo := readEcho(t, nc)
				require.Equal(t, int32(corr), gotCorr)
				require.Equal(t, digest(records), echo)
				require.Eventually(t, func() bool { return readsHeld() == 0 && writersHeld() == 0 }, 5*time.Second, time.Millisecond,
					"after response %d the idle connection holds %d read buffers, %d writers", corr, readsHeld(), writersHeld())
			}
			if !withTLS {
				// Over TLS the reader waits in crypto/tls, which has the
				// decrypted record: it reads straight from it.
				require.NotZero(t, readsTaken.Load(), "requests are read through pooled buffers")
			}
		})
	}
}

// A request whose bytes arrive in two parts, split at any byte, is parsed
// whole, though the reader gave its buffer back after the first part and
// took another for the second; pipelined requests too.
func TestRequestSplitAtEveryByteAcrossBuffers(t *testing.T) {
	readsHeld, writersHeld, _ := countBuffers(t)
	s, lis := echoServer(t, nil)
	nc, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	records := []byte("split me anywhere, get me back whole")
	for i := 1; i < len(produceFrame(0, records)); i++ {
		corr := int32(i)
		frame := produceFrame(corr, records)
		// Two requests: the first split at i, the second following the
		// first's last part in the same write.
		next := produceFrame(-corr, records)
		before := lis.read.Load()
		_, err := nc.Write(frame[:i])
		require.NoError(t, err)
		require.Eventually(t, func() bool { return lis.read.Load() == before+int64(i) && readsHeld() == 0 }, 5*time.Second, time.Millisecond,
			"split at %d: the server read the first part and gave its buffer back", i)
		_, err = nc.Write(append(frame[i:], next...))
		require.NoError(t, err)
		for _, want := range []int32{corr, -corr} {
			gotCorr, echo := readEcho(t, nc)
			require.Equal(t, want, gotCorr, "split at %d", i)
			require.Equal(t, digest(records), echo, "split at %d", i)
		}
	}
	require.Eventually(t, func() bool { return readsHeld() == 0 && writersHeld() == 0 }, 5*time.Second, time.Millisecond)
}

// selfSigned returns a server configuration with a certificate for
// 127.0.0.1 from a fresh CA (tlsx, as tls_test.go) and a client
// configuration trusting it.
func selfSigned(t *testing.T) (*tls.Config, *tls.Config) {
	t.Helper()
	ca, err := tlsx.NewCA("test CA", time.Hour)
	require.NoError(t, err)
	node, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: "node-1"}, Hosts: []string{"127.0.0.1"}, Validity: time.Hour})
	require.NoError(t, err)
	kp, err := tls.X509KeyPair(node.CertPEM, node.KeyPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{kp}}, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}
