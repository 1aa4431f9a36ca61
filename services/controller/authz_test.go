package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/testutil"
)

// authzController starts an active one-member controller whose authorizer
// holds acls.
func authzController(t *testing.T, acls ...authz.ACL) *Controller {
	t.Helper()
	etcd, dir := metastoretest.Config(t), t.TempDir()
	cfg := Config{
		Etcd: etcd, ElectionTTL: time.Second, SessionTimeout: time.Minute, HeartbeatInterval: time.Second,
		DefaultPartitions: 1, DefaultReplicationFactor: 1,
	}
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 1 << 20}, grpcx.ServerOptions{Logger: log.Discard()})
	c := New(cfg, service.Deps{Logger: log.Discard(), Server: srv, Node: config.Node{ID: 1, DataDir: dir},
		Metadata: metadata.NewCache(), Authz: authztest.New(acls...)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { stopController(t, c) })
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !c.IsActive() {
			return errors.New("the controller is not active yet")
		}
		return nil
	})
	return c
}

// refused reports whether err is the whole call's refusal with code.
func refused(t *testing.T, err error, code errs.Code) {
	t.Helper()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Equal(t, code, errs.CodeOf(err))
}

// notRefused reports whether err (or the item error e) is no
// authorization refusal: the call got past the check.
func notRefused(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	require.NotEqual(t, codes.PermissionDenied, status.Code(err), "%v", err)
}

func TestAdminCallsFollowTopicAndClusterACLs(t *testing.T) {
	c := authzController(t,
		authztest.Allow("User:alice", authz.Create, authz.Topic, "a"),
		authztest.Allow("User:alice", authz.Delete, authz.Topic, "a"),
		authztest.Allow("User:alice", authz.Alter, authz.Topic, "a"),
		authztest.Allow("User:alice", authz.DescribeConfigs, authz.Topic, "a"),
		authztest.Allow("User:ops", authz.Create, authz.Cluster, authz.ClusterName),
		authztest.Allow("User:ops", authz.Describe, authz.Cluster, authz.ClusterName),
		authztest.Allow("User:ops", authz.Alter, authz.Cluster, authz.ClusterName),
	)
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice, bob, ops := authztest.Ctx(bg, "alice"), authztest.Ctx(bg, "bob"), authztest.Ctx(bg, "ops")
	specs := []*controllerv1.TopicSpec{{Name: "a"}, {Name: "b"}}

	// CreateTopics: Create on the topic, or on the cluster for every topic.
	out, err := c.CreateTopics(alice, &controllerv1.CreateTopicsRequest{Topics: specs, ValidateOnly: true})
	require.NoError(t, err)
	require.NotEqual(t, errs.TopicAuthorizationFailed, out.GetResults()[0].GetError().GetCode())
	require.Equal(t, errs.TopicAuthorizationFailed, out.GetResults()[1].GetError().GetCode())
	out, err = c.CreateTopics(ops, &controllerv1.CreateTopicsRequest{Topics: specs, ValidateOnly: true})
	require.NoError(t, err)
	for _, r := range out.GetResults() {
		require.NotEqual(t, errs.TopicAuthorizationFailed, r.GetError().GetCode())
	}

	del, err := c.DeleteTopics(bob, &controllerv1.DeleteTopicsRequest{Names: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, errs.TopicAuthorizationFailed, del.GetResults()[0].GetError().GetCode())
	del, err = c.DeleteTopics(alice, &controllerv1.DeleteTopicsRequest{Names: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, errs.UnknownTopicOrPartition, del.GetResults()[0].GetError().GetCode(), "past the check: a does not exist")

	cp, err := c.CreatePartitions(bob, &controllerv1.CreatePartitionsRequest{Topics: []*controllerv1.PartitionIncrease{{Topic: "a", TotalCount: 2}}})
	require.NoError(t, err)
	require.Equal(t, errs.TopicAuthorizationFailed, cp.GetResults()[0].GetError().GetCode())

	desc, err := c.DescribeTopics(bob, &controllerv1.DescribeTopicsRequest{Names: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, errs.TopicAuthorizationFailed, desc.GetTopics()[0].GetError().GetCode())
	desc, err = c.DescribeTopics(alice, &controllerv1.DescribeTopicsRequest{Names: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, errs.UnknownTopicOrPartition, desc.GetTopics()[0].GetError().GetCode())

	cfgs, err := c.DescribeConfigs(alice, &controllerv1.DescribeConfigsRequest{Resources: []*controllerv1.ConfigResource{
		{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: "a"},
		{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: "b"},
		{Type: controllerv1.ResourceType_RESOURCE_TYPE_BROKER, Name: "1"},
	}})
	require.NoError(t, err)
	require.Equal(t, errs.UnknownTopicOrPartition, cfgs.GetResults()[0].GetError().GetCode())
	require.Equal(t, errs.TopicAuthorizationFailed, cfgs.GetResults()[1].GetError().GetCode())
	require.Equal(t, errs.ClusterAuthorizationFailed, cfgs.GetResults()[2].GetError().GetCode())

	alt, err := c.AlterConfigs(alice, &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{
		{Resource: &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: "a"}}}})
	require.NoError(t, err)
	require.Equal(t, errs.TopicAuthorizationFailed, alt.GetResults()[0].GetError().GetCode(), "DescribeConfigs does not imply AlterConfigs")

	_, err = c.DescribeCluster(alice, &controllerv1.DescribeClusterRequest{})
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.DescribeCluster(ops, &controllerv1.DescribeClusterRequest{})
	require.NoError(t, err)
	_, err = c.ElectLeaders(alice, &controllerv1.ElectLeadersRequest{})
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.ElectLeaders(ops, &controllerv1.ElectLeadersRequest{})
	notRefused(t, err)
	_, err = c.ListPartitionReassignments(alice, &controllerv1.ListPartitionReassignmentsRequest{})
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.AlterPartitionReassignments(alice, &controllerv1.AlterPartitionReassignmentsRequest{})
	refused(t, err, errs.ClusterAuthorizationFailed)
}

func TestListTopicsShowsOnlyDescribable(t *testing.T) {
	c := authzController(t,
		authztest.Allow("User:ops", authz.Create, authz.Cluster, authz.ClusterName),
		authztest.Allow("User:alice", authz.Read, authz.Topic, "a"),
	)
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A node, so topics can be placed.
	reg, err := c.RegisterBroker(authztest.RoleCtx(bg, "storage-node"), &controllerv1.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "x", Roles: []string{"storage-node"}})
	require.NoError(t, err)
	hb, err := c.heartbeat(bg, &controllerv1.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: reg.GetBrokerEpoch()})
	require.NoError(t, err)
	require.Nil(t, hb.GetError())
	out, err := c.CreateTopics(authztest.Ctx(bg, "ops"), &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: "a"}, {Name: "b"}}})
	require.NoError(t, err)
	for _, r := range out.GetResults() {
		require.Nil(t, r.GetError())
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		all, err := c.ListTopics(authztest.RoleCtx(bg, "controller"), &controllerv1.ListTopicsRequest{})
		if err != nil || len(all.GetTopics()) != 2 {
			return errors.New("topics not listed yet")
		}
		return nil
	})
	list, err := c.ListTopics(authztest.Ctx(bg, "alice"), &controllerv1.ListTopicsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetTopics(), 1)
	require.Equal(t, "a", list.GetTopics()[0].GetName())
	list, err = c.ListTopics(authztest.Ctx(bg, "bob"), &controllerv1.ListTopicsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetTopics())
	desc, err := c.DescribeTopics(authztest.Ctx(bg, "alice"), &controllerv1.DescribeTopicsRequest{})
	require.NoError(t, err)
	require.Len(t, desc.GetTopics(), 1, "describing every topic describes the describable ones")
}

func TestRoleToRoleCallsNeedTheirRole(t *testing.T) {
	c := authzController(t, authztest.Allow("User:ops", authz.ClusterAction, authz.Cluster, authz.ClusterName))
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := &controllerv1.RegisterBrokerRequest{BrokerId: 5, IncarnationId: "x", Roles: []string{"storage-node"}}

	// A client certificate cannot register as a storage node; a principal
	// with ClusterAction can (Kafka's inter-broker rule), and so can a
	// storage node's certificate.
	_, err := c.RegisterBroker(authztest.Ctx(bg, "alice"), reg)
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.RegisterBroker(authztest.RoleCtx(bg, "controller"), reg)
	refused(t, err, errs.ClusterAuthorizationFailed)
	r, err := c.RegisterBroker(authztest.RoleCtx(bg, "storage-node"), reg)
	require.NoError(t, err)
	_, err = c.RegisterBroker(authztest.Ctx(bg, "ops"), &controllerv1.RegisterBrokerRequest{BrokerId: 6, IncarnationId: "y", Roles: []string{"storage-node"}})
	require.NoError(t, err)

	// A storage node's certificate bound to node 5 acts for node 5 only:
	// registering or shutting down as node 7 is refused.
	node5 := auth.NewContext(bg, auth.Identity{Principal: auth.User("storage-5"), Host: "127.0.0.1", Role: "storage-node", Mechanism: "mtls", NodeID: 5})
	_, err = c.RegisterBroker(node5, &controllerv1.RegisterBrokerRequest{BrokerId: 7, IncarnationId: "z", Roles: []string{"storage-node"}})
	refused(t, err, errs.ClusterAuthorizationFailed)
	require.ErrorContains(t, err, "(certificate of node 5) may not call RegisterBroker for node 7")
	_, err = c.ControlledShutdown(node5, &controllerv1.ControlledShutdownRequest{BrokerId: 6})
	refused(t, err, errs.ClusterAuthorizationFailed)
	r5, err := c.RegisterBroker(node5, reg)
	require.NoError(t, err, "its own node id")
	require.Equal(t, r.GetBrokerEpoch(), r5.GetBrokerEpoch(), "the same incarnation: a retried registration")

	// ISR changes are the storage node's; producer ids the transaction
	// coordinator's.
	alter := &controllerv1.AlterPartitionRequest{BrokerId: 5, BrokerEpoch: r.GetBrokerEpoch()}
	_, err = c.AlterPartition(authztest.RoleCtx(bg, "group-coordinator"), alter)
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.AlterPartition(authztest.RoleCtx(bg, "storage-node"), alter)
	notRefused(t, err)
	_, err = c.AllocateProducerIds(authztest.RoleCtx(bg, "storage-node"), &controllerv1.AllocateProducerIdsRequest{BrokerId: 5, BrokerEpoch: r.GetBrokerEpoch()})
	refused(t, err, errs.ClusterAuthorizationFailed)
	_, err = c.AllocateProducerIds(authztest.RoleCtx(bg, "transaction-coordinator,storage-node"), &controllerv1.AllocateProducerIdsRequest{BrokerId: 5, BrokerEpoch: r.GetBrokerEpoch()})
	notRefused(t, err)
	_, err = c.ControlledShutdown(authztest.Ctx(bg, "alice"), &controllerv1.ControlledShutdownRequest{BrokerId: 5, BrokerEpoch: r.GetBrokerEpoch()})
	refused(t, err, errs.ClusterAuthorizationFailed)

	// The metadata watch carries everything (ACLs and credentials too):
	// processes only.
	err = c.WatchMetadata(&controllerv1.WatchMetadataRequest{}, &watchStream{ctx: authztest.Ctx(bg, "alice")})
	refused(t, err, errs.ClusterAuthorizationFailed)
	err = c.BrokerHeartbeat(&heartbeatStream{ctx: authztest.Ctx(bg, "alice")})
	refused(t, err, errs.ClusterAuthorizationFailed)
}

type watchStream struct {
	grpc.ServerStreamingServer[controllerv1.WatchMetadataResponse]
	ctx context.Context
}

func (s *watchStream) Context() context.Context { return s.ctx }

type heartbeatStream struct {
	grpc.BidiStreamingServer[controllerv1.BrokerHeartbeatRequest, controllerv1.BrokerHeartbeatResponse]
	ctx context.Context
}

func (s *heartbeatStream) Context() context.Context { return s.ctx }
