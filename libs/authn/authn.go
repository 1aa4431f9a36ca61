package authn

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// Config is the authentication policy of a process (--auth.* flags).
type Config struct {
	// Require refuses client calls that present neither a client
	// certificate nor credentials, instead of serving them as ANONYMOUS.
	Require bool
}

// RegisterFlags registers --auth.require.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Require, "auth.require", false,
		"Refuse client calls (gRPC and Kafka) that present neither a client certificate nor credentials, instead of serving them as User:ANONYMOUS.")
}

// Validate checks the configuration.
func (c *Config) Validate() error { return nil }

// Options configure an Authenticator.
type Options struct {
	// Rules map client certificate subjects to principal names; nil is
	// DEFAULT (the whole distinguished name).
	Rules tlsx.MappingRules
	// Passwords checks per-call credentials; nil refuses them.
	Passwords PasswordVerifier
	// Require refuses calls without credentials.
	Require bool
	// Logger records refusals; nil discards them.
	Logger *slog.Logger
}

// Authenticator builds the identity of gRPC calls. The zero configuration
// (no TLS, no verifier) makes every caller ANONYMOUS with its host.
type Authenticator struct {
	o Options
}

// New returns an authenticator.
func New(o Options) *Authenticator {
	if o.Rules == nil {
		o.Rules, _ = tlsx.ParseMappingRules("DEFAULT") // DEFAULT always parses
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Authenticator{o: o}
}

// MechanismPassword is the auth.Identity mechanism of a caller
// authenticated by per-call user name and password.
const MechanismPassword = "password"

// authorizationHeader is the gRPC metadata key of per-call credentials:
// "Basic base64(user:password)", as HTTP basic authentication.
const authorizationHeader = "authorization"

// openMethods are served whatever the policy: load balancers and
// orchestrators probe health without credentials.
func openMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// Identify returns the identity of the call in ctx (a gRPC server context),
// or a SASL_AUTHENTICATION_FAILED error saying why the caller is refused.
func (a *Authenticator) Identify(ctx context.Context) (auth.Identity, error) {
	id := auth.Identity{Principal: auth.Anonymous}
	p, _ := peer.FromContext(ctx)
	var tlsInfo *credentials.TLSInfo
	if p != nil {
		id.Host = hostOf(p.Addr)
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			tlsInfo = &ti
		}
	}
	if tlsInfo != nil && len(tlsInfo.State.VerifiedChains) > 0 && len(tlsInfo.State.PeerCertificates) > 0 {
		return a.fromCert(id, tlsInfo.State.PeerCertificates[0])
	}
	if user, password, ok, err := basicCredentials(ctx); err != nil {
		return id, err
	} else if ok {
		if tlsInfo == nil {
			return id, errs.New(errs.SaslAuthenticationFailed,
				"credentials sent over a plaintext connection are refused; connect with TLS (--tls-ca) to send a password")
		}
		if a.o.Passwords == nil {
			return id, errs.New(errs.SaslAuthenticationFailed, "this server does not accept passwords; authenticate with a client certificate")
		}
		if err := a.o.Passwords.Verify(ctx, user, password); err != nil {
			a.o.Logger.InfoContext(ctx, "password authentication failed", slog.String("user", user), slog.String("host", id.Host), slog.Any("error", err))
			if lo := (*LockedOutError)(nil); errors.As(err, &lo) {
				return id, lo.Err()
			}
			return id, errs.New(errs.SaslAuthenticationFailed, "authentication failed for user %q: unknown user or wrong password", user)
		}
		id.Principal, id.Mechanism = auth.User(user), MechanismPassword
		return id, nil
	}
	if a.o.Require {
		return id, errs.New(errs.SaslAuthenticationFailed,
			"this server requires authentication: present a client certificate the cluster's CA signed, or a user and password over TLS")
	}
	return id, nil
}

// FromCertificate returns the identity a verified client certificate
// gives: the principal its subject maps to, the roles its URI SANs name,
// mechanism "mtls". The Kafka listener uses it too.
func (a *Authenticator) FromCertificate(host string, cert *x509.Certificate) (auth.Identity, error) {
	return a.fromCert(auth.Identity{Host: host}, cert)
}

func (a *Authenticator) fromCert(id auth.Identity, cert *x509.Certificate) (auth.Identity, error) {
	name, err := a.o.Rules.MapCert(cert)
	if err != nil {
		a.o.Logger.Info("client certificate refused", slog.String("host", id.Host), slog.Any("error", err))
		return id, errs.New(errs.SaslAuthenticationFailed, "client certificate %q: %v", tlsx.DistinguishedName(cert.Subject), err)
	}
	id.Principal = auth.User(name)
	// A process running several roles has one certificate naming them all.
	id.Role = strings.Join(tlsx.RolesOf(cert), ",")
	if id.Role != "" {
		id.NodeID, _ = tlsx.NodeIDOf(cert)
	}
	id.Mechanism = "mtls"
	return id, nil
}

// Anonymous returns the identity of a caller that presented nothing, or an
// error when authentication is required.
func (a *Authenticator) Anonymous(host string) (auth.Identity, error) {
	id := auth.Identity{Principal: auth.Anonymous, Host: host}
	if a.o.Require {
		return id, errs.New(errs.SaslAuthenticationFailed,
			"this server requires authentication: present a client certificate the cluster's CA signed, or SASL credentials")
	}
	return id, nil
}

// Require reports whether unauthenticated callers are refused.
func (a *Authenticator) Require() bool { return a.o.Require }

func basicCredentials(ctx context.Context) (user, password string, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(authorizationHeader)
	if len(vals) == 0 {
		return "", "", false, nil
	}
	enc, found := strings.CutPrefix(vals[0], "Basic ")
	if !found {
		return "", "", false, errs.New(errs.SaslAuthenticationFailed, "authorization metadata: only \"Basic base64(user:password)\" is accepted")
	}
	raw, derr := base64.StdEncoding.DecodeString(enc)
	if derr != nil {
		return "", "", false, errs.New(errs.SaslAuthenticationFailed, "authorization metadata: the credentials are not valid base64")
	}
	user, password, found = strings.Cut(string(raw), ":")
	if !found || user == "" {
		return "", "", false, errs.New(errs.SaslAuthenticationFailed, "authorization metadata: want base64(user:password) with a non-empty user")
	}
	return user, password, true, nil
}

// HostOf returns the IP address of addr without its port ("" if none).
func HostOf(addr net.Addr) string { return hostOf(addr) }

func hostOf(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}

// UnaryServerInterceptor puts the caller's identity in the context of every
// unary call, or refuses the call.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, err := a.Identify(ctx)
		if err != nil && !openMethod(info.FullMethod) {
			return nil, err
		}
		return handler(auth.NewContext(ctx, id), req)
	}
}

// StreamServerInterceptor does the same for streams.
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, err := a.Identify(ss.Context())
		if err != nil && !openMethod(info.FullMethod) {
			return err
		}
		return handler(srv, &identStream{ServerStream: ss, ctx: auth.NewContext(ss.Context(), id)})
	}
}

type identStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identStream) Context() context.Context { return s.ctx }
