package storagenode

import (
	"context"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
)

// verifyTimeout bounds the call to the transaction coordinator that checks
// a partition is part of a transaction.
const verifyTimeout = 5 * time.Second

// verifyTxn runs KIP-890's check before a transactional batch opens a
// transaction on this partition: the producer's coordinator must confirm
// the partition is part of the producer's open transaction at this epoch.
// Later batches of a transaction already open here need no call. The
// confirmation is recorded on the log, where a marker for the producer
// withdraws it, so a batch that arrives after its transaction ended is
// refused even if its check passed just before.
func (r *StorageNode) verifyTxn(ctx context.Context, part *replica.Partition, pp *storagev1.ProducePartition, tid string, batches []byte) error {
	h, ok := record.ParseBatchHeader(batches)
	if !ok || !h.Attributes.Transactional() || h.Attributes.Control() {
		return nil
	}
	if tid == "" {
		return errs.Invalid(errs.InvalidRequest, "transactional_id", "a transactional batch (producer %d) needs the producer's transactional id", h.ProducerID)
	}
	lg := part.Log()
	if lg.InTransaction(h.ProducerID, h.ProducerEpoch) {
		return nil
	}
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[metadata.TransactionStateTopic]
	if !ok || len(t.Partitions) == 0 {
		return errs.New(errs.InvalidTxnState, "transactional id %q has no transaction: no transaction coordinator has state yet (call InitProducerId)", tid)
	}
	c, _ := img.CoordinatorOf(metadata.TransactionStateTopic, coordinator.PartitionFor(tid, int32(len(t.Partitions))), metadata.CoordinatorRole(metadata.TransactionStateTopic))
	if c == nil {
		return coordinatorBusy(tid, errs.New(errs.CoordinatorNotAvailable, "no live transaction coordinator"))
	}
	conn, err := r.deps.Pool.Get(img.Address(c.GetId()))
	if err != nil {
		return coordinatorBusy(tid, err)
	}
	vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).AddPartitionsToTxn(vctx, &txnv1.AddPartitionsToTxnRequest{
		TransactionalId: tid, ProducerId: h.ProducerID, ProducerEpoch: int32(h.ProducerEpoch), VerifyOnly: true,
		Partitions: []*commonv1.TopicPartition{{Topic: pp.GetTopic(), Partition: pp.GetPartition()}},
	})
	if err == nil && resp.GetError() != nil {
		err = errs.FromProto(resp.GetError())
	}
	if err == nil {
		for _, res := range resp.GetResults() {
			if res.GetError() != nil {
				err = errs.FromProto(res.GetError())
			}
		}
	}
	if err != nil {
		switch errs.CodeOf(err) {
		case errs.NotCoordinator, errs.CoordinatorNotAvailable, errs.CoordinatorLoadInProgress, errs.ConcurrentTransactions, errs.NodeUnreachable:
			return coordinatorBusy(tid, err)
		}
		if errs.IsRetriable(err) {
			return coordinatorBusy(tid, err)
		}
		return err
	}
	lg.VerifiedTxn(h.ProducerID, h.ProducerEpoch)
	return nil
}

// coordinatorBusy turns a failure to reach the coordinator into the error
// Kafka answers a produce with in that case (NOT_ENOUGH_REPLICAS), which
// every producer retries.
func coordinatorBusy(tid string, err error) error {
	return errs.New(errs.NotEnoughReplicas, "could not confirm with the transaction coordinator of %q that the partition is in the transaction (%v); retry", tid, err)
}
