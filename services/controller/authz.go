package controller

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/role"
)

// Access rules of the controller's calls (Kafka's, per API):
//
//	CreateTopics                 Create on the cluster, or Create on each topic
//	DeleteTopics                 Delete on each topic
//	ListTopics                   lists only topics the caller may Describe
//	DescribeTopics               Describe on each topic
//	CreatePartitions             Alter on each topic
//	DescribeConfigs              DescribeConfigs on each topic, or on the cluster for brokers
//	AlterConfigs                 AlterConfigs on each topic, or on the cluster for brokers
//	DescribeCluster              Describe on the cluster
//	ElectLeaders                 Alter on the cluster
//	AlterPartitionReassignments  Alter on the cluster
//	ListPartitionReassignments   Describe on the cluster
//	AlterClientQuotas            AlterConfigs on the cluster
//	DescribeClientQuotas         DescribeConfigs on the cluster
//	RegisterBroker, BrokerHeartbeat, ControlledShutdown, WatchMetadata,
//	AlterPartition, AllocateProducerIds
//	                             calls between Sluice roles (authz.CheckInternal)
//
// Per-topic (per-resource) refusals are the items' errors; a refusal of
// the whole call is PermissionDenied. Kafka admin requests reach the
// controller forwarded by the process that took them, which authorized
// them for the Kafka client first (libs/kafka/nodeapi).

// Roles that make the controller's internal calls. Every process but a
// controller-only one registers as a broker (libs/membership).
var (
	brokerCallers = []string{string(role.StorageNode), string(role.Replication), string(role.GroupCoordinator),
		string(role.TransactionCoordinator)}
	metadataWatchers = []string{string(role.Controller), string(role.StorageNode), string(role.Replication),
		string(role.GroupCoordinator), string(role.TransactionCoordinator)}
	isrCallers        = []string{string(role.StorageNode)}
	producerIDCallers = []string{string(role.TransactionCoordinator)}
)

func (c *Controller) authorizer() authz.Authorizer { return c.deps.Authorizer() }

// check is authz.Check with the controller's authorizer.
func (c *Controller) check(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	return authz.Check(ctx, c.authorizer(), op, rt, name)
}

// checkCluster is check on the cluster resource.
func (c *Controller) checkCluster(ctx context.Context, op authz.Operation) error {
	return c.check(ctx, op, authz.Cluster, authz.ClusterName)
}

// internal authorizes a call between roles.
func (c *Controller) internal(ctx context.Context, rpc string, roles []string) error {
	return authz.CheckInternal(ctx, c.authorizer(), rpc, roles...)
}

// checkNodeIdentity refuses a node call (registration, heartbeat,
// controlled shutdown) for node when the caller's certificate is bound to
// another node id (tlsx.NodeIDOf): a storage node's certificate for node 2
// cannot register, heartbeat or shut down as node 3. Certificates bound
// to no node id are not checked (they were issued without one).
func checkNodeIdentity(ctx context.Context, rpc string, node int32) error {
	id, _ := auth.FromContext(ctx)
	if id.NodeID == 0 || id.NodeID == node {
		return nil
	}
	return errs.New(errs.ClusterAuthorizationFailed,
		"%s (certificate of node %d) may not call %s for node %d: a node certificate acts for its own node id only",
		id.Principal, id.NodeID, rpc, node)
}

// checkConfigResource checks op (DescribeConfigs or AlterConfigs) on a
// config resource: the topic, or the cluster for broker settings.
func (c *Controller) checkConfigResource(ctx context.Context, op authz.Operation, res *controllerv1.ConfigResource) error {
	if res.GetType() == controllerv1.ResourceType_RESOURCE_TYPE_TOPIC {
		return c.check(ctx, op, authz.Topic, res.GetName())
	}
	return c.checkCluster(ctx, op)
}
