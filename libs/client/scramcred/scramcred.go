// Package scramcred derives SCRAM credentials (RFC 5802, RFC 7677) on the
// client side: a user's password never leaves the client, only the salt,
// iteration count and salted password the controller turns into StoredKey
// and ServerKey. Servers verify with libs/scram.
package scramcred

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"strings"

	"github.com/xdg-go/stringprep"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Iteration bounds, as Kafka's: at least 4096 (RFC 7677 asks for 4096 at
// least), at most 16384.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 8192
	// MinSaltBytes is the shortest salt accepted.
	MinSaltBytes = 16
)

// Mechanism is a SCRAM mechanism.
type Mechanism = controllerv1.ScramMechanism

// The mechanisms.
const (
	SHA256 = controllerv1.ScramMechanism_SCRAM_MECHANISM_SHA_256
	SHA512 = controllerv1.ScramMechanism_SCRAM_MECHANISM_SHA_512
)

// Mechanisms lists the supported mechanisms.
var Mechanisms = []Mechanism{SHA256, SHA512}

// Name returns the SASL name of m ("SCRAM-SHA-256"), or "" for none.
func Name(m Mechanism) string {
	switch m {
	case SHA256:
		return "SCRAM-SHA-256"
	case SHA512:
		return "SCRAM-SHA-512"
	}
	return ""
}

// Parse returns the mechanism of a SASL name, case-insensitively.
func Parse(name string) (Mechanism, bool) {
	switch strings.ToUpper(name) {
	case "SCRAM-SHA-256":
		return SHA256, true
	case "SCRAM-SHA-512":
		return SHA512, true
	}
	return 0, false
}

// hashOf returns the hash function of m.
func hashOf(m Mechanism) (func() hash.Hash, bool) {
	switch m {
	case SHA256:
		return sha256.New, true
	case SHA512:
		return sha512.New, true
	}
	return nil, false
}

// SaltedPassword computes SaltedPassword = Hi(Normalize(password), salt, i)
// of RFC 5802 (PBKDF2 with HMAC-H), the password prepared with SASLprep.
func SaltedPassword(m Mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	h, ok := hashOf(m)
	if !ok {
		return nil, errs.New(errs.InvalidRequest, "unknown SCRAM mechanism %v", m)
	}
	prepped, err := stringprep.SASLprep.Prepare(password)
	if err != nil {
		return nil, errs.New(errs.InvalidRequest, "password is not valid for SCRAM (SASLprep): %v", err)
	}
	return pbkdf2.Key(h, prepped, salt, iterations, h().Size())
}

// Keys derives StoredKey and ServerKey from a salted password (RFC 5802
// section 3).
func Keys(m Mechanism, salted []byte) (storedKey, serverKey []byte, err error) {
	h, ok := hashOf(m)
	if !ok {
		return nil, nil, errs.New(errs.InvalidRequest, "unknown SCRAM mechanism %v", m)
	}
	if len(salted) != h().Size() {
		return nil, nil, errs.New(errs.InvalidRequest, "salted password for %s is %d bytes; want %d", Name(m), len(salted), h().Size())
	}
	clientKey := mac(h, salted, "Client Key")
	sum := h()
	sum.Write(clientKey)
	return sum.Sum(nil), mac(h, salted, "Server Key"), nil
}

func mac(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// NewUpsertion returns the controller request entry that sets user's
// credential for m to password, with a fresh random salt: only the salted
// password leaves the client.
func NewUpsertion(user string, m Mechanism, password string, iterations int) (*controllerv1.ScramCredentialUpsertion, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return nil, errs.New(errs.InvalidRequest, "iterations %d is outside %d..%d", iterations, MinIterations, MaxIterations)
	}
	if password == "" {
		return nil, errs.New(errs.InvalidRequest, "password is empty")
	}
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("generating a salt: %w", err)
	}
	salted, err := SaltedPassword(m, password, salt, iterations)
	if err != nil {
		return nil, err
	}
	return &controllerv1.ScramCredentialUpsertion{User: user, Mechanism: m, Iterations: int32(iterations), Salt: salt, SaltedPassword: salted}, nil
}
