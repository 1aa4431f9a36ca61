package coordinator

import (
	"context"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/metadata"
)

// VerifyTimeout bounds the call to the transaction coordinator that checks
// a partition is part of a transaction.
const VerifyTimeout = 5 * time.Second

// VerifyInTransaction asks the transaction coordinator of tid whether tp is
// part of the producer's open transaction at this epoch (KIP-890: an
// AddPartitionsToTxn with verify_only). Storage nodes ask it before a
// transactional batch opens a transaction on a partition, the group
// coordinator before transactional offsets do, so that a late write of a
// transaction that already ended is refused instead of opening one that no
// one ends.
//
// The answer is nil when the coordinator confirms, the coordinator's refusal
// (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED...) when it does
// not, and an error wrapping the cause with Busy set when the coordinator
// could not be asked (none, moving, unreachable): the caller answers that
// with the retriable error its protocol has for it.
func VerifyInTransaction(ctx context.Context, img *metadata.Image, pool *wire.Pool, tid string, pid int64, epoch int16, tp *commonv1.TopicPartition) (err error, busy bool) {
	t, ok := img.Topics[metadata.TransactionStateTopic]
	if !ok || len(t.Partitions) == 0 {
		return errs.New(errs.InvalidTxnState, "transactional id %q has no transaction: no transaction coordinator has state yet (call InitProducerId)", tid), false
	}
	c, _ := img.CoordinatorOf(metadata.TransactionStateTopic, PartitionFor(tid, int32(len(t.Partitions))), metadata.CoordinatorRole(metadata.TransactionStateTopic))
	if c == nil {
		return errs.New(errs.CoordinatorNotAvailable, "no live transaction coordinator"), true
	}
	conn, err := pool.Get(img.Address(c.GetId()))
	if err != nil {
		return err, true
	}
	vctx, cancel := context.WithTimeout(ctx, VerifyTimeout)
	defer cancel()
	resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).AddPartitionsToTxn(vctx, &txnv1.AddPartitionsToTxnRequest{
		TransactionalId: tid, ProducerId: pid, ProducerEpoch: int32(epoch), VerifyOnly: true,
		Partitions: []*commonv1.TopicPartition{tp},
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
	if err == nil {
		return nil, false
	}
	switch errs.CodeOf(err) {
	case errs.NotCoordinator, errs.CoordinatorNotAvailable, errs.CoordinatorLoadInProgress, errs.ConcurrentTransactions, errs.NodeUnreachable:
		return err, true
	}
	return err, errs.IsRetriable(err)
}
