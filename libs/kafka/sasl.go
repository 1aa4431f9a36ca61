package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/scram"
)

// SASL mechanism names as clients send them.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

const (
	saslHandshakeKey    int16 = 17
	saslAuthenticateKey int16 = 36
	// After SaslHandshake v0 the client sends the mechanism's tokens as
	// bare size-prefixed frames, without request headers (Kafka before
	// 1.0); after v1 it wraps them in SaslAuthenticate. librdkafka
	// requires v0 in the advertised range even though it sends v1.
	saslHandshakeMin, saslHandshakeMax       = 0, 1
	saslAuthenticateMin, saslAuthenticateMax = 0, 2
)

// SASLOptions turn on SASL authentication on the Kafka listener.
type SASLOptions struct {
	// Mechanisms are the mechanisms offered (PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512); empty means no SASL: every connection is what its
	// TLS certificate made it, or ANONYMOUS.
	Mechanisms []string
	// Credentials holds the SCRAM credentials (required for the SCRAM
	// mechanisms).
	Credentials *scram.Store
	// Passwords checks PLAIN user names and passwords (required for PLAIN).
	Passwords authn.PasswordVerifier
	// SessionLifetime bounds an authentication (KIP-368, Kafka's
	// connections.max.reauth.ms): clients are told the lifetime and must
	// authenticate again on the same connection before it ends; a request
	// other than ApiVersions, SaslHandshake and SaslAuthenticate after it
	// ended closes the connection. Zero: sessions never expire.
	SessionLifetime time.Duration
	// Limiter refuses user names and addresses with too many failed
	// authentications (PLAIN and SCRAM); nil: no limit.
	Limiter *authn.Limiter
}

// ValidateMechanisms checks a mechanism list (the --kafka.sasl.mechanisms
// flag) and returns it upper-cased.
func ValidateMechanisms(ms []string) ([]string, error) {
	var out []string
	for _, m := range ms {
		m = strings.ToUpper(strings.TrimSpace(m))
		switch m {
		case "":
			continue
		case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
			out = append(out, m)
		default:
			return nil, fmt.Errorf("SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
		}
	}
	return out, nil
}

// saslServer is the listener's SASL configuration.
type saslServer struct {
	opts SASLOptions
	now  func() time.Time
}

// registerSASL registers SaslHandshake and SaslAuthenticate when SASL is
// on.
func (s *Server) registerSASL(opts *SASLOptions) {
	if opts == nil || len(opts.Mechanisms) == 0 {
		return
	}
	s.sasl = &saslServer{opts: *opts, now: time.Now}
	s.mux.Handle(saslHandshakeKey, saslHandshakeMin, saslHandshakeMax, s.saslHandshake)
	s.mux.Handle(saslAuthenticateKey, saslAuthenticateMin, saslAuthenticateMax, s.saslAuthenticate)
}

// saslState is a connection's authentication; only the reader goroutine
// touches it.
type saslState struct {
	// mechanism is the one the last handshake chose; "" before a
	// handshake and after an authentication completes.
	mechanism string
	scram     *scram.Conversation
	// authenticated is set once an authentication succeeded; id is its
	// identity and expires the end of its session (zero: none).
	authenticated bool
	id            auth.Identity
	expires       time.Time
	// cred is the user's credentials when it authenticated
	// (scram.Store.Credential) and credRev the users revision they were
	// last compared at: a deleted user or a changed password ends the
	// session at the connection's next request.
	cred    any
	credRev int64
	// raw is set after a v0 handshake until the authentication ends: the
	// next frames are bare tokens.
	raw bool
}

// saslPermits reports whether a request of key may be served on the
// connection: with SASL on, only ApiVersions, SaslHandshake and
// SaslAuthenticate before authentication and after the session expired. A
// connection a client certificate authenticated needs no SASL.
func (c *conn) saslPermits(key int16) (bool, string) {
	s := c.s.sasl
	if s == nil || key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey {
		return true, ""
	}
	if id, ok := auth.FromContext(c.idCtx); ok && id.Mechanism == "mtls" {
		return true, ""
	}
	st := &c.sasl
	switch {
	case !st.authenticated:
		return false, "request before SASL authentication"
	case !st.expires.IsZero() && !s.now().Before(st.expires):
		return false, "SASL session expired without reauthentication (KIP-368)"
	case s.credentialsChanged(st):
		return false, "SASL user deleted or its password changed since the connection authenticated"
	}
	return true, ""
}

// credentialsChanged reports whether the user of an authenticated session
// was deleted or its credentials changed. It costs one load per request
// while the users stay the same.
func (s *saslServer) credentialsChanged(st *saslState) bool {
	users := s.opts.Credentials
	if users == nil || st.cred == nil {
		return false
	}
	rev := users.UsersRevision()
	if rev == st.credRev {
		return false
	}
	st.credRev = rev
	return users.Credential(st.id.Principal.Name) != st.cred
}

func (s *Server) saslHandshake(_ context.Context, req *Request) (Reply, error) {
	r := req.Msg.(*kmsg.SASLHandshakeRequest)
	c := req.Conn.c
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = s.sasl.opts.Mechanisms
	mech := strings.ToUpper(r.Mechanism)
	switch {
	case c.sasl.mechanism != "":
		resp.ErrorCode = ErrorCode(errs.New(errs.IllegalSaslState, "SaslHandshake again before the authentication it started ended"))
		c.stopReading()
	case !contains(s.sasl.opts.Mechanisms, mech):
		resp.ErrorCode = ErrorCode(errs.New(errs.UnsupportedSaslMechanism, "SASL mechanism %q is not enabled", r.Mechanism))
		c.logger.Info("Kafka client asked for a SASL mechanism not enabled, closing the connection",
			slog.String("mechanism", r.Mechanism), slog.Any("enabled", s.sasl.opts.Mechanisms))
		c.stopReading()
	case c.sasl.authenticated && mech != c.sasl.id.Mechanism && !strings.EqualFold(mech, c.sasl.id.Mechanism):
		// KIP-368: reauthentication keeps the mechanism.
		resp.ErrorCode = ErrorCode(errs.New(errs.IllegalSaslState, "reauthentication must use %s, the mechanism of the first authentication", strings.ToUpper(c.sasl.id.Mechanism)))
		c.stopReading()
	default:
		c.sasl.mechanism = mech
		c.sasl.raw = req.Version == 0
	}
	return Now(resp), nil
}

// rawToken handles a bare SASL token frame after a v0 handshake: it is
// authenticated like a SaslAuthenticate request and answered with a bare
// token frame. A failure closes the connection at once (the v0 protocol
// has no way to carry an error). It reports false when the connection must
// close.
func (c *conn) rawToken(frame []byte) bool {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SASLAuthBytes = frame
	reply, _ := c.s.saslAuthenticate(c.ctx, &Request{Key: saslAuthenticateKey, Msg: req, Conn: c.info}) // never fails
	resp := reply.Msg.(*kmsg.SASLAuthenticateResponse)
	if resp.ErrorCode != 0 {
		return false
	}
	if c.sasl.mechanism == "" {
		c.sasl.raw = false // authenticated: Kafka requests follow
	}
	buf := getFrameBuf()
	*buf = binary.BigEndian.AppendUint32((*buf)[:0], uint32(len(resp.SASLAuthBytes)))
	*buf = append(*buf, resp.SASLAuthBytes...)
	sl := &slot{done: closedChan, frame: *buf, size: len(*buf), buf: buf}
	if !c.enqueue(sl) {
		sl.free(c.logger)
		return false
	}
	return true
}

func (s *Server) saslAuthenticate(ctx context.Context, req *Request) (Reply, error) {
	r := req.Msg.(*kmsg.SASLAuthenticateRequest)
	c := req.Conn.c
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	fail := func(err *errs.Error, logMsg string, attrs ...any) (Reply, error) {
		resp.ErrorCode = ErrorCode(err)
		msg := err.Message
		resp.ErrorMessage = &msg
		c.logger.Info(logMsg, append(attrs, slog.String("mechanism", c.sasl.mechanism))...)
		c.sasl.mechanism, c.sasl.scram = "", nil
		// Kafka closes a connection whose authentication failed once the
		// answer is written; so do we.
		c.stopReading()
		return Now(resp), nil
	}
	authFailed := errs.New(errs.SaslAuthenticationFailed, "authentication failed: invalid user name or password (mechanism %s)", c.sasl.mechanism)
	host := authn.HostOf(c.info.Remote)
	lim := s.sasl.opts.Limiter
	// lockedOut is the refusal of a user or address over the failure
	// limit, answered before its password is checked; nil if none.
	lockedOut := func(user string) *errs.Error {
		var lo *authn.LockedOutError
		if err := lim.Check(user, host); errors.As(err, &lo) {
			return lo.Err()
		}
		return nil
	}
	const lockedMsg = "Kafka SASL authentication refused after too many failures, closing the connection"
	var user string
	switch c.sasl.mechanism {
	case "":
		return fail(errs.New(errs.IllegalSaslState, "SaslAuthenticate without a SaslHandshake before it"), "Kafka SaslAuthenticate without a handshake, closing the connection")
	case MechanismPlain:
		u, pw, err := parsePlain(r.SASLAuthBytes)
		if err != nil {
			return fail(errs.New(errs.SaslAuthenticationFailed, "malformed PLAIN message: %v", err), "Kafka SASL/PLAIN message malformed, closing the connection")
		}
		if s.sasl.opts.Passwords == nil {
			return fail(authFailed, "Kafka SASL/PLAIN with no password verifier, closing the connection")
		}
		if e := lockedOut(u); e != nil {
			return fail(e, lockedMsg, slog.String("user", u))
		}
		if err := s.sasl.opts.Passwords.Verify(ctx, u, pw); err != nil {
			lim.Failed(u, host)
			return fail(authFailed, "Kafka SASL authentication failed, closing the connection", slog.String("user", u))
		}
		user = u
	default:
		if c.sasl.scram == nil {
			m, _ := scram.Parse(c.sasl.mechanism)
			conv, err := s.sasl.opts.Credentials.NewConversation(m)
			if err != nil {
				return fail(authFailed, "Kafka SCRAM conversation could not start, closing the connection")
			}
			c.sasl.scram = conv
		}
		first := !c.sasl.scram.Started()
		out, err := c.sasl.scram.Step(string(r.SASLAuthBytes))
		if err != nil {
			if !first {
				lim.Failed(c.sasl.scram.Username(), host)
			}
			return fail(authFailed, "Kafka SASL authentication failed, closing the connection", slog.String("user", c.sasl.scram.Username()), log.Err(err))
		}
		if first {
			if e := lockedOut(c.sasl.scram.Username()); e != nil {
				return fail(e, lockedMsg, slog.String("user", c.sasl.scram.Username()))
			}
		}
		resp.SASLAuthBytes = []byte(out)
		if !c.sasl.scram.Done() {
			return Now(resp), nil // server-first-message; the client proves next
		}
		if !c.sasl.scram.Valid() {
			lim.Failed(c.sasl.scram.Username(), host)
			return fail(authFailed, "Kafka SASL authentication failed, closing the connection", slog.String("user", c.sasl.scram.Username()))
		}
		if a := c.sasl.scram.AuthzID(); a != "" && a != c.sasl.scram.Username() {
			return fail(errs.New(errs.SaslAuthenticationFailed, "authorization id %q differs from the user name", a), "Kafka SCRAM authorization id refused, closing the connection")
		}
		user = c.sasl.scram.Username()
	}
	id := auth.Identity{Principal: auth.User(user), Host: authn.HostOf(c.info.Remote), Mechanism: strings.ToLower(c.sasl.mechanism)}
	if c.sasl.authenticated && id.Principal != c.sasl.id.Principal {
		return fail(errs.New(errs.SaslAuthenticationFailed, "reauthentication as %s on a connection of %s", id.Principal, c.sasl.id.Principal),
			"Kafka reauthentication changed the principal, closing the connection", slog.String("principal", c.sasl.id.Principal.String()), slog.String("new_principal", id.Principal.String()))
	}
	lim.Succeeded(user)
	reauth := c.sasl.authenticated
	c.sasl.mechanism, c.sasl.scram = "", nil
	c.sasl.authenticated, c.sasl.id = true, id
	if users := s.sasl.opts.Credentials; users != nil {
		// Read after the proof: credentials changed since are caught at the
		// next request.
		c.sasl.credRev = users.UsersRevision()
		c.sasl.cred = users.Credential(user)
	}
	c.sasl.expires = time.Time{}
	if lt := s.sasl.opts.SessionLifetime; lt > 0 {
		c.sasl.expires = s.sasl.now().Add(lt)
		resp.SessionLifetimeMillis = lt.Milliseconds()
	}
	c.info.Principal = id.Principal.String()
	c.idCtx = auth.NewContext(c.ctx, id)
	c.logger.Debug("Kafka client authenticated", slog.String("principal", id.Principal.String()),
		slog.String("mechanism", id.Mechanism), slog.Bool("reauthentication", reauth))
	return Now(resp), nil
}

// parsePlain splits a PLAIN message (RFC 4616):
// [authzid] NUL authcid NUL passwd. An authorization id, when given, must
// be the user itself.
func parsePlain(b []byte) (user, password string, err error) {
	parts := bytes.Split(b, []byte{0})
	if len(parts) != 3 {
		return "", "", fmt.Errorf("want authzid NUL user NUL password, got %d fields", len(parts))
	}
	authz, u, pw := string(parts[0]), string(parts[1]), string(parts[2])
	if u == "" || pw == "" {
		return "", "", fmt.Errorf("empty user name or password")
	}
	if authz != "" && authz != u {
		return "", "", fmt.Errorf("authorization id %q differs from the user name", authz)
	}
	return u, pw, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
