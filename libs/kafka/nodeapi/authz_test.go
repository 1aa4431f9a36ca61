package nodeapi

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/metadata"
)

// testNode is a node over testImage with authorizer a and no reachable
// controller (its address is never served).
func testNode(t *testing.T, a authz.Authorizer) *node {
	cache := metadata.NewCache()
	cache.Reset(testImage())
	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	return &node{cache: cache, pool: pool, nodeID: 1, logger: slog.New(slog.DiscardHandler), timeout: 200 * time.Millisecond, authz: a}
}

func TestMetadataListsOnlyDescribableTopics(t *testing.T) {
	a := authztest.New(authztest.Allow("User:alice", authz.Read, authz.Topic, "orders"))
	alice := authztest.Ctx(context.Background(), "alice")
	bob := authztest.Ctx(context.Background(), "bob")

	// Every topic asked for (null list): only what the caller may Describe.
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = nil
	req.IncludeTopicAuthorizedOperations = true
	resp := metadataResponseFor(alice, a, testImage(), req)
	require.Len(t, resp.Topics, 1)
	require.Equal(t, "orders", *resp.Topics[0].Topic)
	require.Zero(t, resp.Topics[0].ErrorCode)
	// Read implies Describe: the two bits, nothing else.
	require.Equal(t, int32(1<<3|1<<8), resp.Topics[0].AuthorizedOperations)
	require.Empty(t, metadataResponseFor(bob, a, testImage(), req).Topics)

	// Named topics: refused whether or not they exist, so a caller learns
	// nothing about topics it may not see.
	req.Topics = []kmsg.MetadataRequestTopic{{Topic: name("orders")}, {Topic: name("__consumer_offsets")}, {Topic: name("nope")}}
	resp = metadataResponseFor(bob, a, testImage(), req)
	require.Len(t, resp.Topics, 3)
	for _, mt := range resp.Topics {
		require.Equal(t, code(errs.TopicAuthorizationFailed), mt.ErrorCode, *mt.Topic)
		require.Empty(t, mt.Partitions)
	}
	resp = metadataResponseFor(alice, a, testImage(), req)
	require.Zero(t, resp.Topics[0].ErrorCode)
	require.Len(t, resp.Topics[0].Partitions, 3)
	require.Equal(t, code(errs.TopicAuthorizationFailed), resp.Topics[1].ErrorCode)

	// Authorization off: as before, every topic and every operation.
	req.Topics = nil
	resp = metadataResponseFor(bob, authz.AllowAll{}, testImage(), req)
	require.Len(t, resp.Topics, 2)
	require.Equal(t, topicOperations, resp.Topics[0].AuthorizedOperations)
}

func TestDescribeClusterNeedsClusterDescribe(t *testing.T) {
	a := authztest.New(authztest.Allow("User:ops", authz.Describe, authz.Cluster, authz.ClusterName))
	n := testNode(t, a)
	req := kmsg.NewPtrDescribeClusterRequest()
	req.EndpointType = 1
	req.IncludeClusterAuthorizedOperations = true

	resp := n.describeCluster(authztest.Ctx(context.Background(), "bob"), req)
	require.Equal(t, code(errs.ClusterAuthorizationFailed), resp.ErrorCode)
	require.Empty(t, resp.Brokers)

	resp = n.describeCluster(authztest.Ctx(context.Background(), "ops"), req)
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.Brokers, 2)
	require.Equal(t, int32(1<<8), resp.ClusterAuthorizedOperations)
}

func TestAdminRequestsAuthorizedBeforeForwarding(t *testing.T) {
	a := authztest.New(
		authztest.Allow("User:alice", authz.Create, authz.Topic, "new"),
		authztest.Allow("User:alice", authz.Delete, authz.Topic, "orders"),
		authztest.Allow("User:alice", authz.Alter, authz.Topic, "orders"),
		authztest.Allow("User:alice", authz.DescribeConfigs, authz.Topic, "orders"),
	)
	n := testNode(t, a)
	alice := authztest.Ctx(context.Background(), "alice")
	bob := authztest.Ctx(context.Background(), "bob")
	// With the grant, a request gets past authorization to the
	// controller, which this test has none of: any error but an
	// authorization one shows it was forwarded.
	forwarded := func(c int16) bool {
		return c != 0 && c != code(errs.TopicAuthorizationFailed) && c != code(errs.ClusterAuthorizationFailed)
	}

	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis = 200
	for _, tn := range []string{"new", "other"} {
		t1 := kmsg.NewCreateTopicsRequestTopic()
		t1.Topic, t1.NumPartitions, t1.ReplicationFactor = tn, 1, 1
		ct.Topics = append(ct.Topics, t1)
	}
	resp := n.createTopics(alice, ct)
	require.True(t, forwarded(resp.Topics[0].ErrorCode), "code %d", resp.Topics[0].ErrorCode)
	require.Equal(t, code(errs.TopicAuthorizationFailed), resp.Topics[1].ErrorCode)

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version, dt.TimeoutMillis = 5, 200
	dt.TopicNames = []string{"orders"}
	require.Equal(t, code(errs.TopicAuthorizationFailed), n.deleteTopics(bob, dt).Topics[0].ErrorCode)
	require.True(t, forwarded(n.deleteTopics(alice, dt).Topics[0].ErrorCode))

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis = 200
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "orders", 4
	cp.Topics = append(cp.Topics, cpt)
	require.Equal(t, code(errs.TopicAuthorizationFailed), n.createPartitions(bob, cp).Topics[0].ErrorCode)
	require.True(t, forwarded(n.createPartitions(alice, cp).Topics[0].ErrorCode))

	dc := kmsg.NewPtrDescribeConfigsRequest()
	for _, r := range []struct {
		t    kmsg.ConfigResourceType
		name string
	}{{kmsg.ConfigResourceTypeTopic, "orders"}, {kmsg.ConfigResourceTypeBroker, "1"}} {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = r.t, r.name
		dc.Resources = append(dc.Resources, rr)
	}
	got := n.describeConfigs(alice, dc)
	require.True(t, forwarded(got.Resources[0].ErrorCode))
	require.Equal(t, code(errs.ClusterAuthorizationFailed), got.Resources[1].ErrorCode, "broker configs need DescribeConfigs on the cluster")

	el := kmsg.NewPtrElectLeadersRequest()
	require.Equal(t, code(errs.ClusterAuthorizationFailed), n.electLeaders(alice, el).ErrorCode)
	lr := kmsg.NewPtrListPartitionReassignmentsRequest()
	require.Equal(t, code(errs.ClusterAuthorizationFailed), n.listPartitionReassignments(alice, lr).ErrorCode)
}

func TestFindCoordinatorNeedsDescribeOnTheKey(t *testing.T) {
	a := authztest.New(authztest.Allow("User:alice", authz.Read, authz.Group, "g1"),
		authztest.Allow("User:alice", authz.Write, authz.TransactionalID, "t1"))
	n := testNode(t, a)
	alice := authztest.Ctx(context.Background(), "alice")
	out := n.coordinators(alice, keyTypeGroup, []string{"g1", "g2"})
	require.NotEqual(t, code(errs.GroupAuthorizationFailed), out[0].ErrorCode, "g1 is asked for")
	require.Equal(t, code(errs.GroupAuthorizationFailed), out[1].ErrorCode)
	out = n.coordinators(alice, keyTypeTransaction, []string{"t2", "t1"})
	require.Equal(t, code(errs.TransactionalIDAuthorizationFailed), out[0].ErrorCode)
	require.NotEqual(t, code(errs.TransactionalIDAuthorizationFailed), out[1].ErrorCode)
	// The empty key is an idempotent producer's "any coordinator": its
	// InitProducerId is checked, not the lookup.
	out = n.coordinators(alice, keyTypeTransaction, []string{""})
	require.NotEqual(t, code(errs.TransactionalIDAuthorizationFailed), out[0].ErrorCode)
}
