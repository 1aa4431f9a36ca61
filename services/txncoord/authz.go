package txncoord

import (
	"context"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
)

// Access rules of the transaction coordinator's calls (Kafka's, per API):
//
//	InitProducerId         Write on the transactional id; without one
//	                       (idempotence), IdempotentWrite on the cluster or
//	                       Write on a topic (Kafka 3.x)
//	AddPartitionsToTxn     Write on the transactional id; Write on each topic
//	                       (per partition); verify-only calls come from the
//	                       storage node and the group coordinator
//	                       (authz.CheckInternal; Kafka: ClusterAction)
//	AddOffsetsToTxn        Write on the transactional id; Read on the group
//	EndTxn                 Write on the transactional id
//	DescribeTransactions   Describe on each transactional id (per id)
//	ListTransactions       lists the ids the caller may Describe
//	AbortTransaction       Write on the transactional id
//
// A refusal of the whole call is PermissionDenied over gRPC and the
// response's error code over Kafka; per-partition and per-id refusals are
// the items' errors.

// verifyCallers are the roles that ask whether a partition is in a
// transaction (KIP-890 verification) before a transactional write.
var verifyCallers = []string{string(role.StorageNode), string(role.GroupCoordinator)}

// authorizeTxnID checks op on a transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED when refused).
func authorizeTxnID(ctx context.Context, a authz.Authorizer, op authz.Operation, tid string) *errs.Error {
	if err := authz.Check(ctx, a, op, authz.TransactionalID, tid); err != nil {
		return errs.From(err)
	}
	return nil
}

// authorizeClusterAction checks ClusterAction on the cluster: the calls
// Kafka's brokers make (AddPartitionsToTxn v4+).
func authorizeClusterAction(ctx context.Context, a authz.Authorizer) *errs.Error {
	if err := authz.Check(ctx, a, authz.ClusterAction, authz.Cluster, authz.ClusterName); err != nil {
		return errs.From(err)
	}
	return nil
}

// authorizeInit checks an InitProducerId: Write on its transactional id,
// or for an idempotent producer IdempotentWrite on the cluster or Write on
// a topic. Kafka 3.x grants idempotence to a principal allowed to Write
// any topic, an ACL on a topic that does not exist yet included; this
// authorizer can only be asked about named resources, so the topics are
// those in the process's metadata.
func authorizeInit(ctx context.Context, a authz.Authorizer, md *metadata.Cache, req *txnv1.InitProducerIdRequest) *errs.Error {
	if a == nil || !a.Enabled() {
		return nil
	}
	if tid := req.GetTransactionalId(); tid != "" {
		return authorizeTxnID(ctx, a, authz.Write, tid)
	}
	if authz.Allowed(ctx, a, authz.IdempotentWrite, authz.Cluster, authz.ClusterName) {
		return nil
	}
	if md != nil {
		for name := range md.Load().Topics {
			if authz.Allowed(ctx, a, authz.Write, authz.Topic, name) {
				return nil
			}
		}
	}
	return errs.From(authz.Check(ctx, a, authz.IdempotentWrite, authz.Cluster, authz.ClusterName))
}

// topicRefusals checks Write on each partition's topic (once per topic).
// When one is refused it returns the answer: the refused partitions with
// their refusal, the others OPERATION_NOT_ATTEMPTED; nil when all are
// allowed.
func (r *TransactionCoordinator) topicRefusals(ctx context.Context, req *txnv1.AddPartitionsToTxnRequest) *txnv1.AddPartitionsToTxnResponse {
	m := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Write, authz.Topic)
	if !m.On() {
		return nil
	}
	refused := make([]error, len(req.GetPartitions()))
	any := false
	for i, p := range req.GetPartitions() {
		if err := m.Check(p.GetTopic()); err != nil {
			refused[i], any = err, true
		}
	}
	if !any {
		return nil
	}
	notAttempted := errs.New(errs.OperationNotAttempted, "not added: another partition of the request was refused").Proto()
	out := &txnv1.AddPartitionsToTxnResponse{}
	for i, p := range req.GetPartitions() {
		res := &txnv1.AddPartitionResult{Partition: p, Error: notAttempted}
		if refused[i] != nil {
			res.Error = errs.ItemError(refused[i])
		}
		out.Results = append(out.Results, res)
	}
	return out
}
