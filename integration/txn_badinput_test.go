package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// Bad input on real processes: each mistake gets Kafka's error code, typed,
// and changes nothing: the transaction's state and the partition's log are
// as before.
func TestTransactionBadInput(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, tid = "txn-bad", "bad-input"
	_, err := cl.CreateTopic(ctx, topic, 1, 1, nil)
	require.NoError(t, err)
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	tps := []client.TopicPartition{{Topic: topic, Partition: 0}}

	state := func() string {
		d, err := cl.DescribeTransactions(ctx, tid)
		require.NoError(t, err)
		require.Len(t, d, 1)
		return d[0].GetState().String() + "/" + d[0].GetError().String()
	}
	code := func(err error) errs.Code {
		require.Error(t, err)
		return errs.CodeOf(err)
	}

	before := state()
	require.Equal(t, errs.InvalidTxnState, code(func() error { _, _, err := cl.EndTxn(ctx, tid, pid, epoch, true); return err }()), "EndTxn with no transaction")
	func() {
		// UNKNOWN_TOPIC_OR_PARTITION is retriable (the topic may be
		// being created), so the SDK tries until its deadline and then
		// returns it.
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		defer scancel()
		require.Equal(t, errs.UnknownTopicOrPartition, code(cl.AddPartitionsToTxn(sctx, tid, pid, epoch, []client.TopicPartition{{Topic: "no-such-topic", Partition: 0}})))
	}()
	require.Equal(t, errs.InvalidProducerEpoch, code(cl.AddPartitionsToTxn(ctx, tid, pid, epoch+1, tps)), "a newer epoch than the coordinator's")
	require.Equal(t, before, state(), "refused calls change nothing")

	_, _, err = cl.InitProducerID(ctx, "other", 16*time.Minute, -1, -1)
	require.Equal(t, errs.InvalidTransactionTimeout, code(err), "timeout above transaction.max.timeout.ms")
	_, _, err = cl.InitProducerID(ctx, strings.Repeat("x", 64<<10), time.Minute, -1, -1)
	require.Equal(t, errs.InvalidRequest, code(err), "oversized transactional id")
	_, _, err = cl.EndTxn(ctx, "never-initialised", 12345, 0, true)
	require.Equal(t, errs.InvalidProducerIDMapping, code(err), "unknown transactional id")
	_, err = cl.DescribeTransactions(ctx, "other", "never-initialised")
	require.Error(t, err)
	for _, id := range []string{"other", "never-initialised"} {
		require.Contains(t, err.Error(), `transactional id "`+id+`": TRANSACTIONAL_ID_NOT_FOUND`, "the refused calls created nothing")
	}

	// Partition side: a sequence gap and an old epoch.
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, tps))
	conn, err := grpc.NewClient(c.StorageNodes()[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	sc := storagev1.NewStorageServiceClient(conn)
	produce := func(ep int16, seq int32) error {
		b := record.NewBuilder(record.CodecNone)
		b.SetProducer(pid, ep, seq)
		b.SetTransactional(true)
		require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte("v")))
		batch, err := b.Build()
		require.NoError(t, err)
		resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TransactionalId: tid,
			Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}}}})
		require.NoError(t, err)
		if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
			return e
		}
		return nil
	}
	require.NoError(t, produce(epoch, 0))
	end, err := cl.ListOffset(ctx, topic, 0, client.OffsetLatest)
	require.NoError(t, err)
	require.Equal(t, errs.OutOfOrderSequenceNumber, code(produce(epoch, 5)), "sequence gap")
	_, next, err := cl.EndTxn(ctx, tid, pid, epoch, false)
	require.NoError(t, err)
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, next, tps))
	require.NoError(t, produce(next, 0))
	// The leader's check with the coordinator answers first (PRODUCER_FENCED);
	// the log's own check would say INVALID_PRODUCER_EPOCH.
	require.Contains(t, []errs.Code{errs.ProducerFenced, errs.InvalidProducerEpoch}, code(produce(epoch, 1)), "a batch of the fenced epoch")
	require.Equal(t, errs.ProducerFenced, code(cl.AddPartitionsToTxn(ctx, tid, pid, epoch, tps)), "the old epoch at the coordinator")
	res, err := cl.DescribeProducers(ctx, topic, 0, false)
	require.NoError(t, err)
	require.Len(t, res.GetProducers(), 1)
	require.Equal(t, int32(next), res.GetProducers()[0].GetProducerEpoch())
	require.Equal(t, int32(0), res.GetProducers()[0].GetLastSequence(), "refused batches left no trace")
	require.Greater(t, res.GetProducers()[0].GetCurrentTxnStartOffset(), end-1, "the open transaction is the new epoch's")
}
