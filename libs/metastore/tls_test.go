package metastore_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// The embedded etcd member takes clients and peers with a controller's
// certificate only: a client certificate or a storage node's, signed by
// the same CA, is refused on the client port and on the peer port.
func TestEtcdTLSAcceptsOnlyControllers(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlsx.NewCA("test CA", time.Hour)
	require.NoError(t, err)
	caPair, err := ca.Pair()
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, caPair.CertPEM, 0o644))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	issue := func(name string, roles ...string) (tls.Certificate, string, string) {
		p, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: name}, Roles: roles, Hosts: []string{"127.0.0.1"}, Validity: time.Hour})
		require.NoError(t, err)
		certFile, keyFile, err := p.WriteFiles(dir, name)
		require.NoError(t, err)
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		require.NoError(t, err)
		return c, certFile, keyFile
	}
	ctlCert, ctlFile, ctlKey := issue("controller-1", "controller")
	clientCert, _, _ := issue("alice")
	storageCert, _, _ := issue("storage-1", "storage-node", "replication")

	cfg := metastoretest.Config(t)
	cfg.TLS = &metastore.TLS{CertFile: ctlFile, KeyFile: ctlKey, CAFile: caFile,
		Client: &tls.Config{Certificates: []tls.Certificate{ctlCert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}
	ctx := context.Background()
	st, err := metastore.Open(ctx, cfg, "c1", t.TempDir(), log.Discard())
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	_, err = st.Client.Put(ctx, st.Key("k"), "v")
	require.NoError(t, err, "the controller's own client")

	get := func(cert tls.Certificate, addr string) error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + addr + "/version")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	for _, addr := range []string{cfg.ClientListen, cfg.PeerListen} {
		require.NoError(t, get(ctlCert, addr), "controller at %s", addr)
		require.Error(t, get(clientCert, addr), "client certificate at %s", addr)
		require.Error(t, get(storageCert, addr), "storage node certificate at %s", addr)
	}
}
