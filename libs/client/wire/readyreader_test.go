package wire_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// countingPool is the shared pool, counting the buffers taken and given
// back.
type countingPool struct {
	gets, puts atomic.Int64
}

func (p *countingPool) Get(size int) *[]byte {
	p.gets.Add(1)
	return wire.BufferPool().Get(size)
}

func (p *countingPool) Put(b *[]byte) {
	p.puts.Add(1)
	wire.BufferPool().Put(b)
}

func (p *countingPool) held() int64 { return p.gets.Load() - p.puts.Load() }

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	client, err = net.Dial("tcp", lis.Addr().String())
	require.NoError(t, err)
	server, err = lis.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// A ReadyReader holds a buffer only while it has bytes not yet read: it
// takes one when the socket has bytes, gives it back once they are read,
// and every byte arrives in order whatever the sizes of the writes and
// reads, a read as large as the buffer going straight to the caller.
func TestReadyReaderHoldsABufferOnlyWhileItHasUnreadBytes(t *testing.T) {
	client, server := tcpPair(t)
	var pool countingPool
	r := wire.NewReadyReader(server, 64, &pool)
	msg := make([]byte, 1000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	for _, chunk := range []int{1, 3, 64, 65, 200, 1000} {
		for _, readSize := range []int{1, 5, 63, 64, 500} {
			go func() {
				for rest := msg; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
					_, _ = client.Write(rest[:min(chunk, len(rest))]) // a failure shows as a short read
				}
			}()
			got := make([]byte, 0, len(msg))
			p := make([]byte, readSize)
			for len(got) < len(msg) {
				n, err := r.Read(p[:min(readSize, len(msg)-len(got))])
				require.NoError(t, err)
				got = append(got, p[:n]...)
				require.Equal(t, r.Buffered() > 0, pool.held() == 1, "a buffer is held exactly while bytes are buffered")
			}
			require.Equal(t, msg, got, "chunks of %d read %d at a time", chunk, readSize)
			require.Zero(t, r.Buffered())
			require.Zero(t, pool.held(), "everything read: no buffer held")
		}
	}
	require.NotZero(t, pool.gets.Load(), "small reads go through pooled buffers")
	require.NoError(t, client.Close())
	_, err := r.Read(make([]byte, 8))
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, pool.held())
}

// An idle TLS connection made by BufferedTLSServer holds no read buffer
// under the TLS layer: the buffer is taken when the socket has bytes and
// given back once the TLS layer has read them, and messages keep arriving
// intact across the idle gaps.
func TestIdleTLSConnectionHoldsNoReadBuffer(t *testing.T) {
	var pool countingPool
	defer wire.SetSocketReadPool(&pool)()
	serverCfg, clientCfg := selfSigned(t)
	rawClient, rawServer := tcpPair(t)
	server := wire.BufferedTLSServer(rawServer, serverCfg)
	client := tls.Client(rawClient, clientCfg)
	defer client.Close()
	defer server.Close()

	for i, size := range []int{10, 100 << 10, 1 << 20, 1} {
		msg := bytes.Repeat([]byte{byte(i + 1)}, size)
		errc := make(chan error, 1)
		go func() {
			_, err := client.Write(msg)
			errc <- err
		}()
		got := make([]byte, size)
		_, err := io.ReadFull(server, got)
		require.NoError(t, err)
		require.NoError(t, <-errc)
		require.Equal(t, msg, got, "message %d", i)
		// Everything sent was read: the server is between messages.
		require.NotZero(t, pool.gets.Load(), "the socket is read through pooled buffers")
		require.Zero(t, pool.held(), "after message %d the idle connection holds a read buffer", i)
	}
}
