package authz_test

import (
	"context"
	"fmt"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
)

// A process builds its authorizer from its flags, keeps it on the cluster's
// ACLs (authz.Follow with the metadata cache), and every handler checks
// the caller in the request context with Check.
func Example() {
	a := authz.New(authz.Config{SuperUsers: []string{"User:admin"}})
	a.SetACLs([]authz.ACL{
		{Principal: "User:alice", Host: "*", Operation: authz.Write, Permission: authz.Allow,
			ResourceType: authz.Topic, Name: "orders-", Pattern: authz.Prefixed},
		{Principal: "User:*", Host: "10.0.0.9", Operation: authz.All, Permission: authz.Deny,
			ResourceType: authz.Topic, Name: "*", Pattern: authz.Literal},
	}, 1)

	alice := auth.NewContext(context.Background(), auth.Identity{Principal: auth.User("alice"), Host: "10.0.0.1"})
	fmt.Println(authz.Check(alice, a, authz.Write, authz.Topic, "orders-eu"))
	fmt.Println(authz.Check(alice, a, authz.Describe, authz.Topic, "orders-eu")) // implied by Write
	fmt.Println(authz.Check(alice, a, authz.Read, authz.Topic, "orders-eu"))

	fromBadHost := auth.NewContext(context.Background(), auth.Identity{Principal: auth.User("alice"), Host: "10.0.0.9"})
	fmt.Println(authz.Check(fromBadHost, a, authz.Write, authz.Topic, "orders-eu") != nil) // Deny wins
	// Output:
	// <nil>
	// <nil>
	// TOPIC_AUTHORIZATION_FAILED: User:alice may not Read Topic "orders-eu" from host 10.0.0.1; an administrator can grant it with an ACL (sluice acl create --allow-principal User:alice --operation Read ...)
	// true
}
