// Package scram keeps users' SCRAM credentials (RFC 5802, RFC 7677) on every
// process and checks passwords against them: the SCRAM-SHA-256 and
// SCRAM-SHA-512 server conversations of the Kafka listener's SASL, and a
// Verifier for SASL/PLAIN and gRPC per-call credentials. Credentials are
// written by the controller into the metadata quorum and reach every
// process through its metadata watch (libs/metadata Image.ScramUsers), so
// each listener verifies locally. A credential is a salt, an iteration
// count, StoredKey and ServerKey; the password is never stored. Clients
// derive what they send with libs/client/scramcred.
package scram

import (
	"errors"
	"unicode"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/scramcred"
)

// Limits, as scramcred's.
const (
	MinIterations     = scramcred.MinIterations
	MaxIterations     = scramcred.MaxIterations
	DefaultIterations = scramcred.DefaultIterations
	MinSaltBytes      = scramcred.MinSaltBytes
	// MaxUserLength bounds user names.
	MaxUserLength = 255
)

// Mechanism is a SCRAM mechanism.
type Mechanism = controllerv1.ScramMechanism

// The mechanisms.
const (
	SHA256 = scramcred.SHA256
	SHA512 = scramcred.SHA512
)

// Mechanisms lists the supported mechanisms.
var Mechanisms = scramcred.Mechanisms

// Name returns the SASL name of m ("SCRAM-SHA-256"), or "" for none.
func Name(m Mechanism) string { return scramcred.Name(m) }

// Parse returns the mechanism of a SASL name, case-insensitively.
func Parse(name string) (Mechanism, bool) { return scramcred.Parse(name) }

// SaltedPassword computes RFC 5802's SaltedPassword (see scramcred).
func SaltedPassword(m Mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	return scramcred.SaltedPassword(m, password, salt, iterations)
}

// Keys derives StoredKey and ServerKey from a salted password.
func Keys(m Mechanism, salted []byte) (storedKey, serverKey []byte, err error) {
	return scramcred.Keys(m, salted)
}

// NewUpsertion returns a controller request entry setting user's
// credential for m to password, with a fresh random salt.
func NewUpsertion(user string, m Mechanism, password string, iterations int) (*controllerv1.ScramCredentialUpsertion, error) {
	return scramcred.NewUpsertion(user, m, password, iterations)
}

// ValidateUser checks a user name: 1..255 characters, valid UTF-8 without
// control characters (Kafka allows any name; control characters only make
// logs and ACLs unreadable).
func ValidateUser(user string) error {
	if user == "" {
		return errs.New(errs.InvalidRequest, "user name is empty")
	}
	if len(user) > MaxUserLength {
		return errs.New(errs.InvalidRequest, "user name is %d bytes long; at most %d", len(user), MaxUserLength)
	}
	for _, r := range user {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return errs.New(errs.InvalidRequest, "user name %q contains a control character or invalid UTF-8", user)
		}
	}
	return nil
}

// CredentialFrom validates an upsertion and derives the credential the
// server keeps from it.
func CredentialFrom(u *controllerv1.ScramCredentialUpsertion) (*controllerv1.ScramCredential, error) {
	if err := ValidateUser(u.GetUser()); err != nil {
		return nil, err
	}
	if Name(u.GetMechanism()) == "" {
		return nil, errs.New(errs.InvalidRequest, "user %q: mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512", u.GetUser())
	}
	if it := u.GetIterations(); it < MinIterations || it > MaxIterations {
		return nil, errs.New(errs.InvalidRequest, "user %q: iterations %d is outside %d..%d", u.GetUser(), it, MinIterations, MaxIterations)
	}
	if len(u.GetSalt()) < MinSaltBytes {
		return nil, errs.New(errs.InvalidRequest, "user %q: salt is %d bytes; at least %d", u.GetUser(), len(u.GetSalt()), MinSaltBytes)
	}
	stored, server, err := Keys(u.GetMechanism(), u.GetSaltedPassword())
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			return nil, errs.New(errs.InvalidRequest, "user %q: %s", u.GetUser(), e.Message)
		}
		return nil, err
	}
	return &controllerv1.ScramCredential{
		Mechanism: u.GetMechanism(), Iterations: u.GetIterations(), Salt: u.GetSalt(),
		StoredKey: stored, ServerKey: server,
	}, nil
}
