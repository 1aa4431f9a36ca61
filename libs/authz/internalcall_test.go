package authz_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestCheckOffAllocatesNothing(t *testing.T) {
	ctx := authztest.Ctx(context.Background(), "alice")
	var a authz.Authorizer = authz.AllowAll{}
	allocs := testing.AllocsPerRun(1000, func() {
		if authz.Check(ctx, a, authz.Write, authz.Topic, "orders") != nil {
			t.Fatal("AllowAll refused")
		}
	})
	require.Zero(t, allocs)
}

func TestCheckInternalRoles(t *testing.T) {
	a := authztest.New(authztest.Allow("User:ops", authz.ClusterAction, authz.Cluster, authz.ClusterName))
	bg := context.Background()
	require.NoError(t, authz.CheckInternal(authztest.RoleCtx(bg, "storage-node"), a, "RegisterBroker", "storage-node", "replication"))
	require.NoError(t, authz.CheckInternal(authztest.RoleCtx(bg, "controller,storage-node"), a, "RegisterBroker", "storage-node"))
	err := authz.CheckInternal(authztest.RoleCtx(bg, "group-coordinator"), a, "AlterPartition", "storage-node")
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	require.Contains(t, err.Error(), "only the storage-node role calls it")
	// A client with ClusterAction may; one without may not.
	require.NoError(t, authz.CheckInternal(authztest.Ctx(bg, "ops"), a, "AlterPartition", "storage-node"))
	err = authz.CheckInternal(auth.NewContext(bg, auth.Identity{Principal: auth.User("alice")}), a, "AlterPartition", "storage-node")
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	require.NoError(t, authz.CheckInternal(bg, authz.AllowAll{}, "AlterPartition", "storage-node"))
}

// TestCheckInternalIgnoresNoACLDefault: allow.everyone.if.no.acl.found lets
// a client do what no ACL names, but never a role-to-role call. Only a role
// certificate, a super user or an explicit Allow for ClusterAction on the
// cluster passes, and a Deny still wins over that Allow.
func TestCheckInternalIgnoresNoACLDefault(t *testing.T) {
	bg := context.Background()
	a := authz.New(authz.Config{AllowEveryoneIfNoACLFound: true, SuperUsers: []string{"User:admin"}})
	// The default still serves ordinary requests on resources without ACLs.
	require.NoError(t, authz.Check(authztest.Ctx(bg, "alice"), a, authz.ClusterAction, authz.Cluster, authz.ClusterName))
	for _, ctx := range []context.Context{authztest.Ctx(bg, "alice"), bg} {
		err := authz.CheckInternal(ctx, a, "RegisterBroker", "storage-node")
		require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
		require.Contains(t, err.Error(), "may not call RegisterBroker")
	}
	require.NoError(t, authz.CheckInternal(authztest.RoleCtx(bg, "storage-node"), a, "RegisterBroker", "storage-node"))
	require.NoError(t, authz.CheckInternal(authztest.Ctx(bg, "admin"), a, "RegisterBroker", "storage-node"))

	// An explicit Allow passes; a Deny of the same principal wins over it.
	a.SetACLs([]authz.ACL{authztest.Allow("User:ops", authz.ClusterAction, authz.Cluster, authz.ClusterName)}, 2)
	require.NoError(t, authz.CheckInternal(authztest.Ctx(bg, "ops"), a, "RegisterBroker", "storage-node"))
	deny := authztest.Allow("User:ops", authz.All, authz.Cluster, authz.ClusterName)
	deny.Permission = authz.Deny
	a.SetACLs([]authz.ACL{authztest.Allow("User:ops", authz.ClusterAction, authz.Cluster, authz.ClusterName), deny}, 3)
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(authz.CheckInternal(authztest.Ctx(bg, "ops"), a, "RegisterBroker", "storage-node")))
}

func TestMemoChecksEachNameOnce(t *testing.T) {
	a := &countingAuthorizer{inner: authztest.New(authztest.Allow("User:alice", authz.Write, authz.Topic, "a"))}
	ctx := authztest.Ctx(context.Background(), "alice")
	m := authz.NewMemo(ctx, a, authz.Write, authz.Topic)
	for _, n := range []string{"a", "a", "b", "b", "a", "b"} {
		err := m.Check(n)
		if n == "a" {
			require.NoError(t, err)
		} else {
			require.Equal(t, errs.TopicAuthorizationFailed, errs.CodeOf(err))
		}
	}
	require.Equal(t, 2, a.n)

	off := authz.NewMemo(ctx, authz.AllowAll{}, authz.Write, authz.Topic)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		m := authz.NewMemo(ctx, authz.AllowAll{}, authz.Write, authz.Topic)
		_ = m.Check("a")
		_ = m.Check("b")
	}))
	require.NoError(t, off.Check("x"))
}

type countingAuthorizer struct {
	inner authz.Authorizer
	n     int
}

func (c *countingAuthorizer) Enabled() bool { return true }

func (c *countingAuthorizer) AuthorizeExplicit(ctx context.Context, id auth.Identity, op authz.Operation, rt authz.ResourceType, name string) bool {
	c.n++
	return c.inner.AuthorizeExplicit(ctx, id, op, rt, name)
}

func (c *countingAuthorizer) Authorize(ctx context.Context, id auth.Identity, op authz.Operation, rt authz.ResourceType, name string) bool {
	c.n++
	return c.inner.Authorize(ctx, id, op, rt, name)
}

// BenchmarkCheck is the cost of one check: with authorization off, and
// with an ACLAuthorizer holding 1,000 ACLs (allowed and refused).
func BenchmarkCheck(b *testing.B) {
	var acls []authz.ACL
	for i := range 1000 {
		acls = append(acls, authztest.Allow("User:u"+strconv.Itoa(i), authz.Write, authz.Topic, "topic-"+strconv.Itoa(i)))
	}
	a := authztest.New(acls...)
	ctx := authztest.Ctx(context.Background(), "u500")
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = authz.Check(ctx, authz.AllowAll{}, authz.Write, authz.Topic, "topic-500")
		}
	})
	b.Run("allowed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if authz.Check(ctx, a, authz.Write, authz.Topic, "topic-500") != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if authz.Check(ctx, a, authz.Write, authz.Topic, "topic-501") == nil {
				b.Fatal("allowed")
			}
		}
	})
}
