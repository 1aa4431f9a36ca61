package scram

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// DefaultCacheTTL is how long a verified password is remembered.
const DefaultCacheTTL = time.Minute

// maxCached bounds the remembered successes; when full the oldest half is
// forgotten.
const maxCached = 10000

// Verifier checks a user name and password against the user's SCRAM
// credentials: it derives the salted password with the credential's salt and
// iteration count and compares the resulting StoredKey in constant time. It
// serves SASL/PLAIN on the Kafka listener and per-call credentials on gRPC
// (it implements the PasswordVerifier the gRPC authentication interceptor
// calls).
//
// PBKDF2 with thousands of iterations costs milliseconds; gRPC clients send
// the password with every call. So a success is remembered for the TTL,
// keyed by an HMAC of user and password under a per-process random key, and
// bound to the credential it was checked against: a changed or deleted
// credential is checked afresh at once. Failures are never remembered.
type Verifier struct {
	store *Store
	ttl   time.Duration
	now   func() time.Time
	key   []byte

	mu     sync.Mutex
	cached map[[32]byte]cacheEntry

	// derive is SaltedPassword; tests count its calls.
	derive func(m Mechanism, password string, salt []byte, iterations int) ([]byte, error)
}

type cacheEntry struct {
	cred    *controllerv1.ScramCredential
	expires time.Time
}

// NewVerifier returns a verifier over store that remembers successes for
// ttl (0: DefaultCacheTTL; negative: never).
func NewVerifier(store *Store, ttl time.Duration) *Verifier {
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails
	return &Verifier{store: store, ttl: ttl, now: time.Now, key: k, cached: map[[32]byte]cacheEntry{}, derive: SaltedPassword}
}

// Verify returns nil when password is user's, else a
// SASL_AUTHENTICATION_FAILED error that does not say whether the user
// exists. An unknown user costs what a wrong password costs: the password
// is checked against a stand-in credential derived from a per-process
// secret and the name, with the same PBKDF2 and comparison, so the time a
// refusal takes does not reveal which users exist.
func (v *Verifier) Verify(_ context.Context, user, password string) error {
	fail := errs.New(errs.SaslAuthenticationFailed, "authentication failed: invalid user name or password for user %q", user)
	if password == "" {
		return fail // refused for every user alike
	}
	creds := v.store.credentials(user)
	known := len(creds) > 0
	id := v.cacheKey(user, password)
	now := v.now()
	var c *controllerv1.ScramCredential
	if known {
		v.mu.Lock()
		e, ok := v.cached[id]
		v.mu.Unlock()
		if ok && now.Before(e.expires) {
			for _, c := range creds {
				if c == e.cred {
					return nil
				}
			}
		}
		// The strongest mechanism the user has: SHA-512 before SHA-256.
		c = creds[0]
		for _, x := range creds {
			if x.GetMechanism() > c.GetMechanism() {
				c = x
			}
		}
	} else {
		c = v.store.fakeCredential(user, SHA512)
	}
	salted, err := v.derive(c.GetMechanism(), password, c.GetSalt(), int(c.GetIterations()))
	if err != nil {
		return fail
	}
	stored, _, err := Keys(c.GetMechanism(), salted)
	if err != nil || !hmac.Equal(stored, c.GetStoredKey()) || !known {
		return fail
	}
	if v.ttl > 0 {
		v.remember(id, cacheEntry{cred: c, expires: now.Add(v.ttl)})
	}
	return nil
}

func (v *Verifier) cacheKey(user, password string) [32]byte {
	m := hmac.New(sha256.New, v.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(password))
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

func (v *Verifier) remember(id [32]byte, e cacheEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cached) >= maxCached {
		now := v.now()
		for k, x := range v.cached {
			if !now.Before(x.expires) || len(v.cached) >= maxCached/2 {
				delete(v.cached, k)
			}
		}
	}
	v.cached[id] = e
}
