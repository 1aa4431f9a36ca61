package scram

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/xdg-go/scram"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Store is the credential store of a process: the SCRAM credentials of the
// process's current metadata image. It is safe for concurrent use; a
// credential changed by the controller is used from the moment the
// process's metadata watch delivers it.
type Store struct {
	cache *metadata.Cache
	// fakeKey derives stand-in credentials for unknown users, so a SCRAM
	// conversation for a user that does not exist looks like one with a
	// wrong password (it fails at the proof, with a stable salt) and does
	// not reveal which users exist.
	fakeKey []byte
}

// NewStore returns the store reading cache.
func NewStore(cache *metadata.Cache) *Store {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
	return &Store{cache: cache, fakeKey: k}
}

// Lookup returns user's credential for m.
func (s *Store) Lookup(user string, m Mechanism) (*controllerv1.ScramCredential, bool) {
	u, ok := s.cache.Load().ScramUsers[user]
	if !ok {
		return nil, false
	}
	for _, c := range u.GetCredentials() {
		if c.GetMechanism() == m {
			return c, true
		}
	}
	return nil, false
}

// credentials returns every credential of user.
func (s *Store) credentials(user string) []*controllerv1.ScramCredential {
	return s.cache.Load().ScramUsers[user].GetCredentials()
}

// errUnknownUser is what a lookup reports for a user without a credential
// for the mechanism; conversations answer it like a wrong password.
var errUnknownUser = errors.New("no such user or no credential for the mechanism")

// NewConversation starts the server side of one SCRAM conversation for m
// (RFC 5802). Step it with each client message; Valid reports success and
// Username the authenticated user.
func (s *Store) NewConversation(m Mechanism) (*Conversation, error) {
	var gen scram.HashGeneratorFcn
	switch m {
	case SHA256:
		gen = scram.SHA256
	case SHA512:
		gen = scram.SHA512
	default:
		return nil, errors.New("unknown SCRAM mechanism")
	}
	srv, err := gen.NewServer(func(user string) (scram.StoredCredentials, error) {
		c, ok := s.Lookup(user, m)
		if !ok {
			return s.fake(user, m), nil
		}
		return scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(c.GetSalt()), Iters: int(c.GetIterations())},
			StoredKey:  c.GetStoredKey(), ServerKey: c.GetServerKey(),
		}, nil
	})
	if err != nil {
		return nil, err
	}
	return &Conversation{xs: srv.NewConversation(), store: s, mech: m}, nil
}

// fake returns the stand-in credential of a user that has none
// (fakeCredential).
func (s *Store) fake(user string, m Mechanism) scram.StoredCredentials {
	c := s.fakeCredential(user, m)
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(c.GetSalt()), Iters: int(c.GetIterations())},
		StoredKey:  c.GetStoredKey(), ServerKey: c.GetServerKey(),
	}
}

// UsersRevision returns the metadata revision the credentials are read at
// (authz.Users: a changed user changes it).
func (s *Store) UsersRevision() int64 { return s.cache.Load().Revision }

// UsersChanged returns a channel closed at the next metadata change.
func (s *Store) UsersChanged() <-chan struct{} { return s.cache.Changed() }

// Credential returns a string that changes whenever user's credentials
// change (every mechanism's iterations, salt and StoredKey), or nil when
// the user has none. A snapshot received after a watch reconnects brings
// new records with the same contents: they compare equal.
func (s *Store) Credential(user string) any {
	creds := s.credentials(user)
	if len(creds) == 0 {
		return nil
	}
	var b []byte
	for _, c := range creds {
		b = fmt.Appendf(b, "%d/%d/%x/%x;", c.GetMechanism(), c.GetIterations(), c.GetSalt(), c.GetStoredKey())
	}
	return string(b)
}
