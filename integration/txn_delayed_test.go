package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// endTxnTap remembers the EndTxn requests a producer's client sends, so the
// test can deliver a copy late, as a network that held it would.
type endTxnTap struct {
	mu   sync.Mutex
	last *txnv1.EndTxnRequest
}

func (e *endTxnTap) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*txnv1.EndTxnRequest); ok {
		e.mu.Lock()
		e.last = &txnv1.EndTxnRequest{TransactionalId: r.GetTransactionalId(), ProducerId: r.GetProducerId(), ProducerEpoch: r.GetProducerEpoch(), Commit: r.GetCommit()}
		e.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (e *endTxnTap) take() *txnv1.EndTxnRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.last
	e.last = nil
	return r
}

// delayedWorkload runs transactional producers whose committed
// transactions' EndTxn is delivered a second time, late: after the
// producer's next transaction began and wrote. It records every
// transaction and a final read of every partition at both isolation levels
// into a history, and returns the checker's result.
func delayedWorkload(t *testing.T, c *cluster.Options, seed uint64, txns int, pcfg client.ProducerConfig) check.Result {
	cl0 := cluster.Start(t, *c)
	admin := cluster.Client(t, cl0)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic, partitions = "delayed", int32(3)
	_, err := admin.CreateTopic(ctx, topic, partitions, 1, nil)
	require.NoError(t, err)

	conn, err := grpc.NewClient(cl0.StorageNodes()[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	storage := storagev1.NewStorageServiceClient(conn)
	var rec check.Recorder
	var wg sync.WaitGroup
	var lateMu sync.Mutex
	lateAnswers := map[string]int{}
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			tap := &endTxnTap{}
			cl, err := client.New(client.Config{Bootstrap: cl0.Bootstrap(), DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(tap.intercept)}})
			require.NoError(t, err)
			defer func() { _ = cl.Close() }()
			tid := fmt.Sprintf("delayed-%d", w)
			cfg := pcfg
			cfg.TransactionalID, cfg.Linger = tid, time.Millisecond
			p := cl.NewProducer(cfg)
			defer func() { _ = p.Close(context.Background()) }()
			require.NoError(t, p.InitTransactions(ctx))
			var late *txnv1.EndTxnRequest
			for j := 0; j < txns && ctx.Err() == nil; j++ {
				require.NoError(t, p.BeginTransaction())
				var mu sync.Mutex
				var sends []check.Send
				send := func(k int) {
					part := int32(rng.IntN(int(partitions)))
					v := fmt.Sprintf("w%d-t%d-%d", w, j, k)
					i := len(sends)
					sends = append(sends, check.Send{Topic: topic, Partition: part, Key: v, Value: v, Offset: check.NoOffset})
					err := p.Produce(ctx, &client.Record{Topic: topic, Partition: part, Key: []byte(v), Value: []byte(v)}, func(r client.Result) {
						mu.Lock()
						defer mu.Unlock()
						if r.Err == nil {
							sends[i].Acked, sends[i].Offset = true, r.Offset
						}
					})
					if err != nil {
						t.Logf("%s txn %d: produce: %v", tid, j, err)
					}
				}
				for k := range 3 {
					send(k)
				}
				_ = p.Flush(ctx) // failures show in the callbacks
				if late != nil {
					// A produce of the previous transaction arrives now, in
					// the middle of this one, on a partition this one
					// wrote: it must never become visible.
					mu.Lock()
					part := sends[0].Partition
					mu.Unlock()
					v := fmt.Sprintf("w%d-t%d-late", w, j-1)
					perr := lateProduce(ctx, storage, admin, topic, part, tid, late.GetProducerId(), int16(late.GetProducerEpoch()), v)
					rec.Txn(check.Txn{Process: w, TransactionalID: tid, Sends: []check.Send{{Topic: topic, Partition: part, Key: v, Value: v, Offset: check.NoOffset}},
						Commit: false, Outcome: check.OK})
					// And the EndTxn of the previous transaction arrives
					// again.
					_, _, lerr := admin.EndTxn(ctx, late.GetTransactionalId(), late.GetProducerId(), int16(late.GetProducerEpoch()), late.GetCommit())
					lateMu.Lock()
					lateAnswers["produce: "+errs.CodeOf(perr).String()]++
					lateAnswers["end: "+errs.CodeOf(lerr).String()]++
					lateMu.Unlock()
					late = nil
				}
				send(3)
				_ = p.Flush(ctx)
				commit := rng.IntN(10) < 6
				var endErr error
				if commit {
					if endErr = p.CommitTransaction(ctx); endErr != nil {
						commit = false
						if aerr := p.AbortTransaction(ctx); aerr != nil {
							endErr = fmt.Errorf("%v; abort: %w", endErr, aerr)
						}
					}
				} else {
					endErr = p.AbortTransaction(ctx)
				}
				outcome := check.OK
				if endErr != nil {
					outcome = check.Fail
					t.Logf("%s txn %d: end: %v", tid, j, endErr)
				}
				mu.Lock()
				rec.Txn(check.Txn{Process: w, TransactionalID: tid, Sends: sends, Commit: commit, Outcome: outcome})
				mu.Unlock()
				if commit && endErr == nil && rng.IntN(2) == 0 {
					late = tap.take()
				} else {
					tap.take()
				}
				if endErr != nil {
					// Start over as a fresh producer with the id, as an
					// application would after a failed transaction.
					_ = p.Close(ctx)
					p = cl.NewProducer(cfg)
					require.NoError(t, p.InitTransactions(ctx))
					late = nil
				}
			}
		})
	}
	wg.Wait()
	t.Logf("answers to late requests: %v", lateAnswers)

	// Final reads of every partition from the start, at both isolation
	// levels.
	for i, rc := range []bool{true, false} {
		iso := check.ReadUncommitted
		if rc {
			iso = check.ReadCommitted
		}
		poll := check.Poll{Process: 100 + i, Isolation: iso, Final: true}
		k := admin.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: rc})
		for part := range partitions {
			tp := client.TopicPartition{Topic: topic, Partition: part}
			hw, err := admin.ListOffset(ctx, topic, part, client.OffsetLatest)
			require.NoError(t, err)
			poll.Seeks = append(poll.Seeks, check.Position{Topic: topic, Partition: part, Offset: 0})
			poll.Ends = append(poll.Ends, check.Position{Topic: topic, Partition: part, Offset: hw})
			k.Assign(tp)
			k.Seek(tp, 0)
			for k.Position(tp) < hw {
				pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				recs, err := k.Poll(pctx)
				pcancel()
				require.NoError(t, ctx.Err(), "final read of %v", tp)
				if err != nil && pctx.Err() == nil {
					require.NoError(t, err)
				}
				for _, r := range recs {
					poll.Reads = append(poll.Reads, check.Read{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
				}
			}
		}
		k.Close()
		rec.Poll(poll)
	}
	res, err := check.Check(rec.History(), check.Options{})
	require.NoError(t, err)
	return res
}

// Delayed messages (Jepsen's finding in Bufstream and Kafka): a produce
// request and the EndTxn of a transaction that a network held are
// delivered after the producer's next transaction began and wrote. With KIP-890's epoch bump the late request
// is refused and the history checker finds no aborted read, lost write or
// torn transaction. The negative control runs the same workload against a
// build with the bug planted (no epoch bump): the late commit lands in the
// next transaction, which the producer then aborts, and the checker must
// find the anomalies, which shows it can.
func TestDelayedEndTxnCannotTouchTheNextTransaction(t *testing.T) {
	sideBySide(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	t.Run("kip-890", func(t *testing.T) {
		res := delayedWorkload(t, &cluster.Options{StorageNodes: 1}, seed, 20, client.ProducerConfig{})
		t.Logf("DELAYED: %s", res)
		require.True(t, res.Valid(), "%s", res)
		require.Positive(t, res.Committed)
		require.Positive(t, res.Aborted)
	})
	t.Run("planted-no-epoch-bump", func(t *testing.T) {
		// Fewer transactions, and a short delivery timeout: with the bug,
		// batches after a late commit wait for a transaction the
		// coordinator already ended until they time out.
		res := delayedWorkload(t, &cluster.Options{StorageNodes: 1, Sluiced: plantedSluiced.get(t),
			Env: []string{"SLUICE_PLANTED=no_epoch_bump"}}, seed, 8,
			client.ProducerConfig{DeliveryTimeout: 5 * time.Second, RequestTimeout: 2 * time.Second})
		t.Logf("DELAYED planted: %s", res)
		require.False(t, res.Valid(), "the checker missed the planted bug: %s", res)
		counts := res.Counts()
		require.Positive(t, counts[check.AbortedRead]+counts[check.TornTxn]+counts[check.LostWrite],
			"the planted bug shows as aborted reads, torn transactions or lost writes: %v", counts)
	})
}

// lateProduce sends, straight to the partition's leader, a transactional
// batch of producer pid at an ended transaction's epoch with the next
// sequence the partition expects of it: a produce request of that
// transaction that a network held until now.
func lateProduce(ctx context.Context, sc storagev1.StorageServiceClient, cl *client.Client, topic string, part int32, tid string, pid int64, epoch int16, value string) error {
	res, err := cl.DescribeProducers(ctx, topic, part, false)
	if err != nil {
		return err
	}
	seq := int32(0)
	for _, ps := range res.GetProducers() {
		if ps.GetProducerId() == pid {
			seq = ps.GetLastSequence() + 1
		}
	}
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(pid, epoch, seq)
	b.SetTransactional(true)
	if err := b.AppendKV(time.Now().UnixMilli(), []byte(value), []byte(value)); err != nil {
		return err
	}
	batch, err := b.Build()
	if err != nil {
		return err
	}
	resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 5000, TransactionalId: tid,
		Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: part, Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}}}})
	if err != nil {
		return err
	}
	if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
		return e
	}
	return nil
}
