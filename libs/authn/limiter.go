package authn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// LimitConfig bounds failed password authentications (--auth.* flags):
// after MaxPerUser failures for one user name, or MaxPerHost failures
// from one address, within Window, further attempts for that user or from
// that address are refused without checking the password until Lockout
// has passed. It applies to gRPC per-call passwords and to Kafka
// SASL/PLAIN and SCRAM alike, counted together.
//
// Kafka has no such limit: it only delays the answer to a failed
// authentication (connection.failed.authentication.delay.ms, KIP-306) and
// caps the rate of new connections per address (KIP-612), so a client
// that opens connection after connection can keep guessing.
type LimitConfig struct {
	MaxPerUser int
	MaxPerHost int
	Window     time.Duration
	Lockout    time.Duration
}

// DefaultLimitConfig returns the flags' defaults.
func DefaultLimitConfig() LimitConfig {
	return LimitConfig{MaxPerUser: 10, MaxPerHost: 50, Window: time.Minute, Lockout: time.Minute}
}

// RegisterFlags registers the --auth.*failures* flags.
func (c *LimitConfig) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultLimitConfig()
	fs.IntVar(&c.MaxPerUser, "auth.max-failures-per-user", d.MaxPerUser,
		"Failed password authentications (gRPC, Kafka SASL) for one user name within --auth.failure-window after which that user is refused for --auth.lockout; 0 = no limit.")
	fs.IntVar(&c.MaxPerHost, "auth.max-failures-per-host", d.MaxPerHost,
		"Failed password authentications from one IP address within --auth.failure-window after which that address is refused for --auth.lockout; 0 = no limit.")
	fs.DurationVar(&c.Window, "auth.failure-window", d.Window,
		"Window in which failed authentications are counted.")
	fs.DurationVar(&c.Lockout, "auth.lockout", d.Lockout,
		"How long a user name or address that reached its failure limit is refused.")
}

// Validate checks the configuration.
func (c *LimitConfig) Validate() error {
	var es []error
	if c.MaxPerUser < 0 || c.MaxPerHost < 0 {
		es = append(es, errors.New("auth.max-failures-per-user, auth.max-failures-per-host: must be 0 (no limit) or more"))
	}
	if (c.MaxPerUser > 0 || c.MaxPerHost > 0) && (c.Window <= 0 || c.Lockout <= 0) {
		es = append(es, fmt.Errorf("auth.failure-window (%v), auth.lockout (%v): must be positive while a failure limit is set", c.Window, c.Lockout))
	}
	return errors.Join(es...)
}

// maxTracked bounds the user names and addresses a Limiter remembers;
// when full, entries whose window and lockout ended are dropped first,
// then arbitrary ones.
const maxTracked = 100_000

// Limiter counts failed authentications per user name and per address
// and refuses those over their limit (LimitConfig). Safe for concurrent
// use; while nothing failed recently, Check and Succeeded cost one atomic
// load. A nil *Limiter allows everything.
//
// Locking out a user name lets anyone who can reach the port keep that
// user out by failing on purpose; the lockout is short and the per-host
// limit locks such a client out as well. Successes are not counted
// against anyone, and a success clears the user's count (not the
// address's: a client with one valid account must not clear its
// address's count by logging in between guesses).
type Limiter struct {
	cfg     LimitConfig
	now     func() time.Time
	tracked atomic.Int64

	mu sync.Mutex
	m  map[limitKey]*failures
}

type limitKey struct {
	host bool
	name string
}

type failures struct {
	start time.Time // of the current window
	n     int
	until time.Time // refused until then
}

// NewLimiter returns a limiter with cfg; now is its clock (nil:
// time.Now). It returns nil when cfg sets no limit.
func NewLimiter(cfg LimitConfig, now func() time.Time) *Limiter {
	if cfg.MaxPerUser <= 0 && cfg.MaxPerHost <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{cfg: cfg, now: now, m: map[limitKey]*failures{}}
}

// LockedOutError is the refusal of an attempt over the limit.
type LockedOutError struct {
	What       string // "user \"alice\"" or "address 10.0.0.9"
	RetryAfter time.Duration
}

func (e *LockedOutError) Error() string {
	return fmt.Sprintf("too many failed authentications for %s; retry in %v", e.What, e.RetryAfter.Round(time.Second))
}

// Err returns the refusal as a SASL_AUTHENTICATION_FAILED error.
func (e *LockedOutError) Err() *errs.Error {
	return errs.New(errs.SaslAuthenticationFailed, "%s (the password was not checked)", e.Error())
}

// Check returns a *LockedOutError when user or host is locked out, else
// nil.
func (l *Limiter) Check(user, host string) error {
	if l == nil || l.tracked.Load() == 0 {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.current(now, limitKey{true, host}); f != nil && now.Before(f.until) {
		return &LockedOutError{What: "address " + host, RetryAfter: f.until.Sub(now)}
	}
	if f := l.current(now, limitKey{false, user}); f != nil && now.Before(f.until) {
		return &LockedOutError{What: fmt.Sprintf("user %q", user), RetryAfter: f.until.Sub(now)}
	}
	return nil
}

// current returns k's entry, forgetting it when its window and lockout
// ended (so a quiet limiter goes back to costing one atomic load). Called
// with mu held.
func (l *Limiter) current(now time.Time, k limitKey) *failures {
	f := l.m[k]
	if f != nil && !now.Before(f.start.Add(l.cfg.Window)) && !now.Before(f.until) {
		delete(l.m, k)
		l.tracked.Store(int64(len(l.m)))
		return nil
	}
	return f
}

// Failed counts one failed authentication of user from host.
func (l *Limiter) Failed(user, host string) {
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if user != "" && l.cfg.MaxPerUser > 0 {
		l.fail(now, limitKey{false, user}, l.cfg.MaxPerUser)
	}
	if host != "" && l.cfg.MaxPerHost > 0 {
		l.fail(now, limitKey{true, host}, l.cfg.MaxPerHost)
	}
}

func (l *Limiter) fail(now time.Time, k limitKey, max int) {
	f := l.m[k]
	if f == nil {
		if len(l.m) >= maxTracked {
			l.sweep(now)
		}
		f = &failures{start: now}
		l.m[k] = f
		l.tracked.Store(int64(len(l.m)))
	}
	if !now.Before(f.start.Add(l.cfg.Window)) {
		f.start, f.n = now, 0
	}
	f.n++
	if f.n >= max {
		f.until = now.Add(l.cfg.Lockout)
		f.start, f.n = now, 0
	}
}

// sweep drops entries whose window and lockout ended, then, if still
// full, arbitrary ones down to half the bound. Called with mu held.
func (l *Limiter) sweep(now time.Time) {
	for k, f := range l.m {
		if !now.Before(f.start.Add(l.cfg.Window)) && !now.Before(f.until) {
			delete(l.m, k)
		}
	}
	for k := range l.m {
		if len(l.m) < maxTracked/2 {
			break
		}
		delete(l.m, k)
	}
}

// Succeeded clears user's failure count after a successful
// authentication (a lockout in force stays).
func (l *Limiter) Succeeded(user string) {
	if l == nil || l.tracked.Load() == 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{false, user}
	if f := l.m[k]; f != nil && !now.Before(f.until) {
		delete(l.m, k)
		l.tracked.Store(int64(len(l.m)))
	}
}

// LimitPasswords returns v behind l: a password for a user or from an
// address that is locked out is refused with a *LockedOutError without
// being checked, and every refusal is counted. The address is the gRPC
// peer of ctx, or the one HostContext put there.
func LimitPasswords(v PasswordVerifier, l *Limiter) PasswordVerifier {
	if l == nil {
		return v
	}
	return PasswordVerifierFunc(func(ctx context.Context, user, password string) error {
		host := hostFromContext(ctx)
		if err := l.Check(user, host); err != nil {
			return err
		}
		if err := v.Verify(ctx, user, password); err != nil {
			l.Failed(user, host)
			return err
		}
		l.Succeeded(user)
		return nil
	})
}

type hostKey struct{}

// HostContext returns ctx carrying the caller's address, for a
// PasswordVerifier called outside a gRPC call.
func HostContext(ctx context.Context, host string) context.Context {
	return context.WithValue(ctx, hostKey{}, host)
}

func hostFromContext(ctx context.Context) string {
	if h, ok := ctx.Value(hostKey{}).(string); ok {
		return h
	}
	if p, ok := peer.FromContext(ctx); ok {
		return hostOf(p.Addr)
	}
	return ""
}
