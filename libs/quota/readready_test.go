package quota

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
)

// readyReader is the method grpc-go looks for on an accepted connection
// to take its read buffer only when bytes arrive (see ReadOnReady).
type readyReader interface {
	ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error)
}

// countingPool counts the buffers handed out and not yet given back.
type countingPool struct {
	mu        sync.Mutex
	gets, out int
}

func (p *countingPool) Get(n int) *[]byte {
	p.mu.Lock()
	p.gets++
	p.out++
	p.mu.Unlock()
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(*[]byte) {
	p.mu.Lock()
	p.out--
	p.mu.Unlock()
}

func (p *countingPool) state() (gets, out int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gets, p.out
}

// A connection accepted through LimitListener waits for bytes without
// holding a read buffer, so an idle gRPC connection pins none.
func TestLimitedConnReadOnReadyHoldsNoBufferWhileIdle(t *testing.T) {
	m := NewManager(Options{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := m.LimitListener(inner, "test")
	t.Cleanup(func() { _ = lis.Close() })
	client, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	nc, err := lis.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	rr, ok := nc.(readyReader)
	require.True(t, ok, "an accepted connection must offer ReadOnReady, or grpc-go gives it a read buffer for life")

	type result struct {
		buf *[]byte
		n   int
		err error
	}
	pool := &countingPool{}
	read := func() <-chan result {
		ch := make(chan result, 1)
		go func() {
			b, n, err := rr.ReadOnReady(64<<10, pool)
			ch <- result{b, n, err}
		}()
		return ch
	}
	got := read()
	// The read tried the socket once, found nothing and gave the buffer
	// back before waiting.
	require.Eventually(t, func() bool { g, o := pool.state(); return g >= 1 && o == 0 }, 5*time.Second, 5*time.Millisecond)
	_, err = client.Write([]byte("hello"))
	require.NoError(t, err)
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, "hello", string((*r.buf)[:r.n]))
	_, out := pool.state()
	require.Equal(t, 1, out, "the caller holds the buffer read into")
	pool.Put(r.buf)

	require.NoError(t, client.Close())
	r = <-read()
	require.ErrorIs(t, r.err, io.EOF)
	require.Nil(t, r.buf)
	_, out = pool.state()
	require.Zero(t, out)
}

// What an idle gRPC connection through LimitListener costs the server's
// heap with a 256 KiB read buffer (the servers' size, wire.SocketBuffer):
// the buffer was allocated per connection for its whole life (1.6 GiB for
// 6,500 idle connections) before LimitListener's connections offered
// ReadOnReady. Client and server are both in this process, so the figure
// is both ends of each connection.
func TestIdleGRPCConnectionsHoldNoReadBuffer(t *testing.T) {
	const readBuffer = 256 << 10
	const conns = 64
	m := NewManager(Options{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ReadBufferSize(readBuffer), grpc.WriteBufferSize(readBuffer), grpc.SharedWriteBuffer(true))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(m.LimitListener(inner, "grpc")) }()
	t.Cleanup(srv.Stop)

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before := heap()
	var clients []*grpc.ClientConn
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range conns {
		c, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithSharedWriteBuffer(true))
		require.NoError(t, err)
		clients = append(clients, c)
		_, err = healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}
	perConn := (int64(heap()) - int64(before)) / conns
	t.Logf("heap in use per idle connection, both ends: %d KiB", perConn>>10)
	require.Less(t, perConn, int64(readBuffer/2), "an idle connection holds a read buffer")
}
