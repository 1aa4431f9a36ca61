package scram

import (
	"crypto/hmac"
	"crypto/sha512"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// fakeCredential returns the stand-in credential of a user that has none
// for m: its salt, StoredKey and ServerKey are HMACs of the store's secret
// over the mechanism and the name, so the same name always gets the same
// salt (a client asking twice sees what it would see for a real user), no
// password matches it (finding one would need the secret and a SHA-2
// preimage), and checking a password against it costs exactly what
// checking one against a real credential costs: the same PBKDF2 at the
// default iteration count and the same key comparison.
func (s *Store) fakeCredential(user string, m Mechanism) *controllerv1.ScramCredential {
	size := 32
	if m == SHA512 {
		size = 64
	}
	derive := func(label string, n int) []byte {
		h := hmac.New(sha512.New, s.fakeKey)
		h.Write([]byte(label))
		h.Write([]byte{0, byte(m), 0})
		h.Write([]byte(user))
		return h.Sum(nil)[:n]
	}
	return &controllerv1.ScramCredential{
		Mechanism:  m,
		Iterations: DefaultIterations,
		Salt:       derive("salt", 32),
		StoredKey:  derive("stored-key", size),
		ServerKey:  derive("server-key", size),
	}
}
