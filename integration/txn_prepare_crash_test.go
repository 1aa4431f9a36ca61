package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/coordinator"
)

// A crash between prepare and markers that takes storage nodes down too:
// the commit is decided (PrepareCommit persisted) while the data
// partitions' leader is paused, so no marker is written; then the
// coordinator's process (which holds __transaction_state) and the data
// partitions' follower are SIGKILLed. After restarts, the coordinator
// replays PrepareCommit and writes the markers, the last stable offset
// reaches the high watermark, read_committed readers see the whole
// transaction, and both replicas hold the same producer state.
func TestPrepareCommitSurvivesCoordinatorAndReplicaKills(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 3, ExtraArgs: []string{"--group.transaction-state-topic-replication-factor=1"}})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nodes := c.StorageNodes()
	s1, s2, s3 := nodes[0], nodes[1], nodes[2]
	const topic = "txn-prepare-crash"
	resp, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: topic,
		Assignments: []*controllerv1.ReplicaAssignment{{Partition: 0, Replicas: []int32{s2.NodeID, s3.NodeID}}, {Partition: 1, Replicas: []int32{s2.NodeID, s3.NodeID}}}}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())

	// A transactional id whose __transaction_state partition (RF=1) lives
	// on storage-1, away from the data.
	_, _, err = cl.InitProducerID(ctx, "probe", time.Minute, -1, -1)
	require.NoError(t, err)
	md, err := cl.Metadata(ctx, "__transaction_state")
	require.NoError(t, err)
	parts := md.GetTopics()[0].GetPartitions()
	tid := ""
	for i := 0; tid == "" && i < 1000; i++ {
		cand := fmt.Sprintf("prepare-crash-%d", i)
		if parts[coordinator.PartitionFor(cand, int32(len(parts)))].GetLeaderId() == s1.NodeID {
			tid = cand
		}
	}
	require.NotEmpty(t, tid)

	// The data partitions' leader (the first replica) is storage-2.
	require.Eventually(t, func() bool {
		md, err := cl.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		for _, p := range md.GetTopics()[0].GetPartitions() {
			if p.GetLeaderId() != s2.NodeID || len(p.GetIsr()) != 2 {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond)
	conn, err := grpc.NewClient(s2.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)
	p := &txnProducer{t: t, sc: storagev1.NewStorageServiceClient(conn), tid: tid, pid: pid, epoch: epoch, seq: map[int32]int32{}}
	require.NoError(t, cl.AddPartitionsToTxn(ctx, tid, pid, epoch, []client.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}))
	p.produce(ctx, topic, 0, txnValues("a", 5)...)
	p.produce(ctx, topic, 1, txnValues("b", 5)...)

	require.NoError(t, s2.Pause())
	_, _, err = cl.EndTxn(ctx, tid, pid, epoch, true)
	require.NoError(t, err)
	desc, err := describeTxn(ctx, s1.Addr, tid)
	require.NoError(t, err)
	require.Equal(t, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT, desc.GetState(), "no marker can be written while the leader is paused")
	require.NoError(t, s1.Kill())
	require.NoError(t, s3.Kill())
	time.Sleep(time.Second)
	require.NoError(t, s1.Restart())
	require.NoError(t, s3.Restart())
	require.NoError(t, s2.Resume())

	require.Eventually(t, func() bool {
		desc, err := describeTxn(ctx, coordinatorProcess(t, c, s2.Addr, tid).Addr, tid)
		return err == nil && desc.GetState() == txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT
	}, 2*time.Minute, 250*time.Millisecond, "the restarted coordinator completes the commit")
	require.Eventually(t, func() bool {
		for part := range int32(2) {
			res, err := cl.DescribeProducers(ctx, topic, part, false)
			if err != nil {
				return false
			}
			hw, err := cl.ListOffset(ctx, topic, part, client.OffsetLatest)
			if err != nil || res.GetLastStableOffset() < hw {
				return false
			}
		}
		return true
	}, time.Minute, 250*time.Millisecond, "the last stable offset reaches the high watermark")
	want := append(txnValues("a", 5), txnValues("b", 5)...)
	sort.Strings(want)
	require.Equal(t, want, txnReadAll(t, cl, topic, true, 10, time.Minute))
	requireProducerStateAgrees(t, cl, topic, 2)
}
