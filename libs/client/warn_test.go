package client_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client that retries while no bootstrap node answers says so through its
// logger, at most once every few seconds, instead of waiting in silence.
func TestNoBootstrapAnswerIsLogged(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // nothing listens there now

	var buf syncBuffer
	c, err := client.New(client.Config{Bootstrap: []string{addr}, RequestTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	defer c.Close()
	for range 3 {
		_, err = c.Metadata(context.Background())
		require.Error(t, err)
	}
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "no bootstrap node answered; retrying"), out)
	require.Contains(t, out, addr)
}
