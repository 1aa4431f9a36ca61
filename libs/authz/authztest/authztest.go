// Package authztest helps tests of the roles' access checks: an
// authorizer holding exactly the grants a test names, and request contexts
// carrying a client's or a role's identity, as a listener would set them.
package authztest

import (
	"context"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
)

// Allow is an ACL allowing principal ("User:alice") op on the resource
// (rt, name) from any host; name "*" is every resource of the type.
func Allow(principal string, op authz.Operation, rt authz.ResourceType, name string) authz.ACL {
	return authz.ACL{
		Principal: principal, Host: authz.Wildcard, Operation: op, Permission: authz.Allow,
		ResourceType: rt, Name: name, Pattern: authz.Literal,
	}
}

// New returns the process authorizer holding acls and nothing else: no
// super users, and a resource no ACL names is refused.
func New(acls ...authz.ACL) *authz.ACLAuthorizer {
	a := authz.New(authz.Config{})
	a.SetACLs(acls, 1)
	return a
}

// Ctx returns ctx carrying the client identity User:name.
func Ctx(ctx context.Context, name string) context.Context {
	return auth.NewContext(ctx, auth.Identity{Principal: auth.User(name), Host: "127.0.0.1"})
}

// RoleCtx returns ctx carrying the identity of a process whose certificate
// names role (several roles comma-separated).
func RoleCtx(ctx context.Context, role string) context.Context {
	return auth.NewContext(ctx, auth.Identity{Principal: auth.User("node"), Host: "127.0.0.1", Role: role, Mechanism: "mtls"})
}
