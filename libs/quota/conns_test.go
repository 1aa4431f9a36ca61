package quota

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func serveEcho(t *testing.T, lis net.Listener) {
	t.Helper()
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				_, _ = io.Copy(nc, nc)
			}()
		}
	}()
}

// roundTrip reports whether a byte written to nc comes back.
func roundTrip(t *testing.T, nc net.Conn) bool {
	t.Helper()
	require.NoError(t, nc.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := nc.Write([]byte{1}); err != nil {
		return false
	}
	var b [1]byte
	_, err := io.ReadFull(nc, b[:])
	return err == nil
}

func TestMaxConnectionsPerIP(t *testing.T) {
	m := NewManager(Options{MaxConnectionsPerIP: 2})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveEcho(t, m.LimitListener(inner, "test"))
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = nc.Close() })
		return nc
	}
	a, b := dial(), dial()
	require.True(t, roundTrip(t, a))
	require.True(t, roundTrip(t, b))
	require.False(t, roundTrip(t, dial()), "a third connection from the address is closed")
	require.NoError(t, a.Close())
	// The slot frees once the server side closes its end.
	require.Eventually(t, func() bool { return roundTrip(t, dial()) }, 5*time.Second, 20*time.Millisecond)
}

func TestMaxConnectionsOverride(t *testing.T) {
	cfg := Config{WindowNum: 11, WindowSize: time.Second, MaxConnectionsPerIP: 1, MaxConnectionsPerIPOverrides: "127.0.0.1:0"}
	require.NoError(t, cfg.Validate())
	m := cfg.New(nil, nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveEcho(t, m.LimitListener(inner, "test"))
	for range 3 {
		nc, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		defer nc.Close()
		require.True(t, roundTrip(t, nc), "127.0.0.1 has no limit")
	}
	for _, bad := range []string{"1.2.3.4", "nope:3", "1.2.3.4:-1"} {
		cfg.MaxConnectionsPerIPOverrides = bad
		require.Error(t, cfg.Validate(), bad)
	}
}

func TestConnectionCreationRate(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ConnectionCreationRate: 2}, dflt(EntityIP))}), 1)
	ip := addrOf(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)})
	require.Zero(t, m.recordConnection(ip))
	require.Zero(t, m.recordConnection(ip))
	// The third in one second is over 2/s: held for up to one sample.
	require.Equal(t, 500*time.Millisecond, m.recordConnection(ip))
	// Another address has its own rate.
	require.Zero(t, m.recordConnection(addrOf(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 2)})))
}
