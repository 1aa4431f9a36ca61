package kafka_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	xscram "github.com/xdg-go/scram"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/scram"
)

// saslServer serves a Heartbeat handler that reports the identity it sees,
// with SASL on and the users alice (pw "alice-pw") and bob ("bob-pw").
func saslServer(t *testing.T, lifetime time.Duration) (*kafka.Server, <-chan auth.Identity) {
	t.Helper()
	return saslServerLimited(t, lifetime, nil)
}

// saslServerLimited is saslServer with a failure limiter.
func saslServerLimited(t *testing.T, lifetime time.Duration, lim *authn.Limiter) (*kafka.Server, <-chan auth.Identity) {
	t.Helper()
	cache := metadata.NewCache()
	img := metadata.Empty()
	img.ScramUsers = map[string]*controllerv1.UserScramCredentials{}
	for user, pw := range map[string]string{"alice": "alice-pw", "bob": "bob-pw"} {
		u := &controllerv1.UserScramCredentials{User: user}
		for _, m := range scram.Mechanisms {
			up, err := scram.NewUpsertion(user, m, pw, scram.MinIterations)
			require.NoError(t, err)
			c, err := scram.CredentialFrom(up)
			require.NoError(t, err)
			u.Credentials = append(u.Credentials, c)
		}
		img.ScramUsers[user] = u
	}
	cache.Reset(img)
	store := scram.NewStore(cache)
	seen := make(chan auth.Identity, 16)
	mux := kafka.NewMux()
	mux.Handle(kmsg.Heartbeat.Int16(), 0, 4, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
		id, _ := auth.FromContext(ctx)
		seen <- id
		return kafka.Now(req.Msg.(*kmsg.HeartbeatRequest).ResponseKind()), nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{SASL: &kafka.SASLOptions{
		Mechanisms:  []string{kafka.MechanismPlain, kafka.MechanismScramSHA256, kafka.MechanismScramSHA512},
		Credentials: store, Passwords: scram.NewVerifier(store, 0), SessionLifetime: lifetime, Limiter: lim,
	}})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s, seen
}

func (c *client) handshake(mech string) *kmsg.SASLHandshakeResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Mechanism = mech
	c.send(req, 1)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(1)
	c.recv(resp, false)
	return resp
}

func (c *client) authenticate(b []byte) *kmsg.SASLAuthenticateResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SASLAuthBytes = b
	c.send(req, 2)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(2)
	c.recv(resp, true)
	return resp
}

// plain authenticates with PLAIN and returns the last response.
func (c *client) plain(user, pw string) *kmsg.SASLAuthenticateResponse {
	c.t.Helper()
	require.Zero(c.t, c.handshake(kafka.MechanismPlain).ErrorCode)
	return c.authenticate([]byte("\x00" + user + "\x00" + pw))
}

// scram runs a SCRAM conversation; it returns the last response.
func (c *client) scram(mech, user, pw string) *kmsg.SASLAuthenticateResponse {
	c.t.Helper()
	require.Zero(c.t, c.handshake(mech).ErrorCode)
	gen := map[string]xscram.HashGeneratorFcn{kafka.MechanismScramSHA256: xscram.SHA256, kafka.MechanismScramSHA512: xscram.SHA512}[mech]
	cl, err := gen.NewClient(user, pw, "")
	require.NoError(c.t, err)
	conv := cl.NewConversation()
	msg, err := conv.Step("")
	require.NoError(c.t, err)
	resp := c.authenticate([]byte(msg))
	require.Zero(c.t, resp.ErrorCode)
	msg, err = conv.Step(string(resp.SASLAuthBytes))
	require.NoError(c.t, err)
	resp = c.authenticate([]byte(msg))
	if resp.ErrorCode == 0 {
		_, err = conv.Step(string(resp.SASLAuthBytes)) // the server's signature
		require.NoError(c.t, err, "server signature")
	}
	return resp
}

func (c *client) heartbeat(t *testing.T, seen <-chan auth.Identity) auth.Identity {
	t.Helper()
	c.send(heartbeat("g"), 4)
	recvHeartbeat(t, c, 4)
	return <-seen
}

func TestSASLUnauthenticatedRequestCloses(t *testing.T) {
	s, _ := saslServer(t, 0)
	c := dial(t, s)
	// ApiVersions lists the SASL APIs and is answered before
	// authentication.
	c.send(kmsg.NewPtrApiVersionsRequest(), 0)
	av := kmsg.NewPtrApiVersionsResponse()
	c.recv(av, false)
	keys := map[int16]bool{}
	for _, k := range av.ApiKeys {
		keys[k.ApiKey] = true
	}
	require.True(t, keys[17] && keys[36], "SaslHandshake and SaslAuthenticate advertised")
	c.send(heartbeat("g"), 4)
	c.requireClosed()
}

func TestSASLPlain(t *testing.T) {
	s, seen := saslServer(t, 0)
	c := dial(t, s)
	resp := c.plain("alice", "alice-pw")
	require.Zero(t, resp.ErrorCode)
	id := c.heartbeat(t, seen)
	require.Equal(t, "User:alice", id.Principal.String())
	require.Equal(t, "plain", id.Mechanism)
	require.Equal(t, "127.0.0.1", id.Host)

	c = dial(t, s)
	resp = c.plain("alice", "bob-pw")
	require.Equal(t, int16(58), resp.ErrorCode, "SASL_AUTHENTICATION_FAILED")
	require.NotNil(t, resp.ErrorMessage)
	c.requireClosed()

	c = dial(t, s)
	resp = c.plain("nobody", "x")
	require.Equal(t, int16(58), resp.ErrorCode)
	c.requireClosed()
}

func TestSASLScram(t *testing.T) {
	s, seen := saslServer(t, 0)
	for _, mech := range []string{kafka.MechanismScramSHA256, kafka.MechanismScramSHA512} {
		c := dial(t, s)
		require.Zero(t, c.scram(mech, "bob", "bob-pw").ErrorCode, mech)
		id := c.heartbeat(t, seen)
		require.Equal(t, "User:bob", id.Principal.String())
		require.Equal(t, map[string]string{kafka.MechanismScramSHA256: "scram-sha-256", kafka.MechanismScramSHA512: "scram-sha-512"}[mech], id.Mechanism)

		c = dial(t, s)
		require.Equal(t, int16(58), c.scram(mech, "bob", "alice-pw").ErrorCode, mech)
		c.requireClosed()
	}
}

// After too many failures a user (PLAIN or SCRAM, counted together) is
// refused without its password being checked, with a message saying why
// and for how long, until the lockout ends.
func TestSASLFailureLimit(t *testing.T) {
	var now atomic.Int64 // seconds; the listener reads it on its own goroutines
	now.Store(1000)
	lim := authn.NewLimiter(authn.LimitConfig{MaxPerUser: 2, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return time.Unix(now.Load(), 0) })
	s, seen := saslServerLimited(t, 0, lim)
	c := dial(t, s)
	require.Equal(t, int16(58), c.plain("alice", "wrong").ErrorCode)
	c = dial(t, s)
	require.Equal(t, int16(58), c.scram(kafka.MechanismScramSHA256, "alice", "wrong").ErrorCode)

	// The right password is refused now, over PLAIN and at SCRAM's first
	// message.
	c = dial(t, s)
	resp := c.plain("alice", "alice-pw")
	require.Equal(t, int16(58), resp.ErrorCode)
	require.Contains(t, *resp.ErrorMessage, `too many failed authentications for user "alice"; retry in 1m0s`)
	c.requireClosed()
	c = dial(t, s)
	require.Zero(t, c.handshake(kafka.MechanismScramSHA512).ErrorCode)
	cl, err := xscram.SHA512.NewClient("alice", "alice-pw", "")
	require.NoError(t, err)
	first, err := cl.NewConversation().Step("")
	require.NoError(t, err)
	resp = c.authenticate([]byte(first))
	require.Equal(t, int16(58), resp.ErrorCode)
	require.Contains(t, *resp.ErrorMessage, "too many failed authentications")
	c.requireClosed()

	// Others are not affected; alice is once the lockout ended.
	c = dial(t, s)
	require.Zero(t, c.plain("bob", "bob-pw").ErrorCode)
	require.Equal(t, "User:bob", c.heartbeat(t, seen).Principal.String())
	now.Add(60)
	c = dial(t, s)
	require.Zero(t, c.scram(kafka.MechanismScramSHA512, "alice", "alice-pw").ErrorCode)
	require.Equal(t, "User:alice", c.heartbeat(t, seen).Principal.String())
}

func TestSASLHandshakeErrors(t *testing.T) {
	s, _ := saslServer(t, 0)
	c := dial(t, s)
	resp := c.handshake("GSSAPI")
	require.Equal(t, int16(33), resp.ErrorCode, "UNSUPPORTED_SASL_MECHANISM")
	require.ElementsMatch(t, []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, resp.SupportedMechanisms)
	c.requireClosed()

	c = dial(t, s)
	a := c.authenticate([]byte("\x00alice\x00alice-pw"))
	require.Equal(t, int16(34), a.ErrorCode, "ILLEGAL_SASL_STATE: no handshake first")
	c.requireClosed()
}

// KIP-368: the session lifetime is announced; reauthentication before it
// ends keeps the connection; a request after it ended closes it;
// reauthenticating as another user closes it.
func TestSASLReauthentication(t *testing.T) {
	const lifetime = 400 * time.Millisecond
	s, seen := saslServer(t, lifetime)
	c := dial(t, s)
	resp := c.scram(kafka.MechanismScramSHA256, "alice", "alice-pw")
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, lifetime.Milliseconds(), resp.SessionLifetimeMillis)
	c.heartbeat(t, seen)
	time.Sleep(lifetime / 2)
	require.Zero(t, c.scram(kafka.MechanismScramSHA256, "alice", "alice-pw").ErrorCode)
	time.Sleep(lifetime / 2) // past the first session's end, inside the second's
	require.Equal(t, "User:alice", c.heartbeat(t, seen).Principal.String())

	deadline := time.Now().Add(lifetime + 50*time.Millisecond)
	time.Sleep(time.Until(deadline))
	c.send(heartbeat("g"), 4)
	c.requireClosed()

	c = dial(t, s)
	require.Zero(t, c.plain("alice", "alice-pw").ErrorCode)
	require.Zero(t, c.handshake(kafka.MechanismPlain).ErrorCode)
	require.Equal(t, int16(58), c.authenticate([]byte("\x00bob\x00bob-pw")).ErrorCode)
	c.requireClosed()
}

// After a v0 handshake the tokens travel as bare frames (Kafka before 1.0).
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	s, seen := saslServer(t, 0)
	c := dial(t, s)
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Mechanism = kafka.MechanismPlain
	c.send(req, 0)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	c.recv(resp, false)
	require.Zero(t, resp.ErrorCode)
	tok := []byte("\x00alice\x00alice-pw")
	c.writeRaw(append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...))
	frame, err := c.readFrame(5 * time.Second)
	require.NoError(t, err)
	require.Empty(t, frame, "PLAIN answers with an empty token")
	require.Equal(t, "User:alice", c.heartbeat(t, seen).Principal.String())

	c = dial(t, s)
	c.send(req, 0)
	c.recv(resp, false)
	tok = []byte("\x00alice\x00wrong")
	c.writeRaw(append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...))
	c.requireClosed()
}
