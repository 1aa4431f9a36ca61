package authn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func lockedOut(t *testing.T, err error) *LockedOutError {
	t.Helper()
	var lo *LockedOutError
	require.True(t, errors.As(err, &lo), "want a lockout, got %v", err)
	return lo
}

func TestLimiterPerUser(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := NewLimiter(LimitConfig{MaxPerUser: 3, MaxPerHost: 100, Window: time.Minute, Lockout: 30 * time.Second}, c.now)
	for i := range 2 {
		require.NoError(t, l.Check("alice", "10.0.0.1"), i)
		l.Failed("alice", "10.0.0.1")
	}
	require.NoError(t, l.Check("alice", "10.0.0.2"))
	l.Failed("alice", "10.0.0.2") // the third failure, from another address
	lo := lockedOut(t, l.Check("alice", "10.0.0.3"))
	require.Equal(t, 30*time.Second, lo.RetryAfter)
	require.Contains(t, lo.Err().Error(), `too many failed authentications for user "alice"; retry in 30s`)
	require.Equal(t, errs.SaslAuthenticationFailed, errs.CodeOf(lo.Err()))
	require.NoError(t, l.Check("bob", "10.0.0.1"), "other users are not affected")

	c.advance(29 * time.Second)
	lockedOut(t, l.Check("alice", "10.0.0.1"))
	l.Succeeded("alice") // a success cannot happen while locked out, nor lift it
	lockedOut(t, l.Check("alice", "10.0.0.1"))
	c.advance(time.Second)
	require.NoError(t, l.Check("alice", "10.0.0.1"))

	// Failures spread wider than the window never lock out.
	for range 10 {
		l.Failed("carol", "10.0.0.1")
		l.Failed("carol", "10.0.0.1")
		c.advance(time.Minute)
		require.NoError(t, l.Check("carol", "10.0.0.1"))
	}
	// A success clears the user's count.
	l.Failed("dave", "10.0.0.1")
	l.Failed("dave", "10.0.0.1")
	l.Succeeded("dave")
	l.Failed("dave", "10.0.0.1")
	require.NoError(t, l.Check("dave", "10.0.0.1"))
}

func TestLimiterPerHost(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := NewLimiter(LimitConfig{MaxPerUser: 100, MaxPerHost: 4, Window: time.Minute, Lockout: time.Minute}, c.now)
	// One address guessing a different user each time.
	for _, u := range []string{"a", "b", "c"} {
		l.Failed(u, "10.0.0.9")
		l.Succeeded(u) // a success elsewhere never clears the address's count
	}
	require.NoError(t, l.Check("z", "10.0.0.9"))
	l.Failed("d", "10.0.0.9")
	lo := lockedOut(t, l.Check("alice", "10.0.0.9"))
	require.Equal(t, "address 10.0.0.9", lo.What)
	require.NoError(t, l.Check("alice", "10.0.0.8"))
	c.advance(time.Minute)
	require.NoError(t, l.Check("alice", "10.0.0.9"))

	require.Nil(t, NewLimiter(LimitConfig{}, nil), "no limit set")
	var none *Limiter
	none.Failed("x", "y")
	require.NoError(t, none.Check("x", "y"))
}

// A locked-out user's password is not even checked, and the caller of a
// gRPC Basic credential learns why it is refused and when to retry.
func TestLimitPasswords(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := NewLimiter(LimitConfig{MaxPerUser: 2, MaxPerHost: 0, Window: time.Minute, Lockout: time.Minute}, c.now)
	calls := 0
	v := LimitPasswords(PasswordVerifierFunc(func(_ context.Context, user, pw string) error {
		calls++
		if pw != "right" {
			return errs.New(errs.SaslAuthenticationFailed, "wrong")
		}
		return nil
	}), l)
	a := New(Options{Passwords: v})
	for range 2 {
		_, err := a.Identify(callCtx(nil, true, basic("alice", "guess")))
		require.Contains(t, err.Error(), "unknown user or wrong password")
	}
	_, err := a.Identify(callCtx(nil, true, basic("alice", "right")))
	requireCode(t, err, errs.SaslAuthenticationFailed)
	require.Contains(t, err.Error(), `too many failed authentications for user "alice"; retry in 1m0s (the password was not checked)`)
	require.Equal(t, 2, calls)

	c.advance(time.Minute)
	id, err := a.Identify(callCtx(nil, true, basic("alice", "right")))
	require.NoError(t, err)
	require.Equal(t, "User:alice", id.Principal.String())
	require.Equal(t, 3, calls)

	// The address comes from HostContext outside gRPC.
	l2 := NewLimiter(LimitConfig{MaxPerHost: 1, Window: time.Minute, Lockout: time.Minute}, c.now)
	v2 := LimitPasswords(PasswordVerifierFunc(func(context.Context, string, string) error { return errors.New("no") }), l2)
	ctx := HostContext(context.Background(), "10.9.9.9")
	require.Error(t, v2.Verify(ctx, "x", "y"))
	require.Equal(t, "address 10.9.9.9", lockedOut(t, v2.Verify(ctx, "z", "y")).What)
}
