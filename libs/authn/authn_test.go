package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/tlsx"
)

func cert(t *testing.T, cn string, roles ...string) *x509.Certificate {
	t.Helper()
	ca, err := tlsx.NewCA("ca", time.Hour)
	require.NoError(t, err)
	p, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: cn, Organization: []string{"Acme"}}, Roles: roles, Validity: time.Hour})
	require.NoError(t, err)
	b, _ := pem.Decode(p.CertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func callCtx(c *x509.Certificate, tlsConn bool, authz string) context.Context {
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5555}}
	if tlsConn {
		st := tls.ConnectionState{}
		if c != nil {
			st.PeerCertificates = []*x509.Certificate{c}
			st.VerifiedChains = [][]*x509.Certificate{{c}}
		}
		p.AuthInfo = credentials.TLSInfo{State: st}
	}
	ctx := peer.NewContext(context.Background(), p)
	if authz != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", authz))
	}
	return ctx
}

func basic(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

func requireCode(t *testing.T, err error, code errs.Code) {
	t.Helper()
	var se *errs.Error
	require.True(t, errors.As(err, &se), "want a Sluice error, got %v", err)
	require.Equal(t, code, se.Code, se.Error())
}

func TestIdentify(t *testing.T) {
	rules, err := tlsx.ParseMappingRules(`RULE:^CN=([^,]+),O=Acme$/$1/L,DEFAULT`)
	require.NoError(t, err)
	pw := PasswordVerifierFunc(func(_ context.Context, user, password string) error {
		if user == "alice" && password == "s3cret" {
			return nil
		}
		return errors.New("wrong password")
	})
	a := New(Options{Rules: rules, Passwords: pw})

	id, err := a.Identify(callCtx(cert(t, "Node-1", "controller", "storage-node"), true, ""))
	require.NoError(t, err)
	require.Equal(t, auth.Identity{Principal: auth.User("node-1"), Host: "10.1.2.3", Role: "controller,storage-node", Mechanism: "mtls"}, id)

	// A certificate wins over credentials sent alongside it.
	id, err = a.Identify(callCtx(cert(t, "bob"), true, basic("alice", "s3cret")))
	require.NoError(t, err)
	require.Equal(t, "User:bob", id.Principal.String())

	id, err = a.Identify(callCtx(nil, true, basic("alice", "s3cret")))
	require.NoError(t, err)
	require.Equal(t, auth.Identity{Principal: auth.User("alice"), Host: "10.1.2.3", Mechanism: "password"}, id)

	_, err = a.Identify(callCtx(nil, true, basic("alice", "nope")))
	requireCode(t, err, errs.SaslAuthenticationFailed)

	_, err = a.Identify(callCtx(nil, false, basic("alice", "s3cret")))
	requireCode(t, err, errs.SaslAuthenticationFailed)
	require.ErrorContains(t, err, "plaintext")

	_, err = a.Identify(callCtx(nil, true, "Bearer xyz"))
	requireCode(t, err, errs.SaslAuthenticationFailed)

	_, err = New(Options{}).Identify(callCtx(nil, true, basic("alice", "s3cret")))
	require.ErrorContains(t, err, "does not accept passwords")

	id, err = a.Identify(callCtx(nil, false, ""))
	require.NoError(t, err)
	require.Equal(t, auth.Identity{Principal: auth.Anonymous, Host: "10.1.2.3"}, id)

	_, err = New(Options{Require: true}).Identify(callCtx(nil, true, ""))
	requireCode(t, err, errs.SaslAuthenticationFailed)

	// No rule applies: the certificate does not authenticate.
	strict, err := tlsx.ParseMappingRules(`RULE:^CN=([^,]+),O=Other$/$1/`)
	require.NoError(t, err)
	_, err = New(Options{Rules: strict}).Identify(callCtx(cert(t, "bob"), true, ""))
	requireCode(t, err, errs.SaslAuthenticationFailed)
}

// A role certificate bound to a node id carries it into the identity; a
// client certificate never has one.
func TestFromCertificateNodeID(t *testing.T) {
	ca, err := tlsx.NewCA("ca", time.Hour)
	require.NoError(t, err)
	parse := func(o tlsx.Issue) *x509.Certificate {
		o.Validity = time.Hour
		p, err := ca.Issue(o)
		require.NoError(t, err)
		b, _ := pem.Decode(p.CertPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		require.NoError(t, err)
		return c
	}
	a := New(Options{})
	id, err := a.FromCertificate("10.0.0.2", parse(tlsx.Issue{Subject: pkix.Name{CommonName: "storage-2"}, Roles: []string{"storage-node"}, NodeID: 2}))
	require.NoError(t, err)
	require.EqualValues(t, 2, id.NodeID)
	require.Equal(t, "storage-node", id.Role)
	id, err = a.FromCertificate("10.0.0.9", parse(tlsx.Issue{Subject: pkix.Name{CommonName: "alice"}, NodeID: 2}))
	require.NoError(t, err)
	require.Zero(t, id.NodeID, "only role certificates act for a node")
}
