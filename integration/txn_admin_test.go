package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
)

// txnCLI runs the sluice CLI and fails the test if it fails.
func txnCLI(t *testing.T, c *devcluster.Cluster, args ...string) string {
	t.Helper()
	out, stderr, err := groupCLI(t, c, args...)
	require.NoError(t, err, "sluice %s: %s", strings.Join(args, " "), stderr)
	return out
}

// txnCLIFails runs the sluice CLI, requires it to fail, and returns its
// stderr.
func txnCLIFails(t *testing.T, c *devcluster.Cluster, args ...string) string {
	t.Helper()
	out, stderr, err := groupCLI(t, c, args...)
	require.Error(t, err, "sluice %s succeeded: %s", strings.Join(args, " "), out)
	return stderr
}

// cliProducers runs `sluice producers describe` with JSON output.
func cliProducers(t *testing.T, c *devcluster.Cluster, topic string, partition int32, extra ...string) *storagev1.DescribeProducersResult {
	t.Helper()
	out := txnCLI(t, c, append([]string{"producers", "describe", topic, fmt.Sprint(partition), "-o", "json"}, extra...)...)
	res := &storagev1.DescribeProducersResult{}
	require.NoError(t, protojson.Unmarshal([]byte(out), res), out)
	return res
}

func producerIn(res *storagev1.DescribeProducersResult, pid int64) *storagev1.ProducerState {
	for _, p := range res.GetProducers() {
		if p.GetProducerId() == pid {
			return p
		}
	}
	return nil
}

// cliTxn is a row of `sluice txn list/describe -o json`.
type cliTxn struct {
	TransactionalID string   `json:"transactionalId"`
	ProducerID      int64    `json:"producerId"`
	ProducerEpoch   *int32   `json:"producerEpoch"`
	State           string   `json:"state"`
	DurationMs      *int64   `json:"durationMs"`
	Partitions      []string `json:"partitions"`
}

func cliTxns(t *testing.T, c *devcluster.Cluster, args ...string) map[string]cliTxn {
	t.Helper()
	out := txnCLI(t, c, append(args, "-o", "json")...)
	var v struct{ Transactions []cliTxn }
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	m := map[string]cliTxn{}
	for _, r := range v.Transactions {
		m[r.TransactionalID] = r
	}
	return m
}

// Transaction administration through the CLI on real processes, with two
// transaction coordinators in processes of their own: `producers describe`
// shows an idempotent producer's last sequence and a transactional one's
// open transaction holding the last stable offset back; `txn list` gathers
// the ids of both coordinators; `txn describe` shows the open transaction's
// partitions; `txn find-hanging` leaves a transaction its coordinator runs
// out unless it is older than the threshold; `txn abort` by partition
// refuses a transaction its coordinator runs, ends it on that partition
// alone with --force (the last stable offset moves past it), and refuses a
// producer with nothing open; `txn abort ID` ends the rest at the
// coordinator, which fences the producer.
func TestTxnAdminCLI(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1, TransactionCoordinators: 2})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "ta"
	_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
	require.NoError(t, err)
	storage := c.StorageNodes()[0]
	conn, err := grpc.NewClient(storage.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	sc := storagev1.NewStorageServiceClient(conn)

	// An idempotent producer writes two batches to ta-0: sequences 0-4
	// and 5-7.
	idem, _, err := cl.InitProducerID(ctx, "", time.Minute, -1, -1)
	require.NoError(t, err)
	for _, n := range []int32{5, 3} {
		b := record.NewBuilder(record.CodecNone)
		seq := int32(0)
		if n == 3 {
			seq = 5
		}
		b.SetProducer(idem, 0, seq)
		for i := range n {
			require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, fmt.Appendf(nil, "idem-%d", seq+i)))
		}
		batch, err := b.Build()
		require.NoError(t, err)
		// The new topic's leader may not serve yet: retriable answers are
		// retried.
		var last error
		require.Eventually(t, func() bool {
			resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000,
				Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: batch}}}})
			if err == nil {
				if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
					err = e
				}
			}
			last = err
			return err == nil || !errs.IsRetriable(err)
		}, 30*time.Second, 50*time.Millisecond)
		require.NoError(t, last)
	}
	res := cliProducers(t, c, topic, 0)
	p := producerIn(res, idem)
	require.NotNil(t, p, "producer %d listed: %v", idem, res)
	require.Equal(t, int32(7), p.GetLastSequence())
	require.Equal(t, int32(0), p.GetProducerEpoch())
	require.Equal(t, int64(-1), p.GetCurrentTxnStartOffset())
	require.Equal(t, int64(8), res.GetLastStableOffset(), "no transaction open: the high watermark")
	require.Equal(t, storage.NodeID, res.GetNodeId())
	text := txnCLI(t, c, "producers", "describe", topic, "0", "--any-replica")
	require.Contains(t, text, fmt.Sprintf("Partition: %s-0  Answered by: node %d  Last stable offset: 8  Producers: 1", topic, storage.NodeID))
	require.Regexp(t, fmt.Sprintf(`\n%d\s+0\s+7\s+\S+Z\s+0\s+-\n`, idem), text)
	onNode := cliProducers(t, c, topic, 0, "--node", fmt.Sprint(storage.NodeID))
	require.Equal(t, int32(7), producerIn(onNode, idem).GetLastSequence())
	require.Contains(t, txnCLIFails(t, c, "producers", "describe", topic, "0", "--node", "999"), "node 999 holds no replica of ta-0")

	// Transactional ids on both coordinators, with nothing open yet.
	var idle []string
	owners := map[int32]bool{}
	for i := 0; len(owners) < 2; i++ {
		require.Less(t, i, 30, "30 transactional ids all hashed to one coordinator")
		tid := fmt.Sprintf("idle-%d", i)
		_, _, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
		require.NoError(t, err)
		idle = append(idle, tid)
		owners[coordinatorProcess(t, c, storage.Addr, tid).NodeID] = true
	}
	empty := cliTxns(t, c, "txn", "list", "--state", "empty")
	for _, tid := range idle {
		require.Contains(t, empty, tid, "listed by whichever coordinator owns it")
		require.Equal(t, "Empty", empty[tid].State)
	}

	// A transaction open on both partitions.
	const tid = "admin-tx"
	pid, epoch, err := cl.InitProducerID(ctx, tid, 15*time.Minute, -1, -1)
	require.NoError(t, err)
	tp0, tp1 := client.TopicPartition{Topic: topic, Partition: 0}, client.TopicPartition{Topic: topic, Partition: 1}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, []client.TopicPartition{tp0, tp1}))
	tx := &txnProducer{t: t, sc: sc, tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	tx.produce(ctx, topic, 0, txnValues("tx0", 3)...)
	tx.produce(ctx, topic, 1, txnValues("tx1", 2)...)

	res = cliProducers(t, c, topic, 0)
	p = producerIn(res, pid)
	require.NotNil(t, p)
	require.Equal(t, int64(8), p.GetCurrentTxnStartOffset())
	require.Equal(t, int32(2), p.GetLastSequence())
	require.Equal(t, int32(epoch), p.GetProducerEpoch())
	require.Equal(t, int64(8), res.GetLastStableOffset(), "held at the open transaction's first offset")

	ongoing := cliTxns(t, c, "txn", "list", "--state", "Ongoing")
	require.Len(t, ongoing, 1)
	require.Equal(t, pid, ongoing[tid].ProducerID)
	require.Equal(t, []string{"ta-0", "ta-1"}, ongoing[tid].Partitions)
	require.NotNil(t, ongoing[tid].DurationMs)
	require.Empty(t, cliTxns(t, c, "txn", "list", "--state", "Ongoing", "--min-duration", "10m"))
	require.Contains(t, cliTxns(t, c, "txn", "list", "--producer-id", fmt.Sprint(pid)), tid)
	require.Regexp(t, fmt.Sprintf(`%s\s+%d\s+Ongoing\s+\S+\s+ta-0,ta-1\n`, tid, pid), txnCLI(t, c, "txn", "list"))
	desc := txnCLI(t, c, "txn", "describe", tid)
	require.Regexp(t, fmt.Sprintf(`%s\s+%d\s+%d\s+Ongoing\s+15m0s\s+\S+Z\s+\S+\s+ta-0,ta-1\n`, tid, pid, epoch), desc)
	require.Contains(t, txnCLIFails(t, c, "txn", "describe", "no-such-id"), "transactional id 'no-such-id' does not exist")

	// Run by its coordinator and fresh: not reported, unless the
	// threshold is 0.
	require.Contains(t, txnCLI(t, c, "txn", "find-hanging", "--topic", topic), "No hanging transaction: 2 partitions checked, 2 open transactions")
	var found struct {
		PartitionsChecked int
		Transactions      []struct {
			Topic           string
			Partition       int32
			ProducerID      int64
			StartOffset     int64
			TransactionalID string
			Reason          string
		}
	}
	out := txnCLI(t, c, "txn", "find-hanging", "--threshold", "0s", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &found), out)
	require.GreaterOrEqual(t, found.PartitionsChecked, 2, "every topic's partitions, internal ones too")
	require.Len(t, found.Transactions, 2, out)
	for i, r := range found.Transactions {
		require.Equal(t, int32(i), r.Partition)
		require.Equal(t, pid, r.ProducerID)
		require.Equal(t, tid, r.TransactionalID)
		require.Equal(t, "long-running", r.Reason)
	}

	// By partition: refused while the coordinator runs the transaction;
	// with --force, ta-0 alone is aborted.
	abortArgs := []string{"txn", "abort", "--topic", topic, "--partition", "0", "--producer-id", fmt.Sprint(pid)}
	require.Contains(t, txnCLIFails(t, c, abortArgs...), fmt.Sprintf("is run by its coordinator as transactional id '%s'", tid))
	require.Equal(t, int64(8), producerIn(cliProducers(t, c, topic, 0), pid).GetCurrentTxnStartOffset(), "nothing written")
	require.Contains(t, txnCLI(t, c, append(abortArgs, "--force")...),
		fmt.Sprintf("Aborted the transaction of producer %d (epoch %d, coordinator epoch 0) open on ta-0 since offset 8.", pid, epoch))
	res = cliProducers(t, c, topic, 0)
	require.Equal(t, int64(-1), producerIn(res, pid).GetCurrentTxnStartOffset())
	require.Equal(t, int64(12), res.GetLastStableOffset(), "past the 3 aborted records and their marker")
	got := txnReadAll(t, cl, topic, true, 8, 30*time.Second)
	require.Len(t, got, 8, "read_committed: the idempotent records only (ta-1's transaction is still open)")
	for _, v := range got {
		require.True(t, strings.HasPrefix(v, "idem-"), v)
	}
	require.Contains(t, txnCLIFails(t, c, append(abortArgs, "--force")...), fmt.Sprintf("producer %d has no open transaction on the partition", pid))
	require.Contains(t, txnCLIFails(t, c, "txn", "abort", "--topic", topic, "--partition", "0", "--producer-id", "999999999"),
		"producer 999999999 is not among the partition's active producers")

	// At the coordinator: the rest of the transaction (ta-1) is aborted
	// and the producer fenced.
	require.Contains(t, txnCLI(t, c, "txn", "abort", tid), fmt.Sprintf("Aborted the transaction of '%s'", tid))
	require.Eventually(t, func() bool {
		res, err := cl.DescribeProducers(ctx, topic, 1, false)
		return err == nil && producerIn(res, pid).GetCurrentTxnStartOffset() == -1 && res.GetLastStableOffset() == 3
	}, 60*time.Second, 200*time.Millisecond, "the coordinator's ABORT marker ends ta-1's transaction")
	require.Eventually(t, func() bool {
		return cliTxns(t, c, "txn", "describe", tid)[tid].State == "CompleteAbort"
	}, 60*time.Second, 200*time.Millisecond)
	require.Contains(t, txnCLIFails(t, c, "txn", "abort", tid), "INVALID_TXN_STATE")
	_, _, err = cl.EndTxn(ctx, tid, pid, epoch, true)
	require.Equal(t, errs.ProducerFenced, errs.CodeOf(err), "got %v", err)
	require.Contains(t, txnCLI(t, c, "txn", "find-hanging", "--threshold", "0s"), "No hanging transaction")
	require.Len(t, txnReadAll(t, cl, topic, true, 9, 5*time.Second), 8, "nothing of the aborted transaction is visible")
}

// The case `txn abort --topic --partition --producer-id` exists for: a
// transaction open on a partition whose coordinator cannot end it (here
// the only transaction coordinator process is gone). find-hanging reports
// it, saying the coordinators could not be asked; the abort by partition
// refuses without --force for the same reason, and with --force ends it:
// the last stable offset moves past it and read_committed readers get the
// records written after it.
func TestTxnAbortWithoutCoordinator(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1, TransactionCoordinators: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "tb"
	_, err := cl.CreateTopic(ctx, topic, 1, 1, nil)
	require.NoError(t, err)
	storage := c.StorageNodes()[0]
	conn, err := grpc.NewClient(storage.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	sc := storagev1.NewStorageServiceClient(conn)

	const tid = "orphan-tx"
	pid, epoch, err := cl.InitProducerID(ctx, tid, 15*time.Minute, -1, -1)
	require.NoError(t, err)
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, []client.TopicPartition{{Topic: topic, Partition: 0}}))
	tx := &txnProducer{t: t, sc: sc, tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	tx.produce(ctx, topic, 0, txnValues("orphan", 4)...)
	b := record.NewBuilder(record.CodecNone)
	require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte("after")))
	batch, err := b.Build()
	require.NoError(t, err)
	resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000,
		Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: batch}}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Equal(t, int64(0), cliProducers(t, c, topic, 0).GetLastStableOffset(), "held back by the open transaction")

	var coord *devcluster.Process
	for _, p := range c.Processes() {
		if p.Roles.Has(role.TransactionCoordinator) && !p.Roles.Has(role.StorageNode) {
			coord = p
		}
	}
	require.NotNil(t, coord)
	require.NoError(t, coord.Kill())

	out, stderr, err := groupCLI(t, c, "--request-timeout", "3s", "txn", "find-hanging", "--topic", topic)
	require.Error(t, err)
	require.Contains(t, stderr, "not every transaction coordinator answered")
	require.Regexp(t, fmt.Sprintf(`\ntb\s+0\s+%d\s+%d\s+0\s+0\s+\S+Z\s+\S+\s+-\s+hanging\n`, pid, epoch), out)

	abortArgs := []string{"--request-timeout", "3s", "txn", "abort", "--topic", topic, "--partition", "0", "--producer-id", fmt.Sprint(pid)}
	require.Contains(t, txnCLIFails(t, c, abortArgs...), "could not ask every transaction coordinator")
	require.Contains(t, txnCLI(t, c, append(abortArgs, "--force")...),
		fmt.Sprintf("Aborted the transaction of producer %d (epoch %d, coordinator epoch 0) open on tb-0 since offset 0.", pid, epoch))
	res := cliProducers(t, c, topic, 0)
	require.Equal(t, int64(-1), producerIn(res, pid).GetCurrentTxnStartOffset())
	require.Equal(t, int64(6), res.GetLastStableOffset(), "past the 4 aborted records, the plain one and the marker")
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: true})
	defer k.Close()
	k.Assign(client.TopicPartition{Topic: topic, Partition: 0})
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	var got []string
	for len(got) < 1 && rctx.Err() == nil {
		recs, _ := k.Poll(rctx) // an error here is the deadline; the assertion below says what was read
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	require.Equal(t, []string{"after"}, got, "read_committed: the record after the aborted transaction, none of it")
}
