package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// txnProducer writes transactional batches straight to the one storage
// node, as a transactional producer does: producer id, epoch, a sequence
// per partition that starts over with each epoch, and the transactional
// id on the request (the leader verifies the partition with the
// coordinator, KIP-890).
type txnProducer struct {
	t  *testing.T
	sc storagev1.StorageServiceClient
	// leader, if set, returns the partition's leader for each attempt
	// (instead of sc).
	leader func(ctx context.Context, topic string, partition int32) (storagev1.StorageServiceClient, error)
	tid    string
	pid    int64
	epoch  int16
	seq    map[int32]int32
}

func (p *txnProducer) produce(ctx context.Context, topic string, partition int32, values ...string) {
	p.t.Helper()
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(p.pid, p.epoch, p.seq[partition])
	b.SetTransactional(true)
	for _, v := range values {
		require.NoError(p.t, b.AppendKV(time.Now().UnixMilli(), nil, []byte(v)))
	}
	batch, err := b.Build()
	require.NoError(p.t, err)
	var last error
	require.Eventually(p.t, func() bool {
		sc := p.sc
		if p.leader != nil {
			var err error
			if sc, err = p.leader(ctx, topic, partition); err != nil {
				last = err
				return false
			}
		}
		resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000, TransactionalId: p.tid,
			Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: partition, Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}}}})
		if err == nil {
			err = errs.FromProto(resp.GetResults()[0].GetError())
			if err == (*errs.Error)(nil) {
				err = nil
			}
		}
		last = err
		return err == nil || !errs.IsRetriable(err)
	}, 60*time.Second, 50*time.Millisecond)
	require.NoError(p.t, last)
	p.seq[partition] += int32(len(values))
}

// readAll reads both partitions of topic from the start until want
// values arrived or the deadline passes, and returns the values sorted.
func txnReadAll(t *testing.T, cl *client.Client, topic string, committed bool, want int, within time.Duration) []string {
	t.Helper()
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: committed})
	defer k.Close()
	k.Assign(client.TopicPartition{Topic: topic, Partition: 0}, client.TopicPartition{Topic: topic, Partition: 1})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []string
	for len(got) < want && ctx.Err() == nil {
		recs, err := k.Poll(ctx)
		if err != nil {
			continue
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	sort.Strings(got)
	return got
}

// coordinatorProcess returns the process that coordinates tid now.
func coordinatorProcess(t *testing.T, c *devcluster.Cluster, addr, tid string) *devcluster.Process {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	var node int32 = -1
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := groupv1.NewGroupCoordinatorServiceClient(conn).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{
			KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: []string{tid}})
		if err != nil || resp.GetCoordinators()[0].GetError() != nil {
			return false
		}
		node = resp.GetCoordinators()[0].GetNodeId()
		return true
	}, 60*time.Second, 100*time.Millisecond)
	for _, p := range c.Processes() {
		if p.NodeID == node {
			return p
		}
	}
	t.Fatalf("no process has node id %d", node)
	return nil
}

// describeTxn asks the coordinator at addr to describe tid.
func describeTxn(ctx context.Context, addr, tid string) (*txnv1.TransactionDescription, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).DescribeTransactions(dctx, &txnv1.DescribeTransactionsRequest{TransactionalIds: []string{tid}})
	if err != nil {
		return nil, err
	}
	d := resp.GetTransactions()[0]
	if e := errs.FromProto(d.GetError()); e != nil {
		return nil, e
	}
	return d, nil
}

func txnValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// Transactions end to end on real processes, with the transaction
// coordinators in processes of their own: a committed transaction becomes
// visible to read_committed readers, an aborted one never does (but
// read_uncommitted readers see it); the coordinator of the transactional id
// is SIGKILLed right after a commit is decided, and the other coordinator
// takes __transaction_state's partition over, finishes the transaction
// (its markers, then CompleteCommit) and serves the id, where a new
// producer fences the old one.
func TestTransactionsAcrossCoordinatorKill(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1, TransactionCoordinators: 2})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "txn-out"
	_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
	require.NoError(t, err)
	storage := c.StorageNodes()[0]
	conn, err := grpc.NewClient(storage.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()

	const tid = "copier-1"
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	p := &txnProducer{t: t, sc: storagev1.NewStorageServiceClient(conn), tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	tps := []client.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}

	// 1: committed.
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, p.pid, p.epoch, tps))
	p.produce(ctx, topic, 0, txnValues("c1a", 10)...)
	p.produce(ctx, topic, 1, txnValues("c1b", 10)...)
	require.Empty(t, txnReadAll(t, cl, topic, true, 1, 2*time.Second), "read_committed sees nothing of an open transaction")
	npid, nepoch, err := cl.EndTxn(ctx, tid, p.pid, p.epoch, true)
	require.NoError(t, err)
	require.Equal(t, p.pid, npid)
	require.Equal(t, p.epoch+1, nepoch)
	p.epoch, p.seq = nepoch, map[int32]int32{}
	require.Len(t, txnReadAll(t, cl, topic, true, 20, 30*time.Second), 20)

	// 2: aborted.
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, p.pid, p.epoch, tps))
	p.produce(ctx, topic, 0, txnValues("a2a", 5)...)
	p.produce(ctx, topic, 1, txnValues("a2b", 5)...)
	_, nepoch, err = cl.EndTxn(ctx, tid, p.pid, p.epoch, false)
	require.NoError(t, err)
	p.epoch, p.seq = nepoch, map[int32]int32{}

	// 3: committed, and its coordinator killed as soon as the decision is
	// persisted.
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, p.pid, p.epoch, tps))
	p.produce(ctx, topic, 0, txnValues("c3a", 7)...)
	p.produce(ctx, topic, 1, txnValues("c3b", 7)...)
	coord := coordinatorProcess(t, c, storage.Addr, tid)
	oldEpoch := p.epoch
	_, nepoch, err = cl.EndTxn(ctx, tid, p.pid, p.epoch, true)
	require.NoError(t, err)
	require.NoError(t, coord.Kill())
	p.epoch = nepoch

	var desc *txnv1.TransactionDescription
	require.Eventually(t, func() bool {
		desc, err = describeTxn(ctx, coordinatorProcess(t, c, storage.Addr, tid).Addr, tid)
		return err == nil && desc.GetState() == txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT
	}, 90*time.Second, 200*time.Millisecond, "the new coordinator finishes the transaction")
	require.Equal(t, int32(p.epoch), desc.GetProducerEpoch())
	require.NotEqual(t, coord.NodeID, coordinatorProcess(t, c, storage.Addr, tid).NodeID)

	committed := txnReadAll(t, cl, topic, true, 34, 30*time.Second)
	var want []string
	for _, v := range [][]string{txnValues("c1a", 10), txnValues("c1b", 10), txnValues("c3a", 7), txnValues("c3b", 7)} {
		want = append(want, v...)
	}
	sort.Strings(want)
	require.Equal(t, want, committed, "read_committed: both committed transactions, nothing of the aborted one")
	require.Len(t, txnReadAll(t, cl, topic, false, 44, 30*time.Second), 44, "read_uncommitted also sees the aborted records")

	// A retried EndTxn of transaction 3 (its answer lost) learns the
	// outcome from the new coordinator.
	_, again, err := cl.EndTxn(ctx, tid, p.pid, oldEpoch, true)
	require.NoError(t, err)
	require.Equal(t, p.epoch, again)

	// A new producer with the same id fences this one.
	_, fenceEpoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	require.Greater(t, fenceEpoch, p.epoch)
	err = cl.AddPartitionsToTxn(ctx, tid, p.pid, p.epoch, tps)
	require.Equal(t, errs.ProducerFenced, errs.CodeOf(err), "got %v", err)
	require.NoError(t, coord.Start())
}

// A producer that begins a transaction and goes silent holds the last
// stable offset of its partitions back, so read_committed readers see
// nothing after its first record; once transaction.timeout.ms passes the
// coordinator (here in the storage node's process, writing its log
// in-process) aborts it and fences the producer, the ABORT marker lets the
// last stable offset advance, and the records written after the hanging
// transaction become visible.
func TestHangingTransactionIsAbortedAfterItsTimeout(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "txn-hang"
	_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
	require.NoError(t, err)
	conn, err := grpc.NewClient(c.StorageNodes()[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	sc := storagev1.NewStorageServiceClient(conn)

	const tid = "hanger"
	pid, epoch, err := cl.InitProducerID(ctx, tid, 3*time.Second, -1, -1)
	require.NoError(t, err)
	p := &txnProducer{t: t, sc: sc, tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, []client.TopicPartition{{Topic: topic, Partition: 0}}))
	p.produce(ctx, topic, 0, txnValues("hung", 5)...)
	hungAt := time.Now()
	// The producer dies here. Another writes plain records after it.
	b := record.NewBuilder(record.CodecNone)
	require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte("after")))
	batch, err := b.Build()
	require.NoError(t, err)
	resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000,
		Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: batch}}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Empty(t, txnReadAll(t, cl, topic, true, 1, time.Second), "the open transaction holds the last stable offset back")

	require.Equal(t, []string{"after"}, txnReadAll(t, cl, topic, true, 1, 60*time.Second), "aborted after its timeout: the plain record is visible, the hung ones never")
	t.Logf("visible to read_committed %v after the hang began (timeout 3s, scan every 1s)", time.Since(hungAt).Round(100*time.Millisecond))
	require.Len(t, txnReadAll(t, cl, topic, false, 6, 30*time.Second), 6)

	// The producer that hung is fenced: when it wakes up, its writes are
	// refused and so is its EndTxn.
	b = record.NewBuilder(record.CodecNone)
	b.SetProducer(pid, epoch, p.seq[0])
	b.SetTransactional(true)
	require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte("zombie")))
	batch, err = b.Build()
	require.NoError(t, err)
	resp, err = sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000, TransactionalId: tid,
		Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: batch}}}})
	require.NoError(t, err)
	require.NotNil(t, resp.GetResults()[0].GetError(), "the zombie's batch was appended")
	_, _, err = cl.EndTxn(ctx, tid, pid, epoch, true)
	require.Equal(t, errs.ProducerFenced, errs.CodeOf(err), "got %v", err)
	require.Len(t, txnReadAll(t, cl, topic, false, 7, 3*time.Second), 6, "nothing of the zombie was appended")
}

// A coordinator that dies after a commit is decided but before its markers
// are written (the data partitions' leader is paused, so no marker can be)
// leaves the transaction in PrepareCommit; the coordinator that takes
// __transaction_state's partition over replays it and, once the leader is
// back, writes the markers and completes the commit: read_committed readers
// then see the transaction, whole.
func TestCoordinatorCrashBetweenPrepareAndMarkers(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 2, TransactionCoordinators: 2,
		ExtraArgs: []string{"--group.transaction-state-topic-replication-factor=1"}})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s1, s2 := c.StorageNodes()[0], c.StorageNodes()[1]
	const topic = "txn-resume"
	resp, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: topic,
		Assignments: []*controllerv1.ReplicaAssignment{{Partition: 0, Replicas: []int32{s2.NodeID}}, {Partition: 1, Replicas: []int32{s2.NodeID}}}}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())

	// The first lookup creates __transaction_state; then pick an id whose
	// partition lives on storage-1, away from the data.
	_, _, err = cl.InitProducerID(ctx, "probe", time.Minute, -1, -1)
	require.NoError(t, err)
	md, err := cl.Metadata(ctx, "__transaction_state")
	require.NoError(t, err)
	parts := md.GetTopics()[0].GetPartitions()
	tid := ""
	for i := 0; tid == "" && i < 1000; i++ {
		cand := fmt.Sprintf("resume-%d", i)
		if parts[coordinator.PartitionFor(cand, int32(len(parts)))].GetLeaderId() == s1.NodeID {
			tid = cand
		}
	}
	require.NotEmpty(t, tid)

	conn, err := grpc.NewClient(s2.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	p := &txnProducer{t: t, sc: storagev1.NewStorageServiceClient(conn), tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, []client.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}))
	p.produce(ctx, topic, 0, txnValues("r0", 6)...)
	p.produce(ctx, topic, 1, txnValues("r1", 6)...)

	coord := coordinatorProcess(t, c, s1.Addr, tid)
	require.NoError(t, s2.Pause())
	_, nepoch, err := cl.EndTxn(ctx, tid, pid, epoch, true)
	require.NoError(t, err)
	desc, err := describeTxn(ctx, coord.Addr, tid)
	require.NoError(t, err)
	require.Equal(t, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT, desc.GetState(), "no marker can be written while the leader is paused")
	require.NoError(t, coord.Kill())
	require.NoError(t, s2.Resume())

	require.Eventually(t, func() bool {
		desc, err = describeTxn(ctx, coordinatorProcess(t, c, s1.Addr, tid).Addr, tid)
		return err == nil && desc.GetState() == txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT
	}, 2*time.Minute, 250*time.Millisecond, "the next coordinator completes the commit")
	require.Equal(t, int32(nepoch), desc.GetProducerEpoch())
	want := append(txnValues("r0", 6), txnValues("r1", 6)...)
	sort.Strings(want)
	require.Equal(t, want, txnReadAll(t, cl, topic, true, 12, 60*time.Second))
	require.NoError(t, coord.Start())
}

// KIP-890 on real processes: a batch of a transaction that already ended
// (held back in the network, say) arrives after the producer's next
// transaction began on the same partition. The leader's check with the
// coordinator refuses it (the epoch moved on), so it neither joins the
// next transaction nor becomes visible; a late EndTxn of the first
// transaction does not end the second.
func TestLateWritesOfAnEndedTransactionAreRefused(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "txn-late"
	_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
	require.NoError(t, err)
	conn, err := grpc.NewClient(c.StorageNodes()[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	sc := storagev1.NewStorageServiceClient(conn)

	const tid = "late"
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	tps := []client.TopicPartition{{Topic: topic, Partition: 0}}
	first := &txnProducer{t: t, sc: sc, tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, tps))
	first.produce(ctx, topic, 0, txnValues("t1", 3)...)
	_, next, err := cl.EndTxn(ctx, tid, pid, epoch, true)
	require.NoError(t, err)

	second := &txnProducer{t: t, sc: sc, tid: tid, pid: pid, epoch: next, seq: map[int32]int32{}}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, next, tps))
	second.produce(ctx, topic, 0, txnValues("t2", 3)...)

	// The late batch of the first transaction.
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(pid, epoch, first.seq[0])
	b.SetTransactional(true)
	require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte("late-t1")))
	batch, err := b.Build()
	require.NoError(t, err)
	resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000, TransactionalId: tid,
		Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: batch}}}})
	require.NoError(t, err)
	lateErr := errs.FromProto(resp.GetResults()[0].GetError())
	require.NotNil(t, lateErr, "the late batch was appended")
	require.Contains(t, []errs.Code{errs.InvalidProducerEpoch, errs.ProducerFenced, errs.InvalidTxnState}, lateErr.Code, "got %v", lateErr)
	t.Logf("the late batch: %v", lateErr)

	// A late EndTxn(abort) of the first transaction leaves the second open.
	_, _, err = cl.EndTxn(ctx, tid, pid, epoch, false)
	require.Error(t, err)
	_, _, err = cl.EndTxn(ctx, tid, pid, next, true)
	require.NoError(t, err)
	want := append(txnValues("t1", 3), txnValues("t2", 3)...)
	require.Equal(t, want, txnReadAll(t, cl, topic, true, 6, 30*time.Second))
	require.Equal(t, want, txnReadAll(t, cl, topic, false, 7, 3*time.Second), "nothing late was appended")
}

// leaderOf returns a client of the partition's leader as metadata names
// it now.
func leaderOf(cl *client.Client, conns *connCache) func(ctx context.Context, topic string, partition int32) (storagev1.StorageServiceClient, error) {
	return func(ctx context.Context, topic string, partition int32) (storagev1.StorageServiceClient, error) {
		md, err := cl.Metadata(ctx, topic)
		if err != nil {
			return nil, err
		}
		ps := md.GetTopics()[0].GetPartitions()
		if int(partition) >= len(ps) || ps[partition].GetLeaderId() < 0 {
			return nil, errs.New(errs.LeaderNotAvailable, "%s-%d has no leader", topic, partition)
		}
		for _, b := range md.GetBrokers() {
			if b.GetId() == ps[partition].GetLeaderId() && len(b.GetEndpoints()) > 0 {
				e := b.GetEndpoints()[0]
				return storagev1.NewStorageServiceClient(conns.get(fmt.Sprintf("%s:%d", e.GetHost(), e.GetPort()))), nil
			}
		}
		return nil, errs.New(errs.LeaderNotAvailable, "%s-%d: leader %d has no address", topic, partition, ps[partition].GetLeaderId())
	}
}

// connCache keeps one connection per address for a test.
type connCache struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (c *connCache) get(addr string) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
	}
	if conn, ok := c.conns[addr]; ok {
		return conn
	}
	conn, _ := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())) // fails only on a malformed target
	c.conns[addr] = conn
	return conn
}

func (c *connCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// Transactions go on while storage nodes that lead the transactional id's
// partition of __transaction_state (where the coordinator runs, at the
// leader, writing in-process) are SIGKILLed one after the other: the
// partition's new leader takes the coordinator over, replays it and serves
// the id; every transaction the producer saw committed is read exactly
// once by read_committed readers, and nothing of an aborted one is.
func TestTransactionsAcrossStateLeaderKills(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const topic = "txn-failover"
	_, err := cl.CreateTopic(ctx, topic, 2, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)
	conns := &connCache{}
	defer conns.close()

	const tid = "failover"
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	p := &txnProducer{t: t, tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}, leader: leaderOf(cl, conns)}
	tps := []client.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
	stateLeader := func() *devcluster.Process {
		md, err := cl.Metadata(ctx, "__transaction_state")
		require.NoError(t, err)
		ps := md.GetTopics()[0].GetPartitions()
		id := ps[coordinator.PartitionFor(tid, int32(len(ps)))].GetLeaderId()
		for _, sn := range c.StorageNodes() {
			if sn.NodeID == id {
				return sn
			}
		}
		t.Fatalf("no storage node %d", id)
		return nil
	}

	var want []string
	var killed *devcluster.Process
	for i := range 12 {
		if i == 3 || i == 7 {
			if killed != nil {
				require.NoError(t, killed.Start())
				require.NoError(t, killed.WaitHealthy(ctx, 90*time.Second))
			}
			killed = stateLeader()
			t.Logf("transaction %d: killing %s, the leader of the id's __transaction_state partition", i, killed.Name)
			require.NoError(t, killed.Kill())
		}
		commit := i%4 != 2
		require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, p.pid, p.epoch, tps))
		vals := txnValues(fmt.Sprintf("t%02d", i), 4)
		p.produce(ctx, topic, int32(i%2), vals...)
		npid, nepoch, err := cl.EndTxn(ctx, tid, p.pid, p.epoch, commit)
		require.NoError(t, err, "transaction %d", i)
		p.pid, p.epoch, p.seq = npid, nepoch, map[int32]int32{}
		if commit {
			want = append(want, vals...)
		}
	}
	require.NoError(t, killed.Start())
	sort.Strings(want)
	require.Equal(t, want, txnReadAll(t, cl, topic, true, len(want), 60*time.Second))
}
