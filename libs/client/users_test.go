package client

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

// Passwords go only over TLS, as Basic credentials on every call.
func TestBasicCredentials(t *testing.T) {
	_, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, User: "alice", Password: "pw"})
	require.ErrorContains(t, err, "only over TLS")
	c, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, User: "alice", Password: "p:w", TLS: &tls.Config{}})
	require.NoError(t, err)
	require.NoError(t, c.Close())

	b, err := newBasicAuth("alice", "p:w")
	require.NoError(t, err)
	require.True(t, b.RequireTransportSecurity())
	md, err := b.GetRequestMetadata(context.Background())
	require.NoError(t, err)
	require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:p:w")), md["authorization"])
	_, err = newBasicAuth("a:b", "pw")
	require.Error(t, err)
}
