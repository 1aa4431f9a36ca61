package storagenode

import (
	"context"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/replica"
)

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
	check := lg.BeginTxnCheck(h.ProducerID)
	err, busy := coordinator.VerifyInTransaction(ctx, r.deps.Metadata.Load(), r.deps.Pool, tid, h.ProducerID, h.ProducerEpoch,
		&commonv1.TopicPartition{Topic: pp.GetTopic(), Partition: pp.GetPartition()})
	if busy {
		return coordinatorBusy(tid, err)
	}
	if err != nil {
		return err
	}
	if !lg.VerifiedTxn(check, h.ProducerID, h.ProducerEpoch) {
		return errs.New(errs.InvalidTxnState, "%s-%d: the transaction of producer %d epoch %d ended while the coordinator was asked whether it includes the partition",
			pp.GetTopic(), pp.GetPartition(), h.ProducerID, h.ProducerEpoch)
	}
	return nil
}

// coordinatorBusy turns a failure to reach the coordinator into the error
// Kafka answers a produce with in that case (NOT_ENOUGH_REPLICAS), which
// every producer retries.
func coordinatorBusy(tid string, err error) error {
	return errs.New(errs.NotEnoughReplicas, "could not confirm with the transaction coordinator of %q that the partition is in the transaction (%v); retry", tid, err)
}
