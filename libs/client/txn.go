package client

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// InitProducerID asks a transaction coordinator for a producer id and
// epoch.
//
// With an empty transactionalID (an idempotent producer) any transaction
// coordinator answers, and every call returns a new producer id with epoch
// 0, whatever producerID and epoch say. With a transactional id, the id's
// coordinator answers: a new id gets a new producer id; a known one gets its
// epoch bumped, which fences any earlier producer with that id and aborts
// its open transaction (or a new producer id once the epoch is exhausted).
// producerID and epoch are the caller's current ones (KIP-360), or -1 and -1
// for a new producer. txnTimeout is the transaction timeout the coordinator
// enforces (transaction.timeout.ms); it is rounded down to milliseconds.
//
// The coordinator is found with FindCoordinator and remembered. Retriable
// errors, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS (the previous
// producer's transaction is still being completed) are retried with
// backoff until ctx's deadline, or Config.RequestTimeout if ctx has none;
// then the last error a server gave is returned.
func (c *Client) InitProducerID(ctx context.Context, transactionalID string, txnTimeout time.Duration, producerID int64, epoch int16) (int64, int16, error) {
	ms := txnTimeout.Milliseconds()
	if ms < 0 || ms > math.MaxInt32 {
		return -1, -1, errs.Invalid(errs.InvalidTransactionTimeout, "transaction_timeout_ms",
			"%v is outside 0..%d ms", txnTimeout, math.MaxInt32)
	}
	req := &txnv1.InitProducerIdRequest{
		TransactionalId:      transactionalID,
		TransactionTimeoutMs: int32(ms),
		ProducerId:           producerID,
		ProducerEpoch:        int32(epoch),
	}
	var resp *txnv1.InitProducerIdResponse
	err := c.onCoordinator(ctx, txnKind, transactionalID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		r, err := txnv1.NewTransactionCoordinatorServiceClient(conn).InitProducerId(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		return r.GetError(), nil
	})
	if err != nil {
		return -1, -1, err
	}
	if e := resp.GetProducerEpoch(); e < 0 || e > math.MaxInt16 {
		return -1, -1, errs.New(errs.UnknownServerError, "InitProducerId answered epoch %d, outside 0..%d", e, math.MaxInt16)
	}
	return resp.GetProducerId(), int16(resp.GetProducerEpoch()), nil
}

// txnRetriable says whether a transaction coordinator's answer is worth
// another attempt on the same coordinator: a retriable error, or
// CONCURRENT_TRANSACTIONS (the coordinator is still completing the id's
// previous transaction; Kafka's clients retry it too).
func txnRetriable(err error) bool {
	return errs.IsRetriable(err) || errs.CodeOf(err) == errs.ConcurrentTransactions
}

// AddPartitionsToTxn adds partitions to the transaction of transactionalID
// (opening one if none is open), as producer producerID at epoch. The
// coordinator persists the transaction before it answers. A partition that
// does not exist fails the whole call with UNKNOWN_TOPIC_OR_PARTITION and
// adds nothing; an older epoch gets PRODUCER_FENCED. Coordinator moves and
// CONCURRENT_TRANSACTIONS are retried as InitProducerID does.
func (c *Client) AddPartitionsToTxn(ctx context.Context, transactionalID string, producerID int64, epoch int16, partitions []TopicPartition) error {
	req := &txnv1.AddPartitionsToTxnRequest{TransactionalId: transactionalID, ProducerId: producerID, ProducerEpoch: int32(epoch)}
	for _, tp := range partitions {
		req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	return c.onCoordinator(ctx, txnKind, transactionalID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		r, err := txnv1.NewTransactionCoordinatorServiceClient(conn).AddPartitionsToTxn(ctx, req)
		if err != nil {
			return nil, err
		}
		if r.GetError() != nil {
			return r.GetError(), nil
		}
		for _, res := range r.GetResults() {
			if res.GetError() != nil {
				return res.GetError(), nil
			}
		}
		return nil, nil
	})
}

// AddOffsetsToTxn adds the consumer group's offsets partition to the
// transaction, before offsets are committed in it (read-process-write).
func (c *Client) AddOffsetsToTxn(ctx context.Context, transactionalID string, producerID int64, epoch int16, groupID string) error {
	req := &txnv1.AddOffsetsToTxnRequest{TransactionalId: transactionalID, ProducerId: producerID, ProducerEpoch: int32(epoch), GroupId: groupID}
	return c.onCoordinator(ctx, txnKind, transactionalID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		r, err := txnv1.NewTransactionCoordinatorServiceClient(conn).AddOffsetsToTxn(ctx, req)
		if err != nil {
			return nil, err
		}
		return r.GetError(), nil
	})
}

// EndTxn commits (or aborts) the open transaction of transactionalID and
// returns the producer id and epoch to use from now on: every end bumps
// the epoch (KIP-890), so anything still in flight with the old epoch is
// refused. The coordinator answers once the outcome is persisted; it
// writes the markers to the transaction's partitions afterwards. A retry
// with the same epoch after a lost answer gets the same result if the
// transaction ended that way. No open transaction: INVALID_TXN_STATE; a
// fenced producer: PRODUCER_FENCED.
func (c *Client) EndTxn(ctx context.Context, transactionalID string, producerID int64, epoch int16, commit bool) (int64, int16, error) {
	req := &txnv1.EndTxnRequest{TransactionalId: transactionalID, ProducerId: producerID, ProducerEpoch: int32(epoch), Commit: commit}
	var resp *txnv1.EndTxnResponse
	err := c.onCoordinator(ctx, txnKind, transactionalID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		r, err := txnv1.NewTransactionCoordinatorServiceClient(conn).EndTxn(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		return r.GetError(), nil
	})
	if err != nil {
		return -1, -1, err
	}
	if e := resp.GetProducerEpoch(); e < 0 || e > math.MaxInt16 {
		return -1, -1, errs.New(errs.UnknownServerError, "EndTxn answered epoch %d, outside 0..%d", e, math.MaxInt16)
	}
	return resp.GetProducerId(), int16(resp.GetProducerEpoch()), nil
}
