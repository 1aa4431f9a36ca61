package storagenode

import (
	"context"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
)

// Access rules of the storage node's calls (Kafka's, per API):
//
//	Produce                Write on each topic; Write on the transactional id of a
//	                       transactional produce (idempotent batches need nothing
//	                       more: Write on the topic implies it, as in Kafka 3.x)
//	Fetch                  Read on each topic
//	ListOffsets            Describe on each topic
//	OffsetForLeaderEpoch   Describe on each topic
//	DeleteRecords          Delete on each topic
//	DescribeProducers      Read on each topic
//	DescribeLogDirs        Describe on the cluster
//	WriteTxnMarkers        the transaction coordinator (ClusterAction)
//	FenceCoordinator       the topic's coordinator (ClusterAction)
//	internal topics        written only by their coordinator (ClusterAction)
//
// Per-topic refusals are the partitions' errors; a refusal of the whole
// request (the transactional id) fails the call with PermissionDenied.

// authorizeProduce checks what a produce needs as a whole: Write on its
// transactional id, if any.
func (r *StorageNode) authorizeProduce(ctx context.Context, req *storagev1.ProduceRequest) error {
	if tid := req.GetTransactionalId(); tid != "" {
		return authz.Check(ctx, r.deps.Authorizer(), authz.Write, authz.TransactionalID, tid)
	}
	return nil
}

// authorizeProduceTopic checks a produce's access to one topic: Write, or,
// for a coordinator's internal topic, the coordinator's role.
func (r *StorageNode) authorizeProduceTopic(ctx context.Context, topics *authz.Memo, topic string) error {
	if !topics.On() {
		return nil
	}
	if coordRole := metadata.CoordinatorRole(topic); coordRole != "" {
		return authz.CheckInternal(ctx, r.deps.Authorizer(), "Produce to "+topic, coordRole)
	}
	return topics.Check(topic)
}

// Roles that call the storage node's internal RPCs.
var (
	markerCallers = []string{string(role.TransactionCoordinator)}
	fenceCallers  = []string{string(role.GroupCoordinator), string(role.TransactionCoordinator)}
)
