package kafka_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// tlsServer starts a listener with TLS (client certificates requested) whose
// Heartbeat handler reports the identity on the request's context.
func tlsServer(t *testing.T, requireAuth bool) (*kafka.Server, *tlsx.CA, <-chan auth.Identity) {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsx.NewCA("test CA", time.Hour)
	require.NoError(t, err)
	caPair, err := ca.Pair()
	require.NoError(t, err)
	caFile, _, err := caPair.WriteFiles(dir, "ca")
	require.NoError(t, err)
	node, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: "node-1"}, Roles: []string{"storage-node"},
		Hosts: []string{"127.0.0.1"}, Validity: time.Hour})
	require.NoError(t, err)
	cert, key, err := node.WriteFiles(dir, "node")
	require.NoError(t, err)
	src, err := tlsx.NewSource(tlsx.Files{Cert: cert, Key: key, CA: caFile}, nil)
	require.NoError(t, err)
	rules, err := tlsx.ParseMappingRules(`RULE:^CN=([^,]+).*$/$1/`)
	require.NoError(t, err)

	seen := make(chan auth.Identity, 4)
	mux := kafka.NewMux()
	mux.Handle(kmsg.Heartbeat.Int16(), 0, 4, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
		id, _ := auth.FromContext(ctx)
		seen <- id
		return kafka.Now(req.Msg.(*kmsg.HeartbeatRequest).ResponseKind()), nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{
		TLS: src.ServerConfig(tlsx.ClientAuthRequest), Authn: authn.New(authn.Options{Rules: rules, Require: requireAuth})})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s, ca, seen
}

func dialTLS(t *testing.T, s *kafka.Server, ca *tlsx.CA, clientCN string) *client {
	t.Helper()
	cfg := &tls.Config{ServerName: "127.0.0.1", RootCAs: mustPool(t, ca)}
	if clientCN != "" {
		p, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: clientCN, Organization: []string{"Acme"}}, Validity: time.Hour})
		require.NoError(t, err)
		kp, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{kp}
	}
	nc, err := tls.Dial("tcp", s.Addr().String(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client"))}
}

func mustPool(t *testing.T, ca *tlsx.CA) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

func TestTLSIdentity(t *testing.T) {
	s, ca, seen := tlsServer(t, false)

	c := dialTLS(t, s, ca, "alice")
	id := c.heartbeat(t, seen)
	require.Equal(t, auth.Identity{Principal: auth.User("alice"), Host: "127.0.0.1", Mechanism: "mtls"}, id)

	c = dialTLS(t, s, ca, "")
	id = c.heartbeat(t, seen)
	require.Equal(t, auth.Identity{Principal: auth.Anonymous, Host: "127.0.0.1"}, id)

	// A plaintext client: the handshake fails and the connection closes
	// without an answer.
	p := dial(t, s)
	p.send(heartbeat("g"), 4)
	p.requireClosed()
}

func TestTLSRequireRefusesAnonymous(t *testing.T) {
	s, ca, seen := tlsServer(t, true)
	require.Equal(t, "alice", dialTLS(t, s, ca, "alice").heartbeat(t, seen).Principal.Name)
	c := dialTLS(t, s, ca, "")
	c.send(heartbeat("g"), 4)
	c.requireClosed()
}
