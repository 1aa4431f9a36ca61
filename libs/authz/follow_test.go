package authz_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Follow applies the ACL set of a snapshot, replaces it with the set a
// delta carries, keeps it across deltas without one, and stops with its
// context.
func TestFollow(t *testing.T) {
	set := func(names ...string) *controllerv1.AclSet {
		s := &controllerv1.AclSet{}
		for _, n := range names {
			s.Bindings = append(s.Bindings, authz.ToProto(allow("User:alice", authz.Read, authz.Topic, n, authz.Literal)))
		}
		return s
	}
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{Revision: 5, Acls: set("a")}))
	a := authz.New(authz.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := authz.Follow(ctx, a, cache)
	alice := user("alice", "10.0.0.1")
	may := func(topic string) bool { return a.Authorize(ctx, alice, authz.Read, authz.Topic, topic) }
	require.True(t, may("a"), "the snapshot's set applies before Follow returns")

	eventually := func(cond func() bool, what string) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), what)
			time.Sleep(time.Millisecond)
		}
	}
	cache.Apply(&controllerv1.MetadataDelta{Revision: 6, Acls: set("b")})
	eventually(func() bool { return may("b") && !may("a") }, "the delta's set replaces the snapshot's")
	cache.Apply(&controllerv1.MetadataDelta{Revision: 7, DeletedTopics: []string{"x"}})
	cache.Apply(&controllerv1.MetadataDelta{Revision: 8, Acls: set("b", "c")})
	eventually(func() bool { return may("c") }, "a later delta applies")
	require.True(t, may("b"))
	_, rev := a.ACLs()
	require.Equal(t, int64(8), rev)

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not stop with its context")
	}
	cache.Apply(&controllerv1.MetadataDelta{Revision: 9, Acls: set()})
	require.True(t, may("c"), "a stopped Follow changes nothing")
}
