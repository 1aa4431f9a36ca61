package cmd

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/tlsx"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

func TestCerts(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	require.NoError(t, runCerts(&out, &certsOptions{dir: dir, days: 30,
		nodes: []string{"n1:controller,storage-node:127.0.0.1,n1.example"}, clients: []string{"alice"}}))
	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	n1 := readCert(t, filepath.Join(dir, "n1.crt"))
	require.Equal(t, []string{"controller", "storage-node"}, tlsx.RolesOf(n1))
	// The node's own name, then one name per role: the embedded etcd
	// admits only certificates naming the controller role.
	require.Equal(t, []string{"n1.example", "controller.role.sluice.invalid", "storage-node.role.sluice.invalid"}, n1.DNSNames)
	require.Equal(t, "127.0.0.1", n1.IPAddresses[0].String())
	alice := readCert(t, filepath.Join(dir, "alice.crt"))
	require.Empty(t, tlsx.RolesOf(alice))
	require.Equal(t, "CN=alice", tlsx.DistinguishedName(alice.Subject))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := n1.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"})
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(dir, "alice.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A second run reuses the CA.
	require.NoError(t, runCerts(&out, &certsOptions{dir: dir, days: 30, clients: []string{"bob"}}))
	require.True(t, ca.Equal(readCert(t, filepath.Join(dir, "ca.crt"))))
	_, err = readCert(t, filepath.Join(dir, "bob.crt")).Verify(x509.VerifyOptions{Roots: pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)

	for _, bad := range []certsOptions{
		{dir: dir, days: 30},
		{dir: dir, days: 0, clients: []string{"x"}},
		{dir: dir, days: 30, nodes: []string{"n1:controller"}},
		{dir: dir, days: 30, nodes: []string{"n1:wizard:127.0.0.1"}},
		{dir: dir, days: 30, clients: []string{"../etc"}},
		{dir: dir, days: 30, clients: []string{"ca"}},
	} {
		require.Error(t, runCerts(&out, &bad), "%+v", bad)
	}
}

func TestClientConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.conf")
	require.NoError(t, writeClientConfig(path, map[string]string{"bootstrap": "h:1", "tls-ca": "/x/ca.crt"}))
	kv, err := readClientConfig(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"bootstrap": "h:1", "tls-ca": "/x/ca.crt"}, kv)
	require.NoError(t, os.WriteFile(path, []byte("bootstrap=h:1\npassword=x\n"), 0o600))
	_, err = readClientConfig(path)
	require.ErrorContains(t, err, "line 2")
}
