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
	var last *controllerv1.AclSet
	apply := func() <-chan struct{} {
		ch := cache.Changed()
		img := cache.Load()
		if img.ACLs != last {
			last = img.ACLs
			a.SetACLs(FromProtoSet(img.ACLs), img.Revision)
		}
		return ch
	}
	changed := apply()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				changed = apply()
			}
		}
	}()
	return done
}
