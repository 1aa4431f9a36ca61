package authz

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Follow keeps a's ACLs equal to the ACL set of the process's metadata
// cache until ctx ends: every process receives the cluster's ACLs with its
// metadata watch (the controller puts the whole set in a delta whenever
// ACLs change), and a check made after the cache applied the delta sees
// the new set. ACLs are read per request, never cached per connection, so a
// change applies to the next request of every open connection.
//
// Follow applies the cache's current set before it returns, then follows
// in a goroutine; the returned channel is closed when that goroutine ends.
func Follow(ctx context.Context, a *ACLAuthorizer, cache *metadata.Cache) <-chan struct{} {
	return metadata.Follow(ctx, cache,
		func(img *metadata.Image) *controllerv1.AclSet { return img.ACLs },
		func(img *metadata.Image) { a.SetACLs(FromProtoSet(img.ACLs), img.Revision) })
}
