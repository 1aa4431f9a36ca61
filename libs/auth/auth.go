// Package auth carries who is calling: the principal a listener
// authenticated (from a client certificate, SCRAM credentials or SASL), the
// host it called from, and, for role-to-role traffic, the role its
// certificate names. Listeners put an Identity in the request context; the
// authorizer (libs/authz) and the audit log read it from there, the same way
// for gRPC and Kafka requests.
package auth

import (
	"context"
	"fmt"
	"strings"
)

// Principal is Kafka's KafkaPrincipal: a type and a name, written
// "User:alice". ACLs name principals this way.
type Principal struct {
	Type string
	Name string
}

// UserType is the principal type of users (the only one Kafka defines).
const UserType = "User"

// Anonymous is the principal of a caller that presented no credentials on a
// listener that does not require them.
var Anonymous = Principal{Type: UserType, Name: "ANONYMOUS"}

// User returns the principal User:name.
func User(name string) Principal { return Principal{Type: UserType, Name: name} }

// String writes the principal as Type:Name.
func (p Principal) String() string { return p.Type + ":" + p.Name }

// IsZero reports whether p is unset.
func (p Principal) IsZero() bool { return p.Type == "" && p.Name == "" }

// ParsePrincipal parses "Type:Name" (the name may contain ':'), or "*" for
// the wildcard principal "User:*".
func ParsePrincipal(s string) (Principal, error) {
	if s == "*" {
		return Principal{Type: UserType, Name: "*"}, nil
	}
	typ, name, ok := strings.Cut(s, ":")
	if !ok || typ == "" || name == "" {
		return Principal{}, fmt.Errorf("principal %q: want Type:Name, such as User:alice", s)
	}
	return Principal{Type: typ, Name: name}, nil
}

// Identity is what a listener learned about a caller.
type Identity struct {
	// Principal is the authenticated principal, or Anonymous.
	Principal Principal
	// Host is the caller's IP address (no port), as ACLs match it.
	Host string
	// Role is set when the caller presented a certificate that names a
	// Sluice role (controller, storage-node, replication, group-coordinator,
	// transaction-coordinator): role-to-role traffic. Empty for clients.
	Role string
	// Mechanism names how the principal was authenticated: "mtls",
	// "scram-sha-256", "scram-sha-512", "plain", or "" for none.
	Mechanism string
	// NodeID is the node id a role certificate is bound to (its URI SAN
	// sluice://node/<id>); 0 when it names none. A process so identified
	// may register, heartbeat and shut down as that node only.
	NodeID int32
}

// String describes the identity for logs.
func (id Identity) String() string {
	s := id.Principal.String()
	if id.Role != "" {
		s += " (role " + id.Role + ")"
	}
	if id.Host != "" {
		s += " from " + id.Host
	}
	return s
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity in ctx. A context no listener marked (an
// in-process call, a test) has none: ok is false.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}
