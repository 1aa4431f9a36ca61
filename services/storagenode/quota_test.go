package storagenode

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/quota"
)

// The cluster's own processes are never throttled by client quotas (a
// default quota would otherwise slow the coordinators' internal writes);
// clients are measured by principal and sluice-client-id.
func TestQuotaClient(t *testing.T) {
	in := func(id *auth.Identity) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(ClientIDHeader, "app1"))
		if id != nil {
			ctx = auth.NewContext(ctx, *id)
		}
		return ctx
	}
	p, c, ok := quotaClient(in(nil))
	require.True(t, ok)
	require.Equal(t, auth.Anonymous.String(), p)
	require.Equal(t, "app1", c)

	alice := auth.Identity{Principal: auth.User("alice"), Host: "127.0.0.1", Mechanism: "mtls"}
	p, _, ok = quotaClient(in(&alice))
	require.True(t, ok)
	require.Equal(t, "User:alice", p)

	role := alice
	role.Role = "group-coordinator"
	_, _, ok = quotaClient(in(&role))
	require.False(t, ok, "a role's calls are not client traffic")

	r := &StorageNode{}
	require.Nil(t, r.newFetchQuota(in(&alice)), "no quota manager, no measurement")
	r.deps.Quotas = quota.NewManager(quota.Options{})
	require.NotNil(t, r.newFetchQuota(in(&alice)))
	require.Nil(t, r.newFetchQuota(in(&role)), "a role's fetches are not measured")
}
