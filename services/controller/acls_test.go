package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/testutil"
)

func topicACL(principal string, op controllerv1.AclOperation, name string, pt controllerv1.PatternType) *controllerv1.AclBinding {
	return &controllerv1.AclBinding{
		ResourceType: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: name, PatternType: pt,
		Principal: principal, Host: "*", Operation: op, Permission: controllerv1.AclPermission_ACL_PERMISSION_ALLOW,
	}
}

// The ACL calls store ACLs in etcd, validate every binding, are themselves
// authorized (Alter / Describe on the cluster), and every other process
// learns the change through its metadata watch: the test runs a second
// metadata cache fed by a Watcher over real gRPC, with an ACLAuthorizer
// following it, and measures how long after CreateAcls / DeleteAcls return
// that authorizer decides with the new set.
func TestACLsStoredAndDistributed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, own, addr := startAuthzController(t, ctx, log.Discard())

	admin := auth.NewContext(ctx, auth.Identity{Principal: auth.User("admin"), Host: "127.0.0.1"})
	alice := auth.Identity{Principal: auth.User("alice"), Host: "127.0.0.1"}

	// Another process: its own cache from the controller's watch stream.
	remoteCache := remoteMetadata(t, ctx, c, own, addr)
	remote := authz.New(authz.Config{})
	authz.Follow(ctx, remote, remoteCache)

	// The ACL calls need Alter / Describe on the cluster.
	_, err := c.CreateAcls(auth.NewContext(ctx, alice), &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_ALL, "*", 0)}})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "%v", err)
	_, err = c.DescribeAcls(ctx, &controllerv1.DescribeAclsRequest{})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "no identity is User:ANONYMOUS: %v", err)
	_, err = c.CreateAcls(admin, &controllerv1.CreateAclsRequest{})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))

	// One valid binding (host and pattern type default to "*" and
	// LITERAL), three invalid ones answered in their slots.
	valid := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_READ, "orders-", controllerv1.PatternType_PATTERN_TYPE_PREFIXED)
	literal := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_WRITE, "payments", 0)
	literal.Host = ""
	badHost := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_READ, "x", 0)
	badHost.Host = "db.example.com"
	badOp := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_CLUSTER_ACTION, "x", 0)
	badPrincipal := topicACL("alice", controllerv1.AclOperation_ACL_OPERATION_READ, "x", 0)
	resp, err := c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{valid, badHost, literal, badOp, badPrincipal}})
	require.NoError(t, err)
	require.Len(t, resp.GetErrors(), 5)
	require.Nil(t, resp.GetErrors()[0])
	require.Nil(t, resp.GetErrors()[2])
	for i, field := range map[int]string{1: "bindings[1].host", 3: "bindings[3].operation", 4: "bindings[4].principal"} {
		require.Equal(t, errs.InvalidRequest, resp.GetErrors()[i].GetCode())
		require.Contains(t, resp.GetErrors()[i].GetMessage(), field)
	}
	// Creating it again is a no-op.
	resp, err = c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{valid}})
	require.NoError(t, err)
	require.Nil(t, resp.GetErrors()[0])

	// Hosts are stored in canonical form: an IPv4-mapped address and its
	// IPv4 form are one binding, and a filter matches either spelling.
	mapped := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_READ, "orders-", controllerv1.PatternType_PATTERN_TYPE_PREFIXED)
	mapped.Host = "::ffff:10.0.0.7"
	plain := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_READ, "orders-", controllerv1.PatternType_PATTERN_TYPE_PREFIXED)
	plain.Host = "10.0.0.7"
	resp, err = c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{mapped, plain}})
	require.NoError(t, err)
	require.Nil(t, resp.GetErrors()[0])
	require.Nil(t, resp.GetErrors()[1])
	delMapped, err := c.DeleteAcls(admin, &controllerv1.DeleteAclsRequest{Filters: []*controllerv1.AclBinding{{Host: "::FFFF:10.0.0.7"}}})
	require.NoError(t, err)
	require.Len(t, delMapped.GetDeleted(), 1, "one binding for both spellings")
	require.Equal(t, "10.0.0.7", delMapped.GetDeleted()[0].GetHost())

	desc, err := c.DescribeAcls(admin, &controllerv1.DescribeAclsRequest{})
	require.NoError(t, err)
	require.Len(t, desc.GetBindings(), 3)
	require.Equal(t, "payments", desc.GetBindings()[1].GetResourceName(), "sorted by type, then name")
	require.Equal(t, "*", desc.GetBindings()[1].GetHost())
	require.Equal(t, controllerv1.PatternType_PATTERN_TYPE_LITERAL, desc.GetBindings()[1].GetPatternType())
	require.Equal(t, controllerv1.ResourceType_RESOURCE_TYPE_CLUSTER, desc.GetBindings()[2].GetResourceType())
	desc, err = c.DescribeAcls(admin, &controllerv1.DescribeAclsRequest{Filter: &controllerv1.AclBinding{PatternType: controllerv1.PatternType_PATTERN_TYPE_PREFIXED}})
	require.NoError(t, err)
	require.Len(t, desc.GetBindings(), 1)
	_, err = c.DescribeAcls(admin, &controllerv1.DescribeAclsRequest{Filter: &controllerv1.AclBinding{ResourceType: controllerv1.ResourceType_RESOURCE_TYPE_BROKER}})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))

	// Both authorizers see them.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if !remote.Authorize(ctx, alice, authz.Read, authz.Topic, "orders-eu") {
			return errors.New("the other process does not see the ACL yet")
		}
		return nil
	})
	require.True(t, own.Authorize(ctx, alice, authz.Write, authz.Topic, "payments"), "the controller's own authorizer follows its cache")

	// From a change returning to the other process deciding with it.
	const rounds = 20
	var created, deleted []time.Duration
	waitRemote := func(name string, want bool) time.Duration {
		start := time.Now()
		for remote.Authorize(ctx, alice, authz.Write, authz.Topic, name) != want {
			require.Less(t, time.Since(start), 10*time.Second, "ACL change on %q never reached the other process", name)
			time.Sleep(50 * time.Microsecond)
		}
		return time.Since(start)
	}
	for i := 0; i < rounds; i++ {
		b := topicACL("User:alice", controllerv1.AclOperation_ACL_OPERATION_WRITE, fmt.Sprintf("lat-%d", i), 0)
		_, err := c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{b}})
		require.NoError(t, err)
		created = append(created, waitRemote(b.GetResourceName(), true))
		del, err := c.DeleteAcls(admin, &controllerv1.DeleteAclsRequest{Filters: []*controllerv1.AclBinding{{ResourceName: b.GetResourceName()}}})
		require.NoError(t, err)
		require.Len(t, del.GetDeleted(), 1)
		deleted = append(deleted, waitRemote(b.GetResourceName(), false))
	}
	slices.Sort(created)
	slices.Sort(deleted)
	t.Logf("ACL change to another process's authorizer over %d rounds: create p50 %v max %v; delete p50 %v max %v",
		rounds, created[rounds/2], created[rounds-1], deleted[rounds/2], deleted[rounds-1])

	// A filter with only a principal deletes all of alice's ACLs.
	del, err := c.DeleteAcls(admin, &controllerv1.DeleteAclsRequest{Filters: []*controllerv1.AclBinding{{Principal: "User:alice"}}})
	require.NoError(t, err)
	require.Len(t, del.GetDeleted(), 2)
	_, err = c.DeleteAcls(admin, &controllerv1.DeleteAclsRequest{})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if remote.Authorize(ctx, alice, authz.Read, authz.Topic, "orders-eu") {
			return errors.New("the other process still allows a deleted ACL")
		}
		return nil
	})

	// A restarted controller loads the ACLs from etcd.
	_, err = c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{valid}})
	require.NoError(t, err)
	c.mu.RLock()
	n := len(c.st.acls)
	c.mu.RUnlock()
	require.Equal(t, 2, n)
	etcd, dir := c.cfg.Etcd, c.deps.Node.DataDir
	stopController(t, c)
	c = startActiveController(t, etcd, dir)
	defer stopController(t, c)
	desc, err = c.DescribeAcls(admin, &controllerv1.DescribeAclsRequest{Filter: &controllerv1.AclBinding{Principal: "User:alice"}})
	require.NoError(t, err)
	require.Len(t, desc.GetBindings(), 1)
	require.Equal(t, "orders-", desc.GetBindings()[0].GetResourceName())
}
