package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func issue(t *testing.T, ca *CA, cn string, roles ...string) Pair {
	t.Helper()
	p, err := ca.Issue(Issue{Subject: pkix.Name{CommonName: cn, Organization: []string{"Acme"}}, Roles: roles,
		Hosts: []string{"localhost", "127.0.0.1"}, Validity: time.Hour})
	require.NoError(t, err)
	return p
}

func parse(t *testing.T, p Pair) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p.CertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func TestRolesOf(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"controller", "storage-node"}, RolesOf(parse(t, issue(t, ca, "n1", "controller", "storage-node"))))
	require.Empty(t, RolesOf(parse(t, issue(t, ca, "alice"))))
	require.Nil(t, RolesOf(nil))
}

func TestMappingRules(t *testing.T) {
	cases := []struct {
		rules, dn, want, err string
	}{
		{rules: "", dn: "CN=alice,O=Acme", want: "CN=alice,O=Acme"},
		{rules: "DEFAULT", dn: "CN=alice,O=Acme", want: "CN=alice,O=Acme"},
		{rules: `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, dn: "CN=svc,OU=ServiceUsers,O=Acme", want: "svc"},
		{rules: `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, dn: "CN=bob,OU=People,O=Acme", want: "CN=bob,OU=People,O=Acme"},
		// Kafka's documented example: two groups, lower-cased.
		{rules: `RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L`, dn: "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", want: "duke@javasoft"},
		{rules: `RULE:^CN=([^,]+).*$/$1/U`, dn: "CN=alice,O=Acme", want: "ALICE"},
		// $1x is group 1 then x, as in Java.
		{rules: `RULE:^CN=([^,]+).*$/$1x/`, dn: "CN=alice,O=Acme", want: "alicex"},
		// Escaped slash in the replacement; rules on separate lines.
		{rules: "RULE:^CN=([^,]+),O=Nope$/x/\nRULE:^CN=([^,]+).*$/a\\/$1/", dn: "CN=alice,O=Acme", want: "a/alice"},
		// The pattern must match the whole name.
		{rules: `RULE:CN=alice/x/`, dn: "CN=alice,O=Acme", err: "no principal mapping rule applies"},
		{rules: `RULE:^CN=(.*)$/$1/`, dn: "O=Acme", err: "no principal mapping rule applies"},
		{rules: `RULE:^(O)=.*$/$2/`, dn: "O=Acme", err: "empty principal name"},
	}
	for _, c := range cases {
		rs, err := ParseMappingRules(c.rules)
		require.NoError(t, err, c.rules)
		got, err := rs.Map(c.dn)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.rules)
			continue
		}
		require.NoError(t, err, c.rules)
		require.Equal(t, c.want, got, c.rules)
	}
	for _, bad := range []string{"RULE:abc", "RULE:a/b", "FOO", "RULE:(/x/", "DEFAULT junk", "RULE:a/b/X"} {
		_, err := ParseMappingRules(bad)
		require.Error(t, err, bad)
	}
}

func TestDistinguishedNameOrder(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	require.Equal(t, "CN=alice,O=Acme", DistinguishedName(parse(t, issue(t, ca, "alice")).Subject))
}

// writeIdentity writes ca.crt, node.crt and node.key under dir.
func writeIdentity(t *testing.T, dir string, ca *CA, cn string) Files {
	t.Helper()
	caPair, err := ca.Pair()
	require.NoError(t, err)
	caFile, _, err := caPair.WriteFiles(dir, "ca")
	require.NoError(t, err)
	cert, key, err := issue(t, ca, cn, "controller").WriteFiles(dir, "node")
	require.NoError(t, err)
	return Files{Cert: cert, Key: key, CA: caFile}
}

// handshake connects a client using clientSrc's client configuration to a
// server using srvSrc's server configuration and returns the subject CN each
// side saw, or the client's handshake error.
func handshake(t *testing.T, srvSrc, clientSrc *Source) (serverCN, clientCN string, err error) {
	t.Helper()
	lis, lerr := tls.Listen("tcp", "127.0.0.1:0", srvSrc.ServerConfig(ClientAuthRequire))
	require.NoError(t, lerr)
	defer lis.Close()
	got := make(chan string, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			got <- ""
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
			got <- ""
			return
		}
		got <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		_, _ = io.Copy(io.Discard, c) // until the client closes
	}()
	cfg := clientSrc.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), cfg)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	// TLS 1.3: the server verifies the client after the client's handshake
	// ends; a round trip makes its verdict visible.
	clientCN = conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	select {
	case serverCN = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("server handshake did not finish")
	}
	return serverCN, clientCN, nil
}

func TestSourceReloadsChangedFiles(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	srvDir, cliDir := t.TempDir(), t.TempDir()
	srv, err := NewSource(writeIdentity(t, srvDir, ca, "server-1"), nil)
	require.NoError(t, err)
	cli, err := NewSource(writeIdentity(t, cliDir, ca, "client-1"), nil)
	require.NoError(t, err)

	sCN, cCN, err := handshake(t, srv, cli)
	require.NoError(t, err)
	require.Equal(t, "client-1", sCN)
	require.Equal(t, "server-1", cCN)

	// A new server certificate is presented on the next connection.
	_, _, err = issue(t, ca, "server-2", "controller").WriteFiles(srvDir, "node")
	require.NoError(t, err)
	_, cCN, err = handshake(t, srv, cli)
	require.NoError(t, err)
	require.Equal(t, "server-2", cCN)

	// A broken file keeps the previous identity.
	require.NoError(t, os.WriteFile(filepath.Join(srvDir, "node.crt"), []byte("garbage"), 0o644))
	_, cCN, err = handshake(t, srv, cli)
	require.NoError(t, err)
	require.Equal(t, "server-2", cCN)

	// A new CA on the server side only: the client's certificate from the
	// old CA is refused, and the client refuses the server's new one.
	ca2, err := NewCA("test CA 2", time.Hour)
	require.NoError(t, err)
	writeIdentity(t, srvDir, ca2, "server-3")
	_, _, err = handshake(t, srv, cli)
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	// The client's CA file now trusts the new CA too, and its own
	// certificate comes from it: both sides accept again.
	caPair, err := ca2.Pair()
	require.NoError(t, err)
	old, err := os.ReadFile(filepath.Join(cliDir, "ca.crt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(cliDir, "ca.crt"), append(old, caPair.CertPEM...), 0o644))
	_, _, err = issue(t, ca2, "client-2").WriteFiles(cliDir, "node")
	require.NoError(t, err)
	sCN, cCN, err = handshake(t, srv, cli)
	require.NoError(t, err)
	require.Equal(t, "client-2", sCN)
	require.Equal(t, "server-3", cCN)
}

func TestNewSourceRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := NewSource(Files{Cert: filepath.Join(dir, "missing.crt"), Key: filepath.Join(dir, "missing.key")}, nil)
	require.ErrorContains(t, err, "loading TLS certificate")
	_, err = NewSource(Files{}, nil)
	require.Error(t, err)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, (&Config{PrincipalMappingRules: "DEFAULT"}).Validate())
	require.NoError(t, (&Config{Cert: "a", Key: "b", CA: "c"}).Validate())
	require.Equal(t, ClientAuthRequest, (&Config{Cert: "a", Key: "b", CA: "c"}).Mode())
	require.Equal(t, ClientAuthNone, (&Config{Cert: "a", Key: "b"}).Mode())
	require.ErrorContains(t, (&Config{Cert: "a"}).Validate(), "go together")
	require.ErrorContains(t, (&Config{CA: "c"}).Validate(), "need tls.cert")
	require.ErrorContains(t, (&Config{Cert: "a", Key: "b", ClientAuth: "require"}).Validate(), "needs tls.ca")
	require.ErrorContains(t, (&Config{Cert: "a", Key: "b", ClientAuth: "maybe"}).Validate(), "not one of")
	require.ErrorContains(t, (&Config{PrincipalMappingRules: "RULE:x"}).Validate(), "mapping-rules")
}

// A node certificate names its roles by URI and DNS SANs and, when asked,
// the node id it is bound to; a client certificate names neither.
func TestNodeAndRoleNames(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	require.NoError(t, err)
	parse := func(o Issue) *x509.Certificate {
		o.Validity = time.Hour
		p, err := ca.Issue(o)
		require.NoError(t, err)
		b, _ := pem.Decode(p.CertPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		require.NoError(t, err)
		return c
	}
	node := parse(Issue{Subject: pkix.Name{CommonName: "s2"}, Roles: []string{"storage-node", "controller"}, NodeID: 2})
	id, ok := NodeIDOf(node)
	require.True(t, ok)
	require.EqualValues(t, 2, id)
	require.True(t, HasRoleDNSName(node, "controller"))
	require.Equal(t, []string{"storage-node", "controller"}, RolesOf(node))
	client := parse(Issue{Subject: pkix.Name{CommonName: "alice"}})
	_, ok = NodeIDOf(client)
	require.False(t, ok)
	require.False(t, HasRoleDNSName(client, "controller"))
	unbound := parse(Issue{Subject: pkix.Name{CommonName: "s3"}, Roles: []string{"storage-node"}})
	_, ok = NodeIDOf(unbound)
	require.False(t, ok)
}
