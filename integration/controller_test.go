package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// fastSessions makes node failures visible quickly so the failover tests
// stay short; the bounds they check scale with the session timeout.
var fastSessions = []string{"--controller.session-timeout=3s", "--controller.heartbeat-interval=500ms"}

const sessionTimeout = 3 * time.Second

func describe(t *testing.T, ctx context.Context, cl *client.Client, topic string) *controllerv1.TopicDescription {
	t.Helper()
	resp, err := cl.DescribeTopics(ctx, topic)
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 1)
	require.Nil(t, resp.GetTopics()[0].GetError(), "%v", resp.GetTopics()[0].GetError())
	return resp.GetTopics()[0]
}

func TestTopicAdministrationAndBadInput(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res, err := cl.CreateTopic(ctx, "orders", 6, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)
	require.Equal(t, int32(6), res.GetNumPartitions())
	d := describe(t, ctx, cl, "orders")
	leaders := map[int32]int{}
	for _, p := range d.GetPartitions() {
		require.Len(t, p.GetReplicas(), 3)
		require.ElementsMatch(t, p.GetReplicas(), p.GetIsr(), "a new partition is fully in sync")
		require.Equal(t, p.GetReplicas()[0], p.GetLeaderId(), "the preferred replica leads")
		leaders[p.GetLeaderId()]++
	}
	require.Len(t, leaders, 3)
	for id, n := range leaders {
		require.Equal(t, 2, n, "node %d leads %d partitions; want an even spread", id, n)
	}

	// Bad input: each refused with InvalidArgument or FailedPrecondition
	// and a message naming the problem; nothing changes.
	i32 := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		spec *controllerv1.TopicSpec
		want string
	}{
		{&controllerv1.TopicSpec{Name: "bad name"}, "illegal character ' '"},
		{&controllerv1.TopicSpec{Name: ".."}, `cannot be ".."`},
		{&controllerv1.TopicSpec{Name: "zero", NumPartitions: i32(0)}, "must be between 1 and 10000, got 0"},
		{&controllerv1.TopicSpec{Name: "negative", NumPartitions: i32(-3)}, "got -3"},
		{&controllerv1.TopicSpec{Name: "too-wide", ReplicationFactor: i32(4)}, "replication factor 4 is larger than the 3 live storage nodes"},
		{&controllerv1.TopicSpec{Name: "unknown-config", Configs: map[string]string{"retention.mss": "1"}}, "retention.mss: unknown topic config"},
		{&controllerv1.TopicSpec{Name: "bad-value", Configs: map[string]string{"cleanup.policy": "archive"}}, `"archive" is not one of delete, compact`},
		{&controllerv1.TopicSpec{Name: "orders_x"}, ""}, // valid: control for the collision check below
		{&controllerv1.TopicSpec{Name: "orders.x"}, `collides with existing topic "orders_x"`},
		{&controllerv1.TopicSpec{Name: "orders"}, `topic "orders" already exists`},
	} {
		resp, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{tc.spec}})
		if tc.want == "" {
			require.NoError(t, err)
			require.Nil(t, resp.GetResults()[0].GetError())
			continue
		}
		var msg string
		var grpcCode codes.Code
		if err != nil {
			e := errs.From(err)
			msg, grpcCode = e.Message, errs.Lookup(e.Code).GRPC
		} else {
			item := resp.GetResults()[0].GetError()
			require.NotNil(t, item, "%s should fail", tc.spec.GetName())
			msg, grpcCode = item.GetMessage(), errs.Lookup(item.GetCode()).GRPC
		}
		require.Contains(t, msg, tc.want)
		require.Contains(t, []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists}, grpcCode, msg)
	}
	list, err := cl.ListTopics(ctx, false)
	require.NoError(t, err)
	var names []string
	for _, l := range list.GetTopics() {
		names = append(names, l.GetName())
	}
	require.Equal(t, []string{"orders", "orders_x"}, names, "refused topics were not created")

	// Partitions never decrease; growing keeps existing partitions.
	gp, err := cl.CreatePartitions(ctx, &controllerv1.CreatePartitionsRequest{Topics: []*controllerv1.PartitionIncrease{{Topic: "orders", TotalCount: 4}}})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidPartitions, gp.GetResults()[0].GetError().GetCode())
	require.Contains(t, gp.GetResults()[0].GetError().GetMessage(), "has 6 partitions")
	gp, err = cl.CreatePartitions(ctx, &controllerv1.CreatePartitionsRequest{Topics: []*controllerv1.PartitionIncrease{{Topic: "orders", TotalCount: 9}}})
	require.NoError(t, err)
	require.Nil(t, gp.GetResults()[0].GetError())
	require.Len(t, describe(t, ctx, cl, "orders").GetPartitions(), 9)

	// Configs: an invalid change is refused atomically; a valid one shows
	// with its source.
	alter := func(ops ...*controllerv1.AlterConfigOp) *controllerv1.AlterConfigsResult {
		resp, err := cl.AlterConfigs(ctx, &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{{
			Resource: &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: "orders"}, Ops: ops}}})
		require.NoError(t, err)
		return resp.GetResults()[0]
	}
	set := func(k, v string) *controllerv1.AlterConfigOp {
		return &controllerv1.AlterConfigOp{Name: k, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: v}
	}
	r := alter(set("retention.ms", "3600000"), set("segment.bytes", "12"))
	require.Equal(t, errs.InvalidConfig, r.GetError().GetCode())
	require.Equal(t, map[string]string{"min.insync.replicas": "2"}, describe(t, ctx, cl, "orders").GetConfigs(), "nothing applied")
	require.Nil(t, alter(set("retention.ms", "3600000")).GetError())
	cfgs, err := cl.DescribeConfigs(ctx, &controllerv1.DescribeConfigsRequest{Resources: []*controllerv1.ConfigResource{
		{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: "orders"}}, Names: []string{"retention.ms", "segment.ms"}})
	require.NoError(t, err)
	entries := cfgs.GetResults()[0].GetEntries()
	require.Len(t, entries, 2)
	require.Equal(t, "3600000", entries[0].GetValue())
	require.Equal(t, controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_TOPIC, entries[0].GetSource())
	require.Equal(t, "604800000", entries[1].GetValue())
	require.Equal(t, controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT, entries[1].GetSource())

	// Delete, then create again under the same name: a new topic id.
	oldID := describe(t, ctx, cl, "orders").GetTopicId()
	del, err := cl.DeleteTopics(ctx, "orders", "missing")
	require.NoError(t, err)
	require.Nil(t, del.GetResults()[0].GetError())
	require.Equal(t, errs.UnknownTopicOrPartition, del.GetResults()[1].GetError().GetCode())
	res, err = cl.CreateTopic(ctx, "orders", 2, 1, nil)
	require.NoError(t, err)
	require.NotEqual(t, oldID, res.GetTopicId())
}

// leaderOf returns the partitions' leaders and leader epochs by index.
func leaders(t *testing.T, ctx context.Context, cl *client.Client, topic string) ([]int32, []int32) {
	md, err := cl.Metadata(ctx, topic)
	require.NoError(t, err)
	var ls, eps []int32
	for _, p := range md.GetTopics()[0].GetPartitions() {
		ls = append(ls, p.GetLeaderId())
		eps = append(eps, p.GetLeaderEpoch())
	}
	return ls, eps
}

func brokerEpoch(t *testing.T, ctx context.Context, cl *client.Client, id int32) (int64, commonv1.BrokerState) {
	resp, err := cl.DescribeCluster(ctx)
	require.NoError(t, err)
	for _, b := range resp.GetBrokers() {
		if b.GetId() == id {
			return b.GetBrokerEpoch(), b.GetState()
		}
	}
	return 0, commonv1.BrokerState_BROKER_STATE_UNSPECIFIED
}

// A killed storage node's leaderships move to in-sync replicas within the
// session timeout plus one second; a node paused past its session is fenced
// and comes back with a new epoch, leading nothing it lost.
func TestStorageNodeFailureMovesLeadership(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: fastSessions})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "events", 6, 3, nil)
	require.NoError(t, err)

	for round, fault := range []string{"kill", "pause"} {
		before, epochs := leaders(t, ctx, cl, "events")
		victimID := before[round]
		victim := nodeByID(c, victimID)
		oldEpoch, _ := brokerEpoch(t, ctx, cl, victimID)
		start := time.Now()
		if fault == "kill" {
			require.NoError(t, victim.Kill())
		} else {
			require.NoError(t, victim.Pause())
		}
		var moved time.Duration
		require.Eventually(t, func() bool {
			now, _ := leaders(t, ctx, cl, "events")
			for i, l := range before {
				if l == victimID && (now[i] == victimID || now[i] < 0) {
					return false
				}
			}
			moved = time.Since(start)
			return true
		}, 3*sessionTimeout, 50*time.Millisecond)
		t.Logf("%s of node %d: its leaderships moved after %v (session timeout %v)", fault, victimID, moved.Round(time.Millisecond), sessionTimeout)
		require.LessOrEqual(t, moved, sessionTimeout+time.Second)
		d := describe(t, ctx, cl, "events")
		after, newEpochs := leaders(t, ctx, cl, "events")
		for i, p := range d.GetPartitions() {
			require.NotContains(t, p.GetIsr(), victimID, "the failed node left the ISR of partition %d", i)
			if before[i] == victimID {
				require.Contains(t, p.GetIsr(), after[i], "the new leader of %d is in sync", i)
				require.Greater(t, newEpochs[i], epochs[i], "leader epoch of %d bumped", i)
			}
		}

		if fault == "kill" {
			require.NoError(t, victim.Start())
		} else {
			require.NoError(t, victim.Resume())
		}
		require.Eventually(t, func() bool {
			e, s := brokerEpoch(t, ctx, cl, victimID)
			return e > oldEpoch && s == commonv1.BrokerState_BROKER_STATE_ALIVE
		}, 30*time.Second, 100*time.Millisecond, "node %d rejoins with a new epoch", victimID)
		now, _ := leaders(t, ctx, cl, "events")
		for i, l := range before {
			if l == victimID {
				require.NotEqual(t, victimID, now[i], "node %d must not lead partition %d it lost", victimID, i)
			}
		}
	}
}

func nodeByID(c *devcluster.Cluster, id int32) *devcluster.Process {
	for _, p := range c.Processes() {
		if p.NodeID == id {
			return p
		}
	}
	return nil
}

// percentile returns the p-th percentile (0..1) of durations.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// A storage node stopped with SIGTERM hands its leaderships to in-sync
// replicas before it exits (controlled shutdown): by the time it is gone no
// partition names it as leader, without waiting for its session to expire.
func TestControlledShutdownMovesLeadershipFirst(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "cs", 6, 3, nil)
	require.NoError(t, err)
	before, _ := leaders(t, ctx, cl, "cs")
	victim := nodeByID(c, before[0])
	epoch, _ := brokerEpoch(t, ctx, cl, victim.NodeID)
	start := time.Now()
	require.NoError(t, victim.Stop(30*time.Second))
	took := time.Since(start)
	after, _ := leaders(t, ctx, cl, "cs")
	for i, l := range after {
		require.NotEqual(t, victim.NodeID, l, "partition %d still led by the stopped node", i)
		require.GreaterOrEqual(t, l, int32(0), "partition %d has a leader", i)
	}
	// The node left in controlled shutdown, not by a session expiry.
	e, state := brokerEpoch(t, ctx, cl, victim.NodeID)
	require.Equal(t, epoch, e)
	require.Equal(t, commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN, state)
	t.Logf("controlled shutdown of node %d: process exited after %v with its leaderships moved", victim.NodeID, took.Round(time.Millisecond))
}

// Moving a partition to other nodes: the new replicas copy the data as
// followers, join the ISR, leadership moves to the new preferred replica and
// the old replica is dropped; every record is still there. Then a preferred
// leader election through the CLI.
func TestPartitionReassignment(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := []int32{c.StorageNodes()[0].NodeID, c.StorageNodes()[1].NodeID, c.StorageNodes()[2].NodeID}
	_, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: "moving",
		Assignments: []*controllerv1.ReplicaAssignment{{Partition: 0, Replicas: []int32{ids[0]}}}}}})
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	var recs []*client.Record
	for i := range 50000 {
		recs = append(recs, &client.Record{Topic: "moving", Partition: 0, Value: []byte(fmt.Sprintf("%08d", i))})
	}
	_, err = p.ProduceSync(ctx, recs...)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	out := runCLI(t, c, "", "partition", "reassign", fmt.Sprintf("moving:0=%d,%d", ids[1], ids[2]))
	require.Contains(t, out, "moving:0: accepted")
	require.Eventually(t, func() bool {
		st := describe(t, ctx, cl, "moving").GetPartitions()[0]
		return slices.Equal(st.GetReplicas(), []int32{ids[1], ids[2]}) && len(st.GetAddingReplicas()) == 0
	}, 60*time.Second, 100*time.Millisecond, "reassignment completes")
	st := describe(t, ctx, cl, "moving").GetPartitions()[0]
	require.Equal(t, ids[1], st.GetLeaderId(), "the new preferred replica leads")
	require.ElementsMatch(t, []int32{ids[1], ids[2]}, st.GetIsr())
	read := readAll(t, ctx, cl, "moving", 1)
	require.Len(t, read[0], 50000, "every record survived the move")
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(c.StorageNodes()[0].DataDir, "logs", "moving-0"))
		return os.IsNotExist(err)
	}, 30*time.Second, 100*time.Millisecond, "the old replica's data is deleted")

	// Leadership away from the preferred replica, then back with the CLI.
	leader := nodeByID(c, ids[1])
	require.NoError(t, leader.Kill())
	require.NoError(t, leader.Start())
	require.Eventually(t, func() bool {
		st := describe(t, ctx, cl, "moving").GetPartitions()[0]
		return st.GetLeaderId() == ids[2] && len(st.GetIsr()) == 2
	}, 60*time.Second, 100*time.Millisecond, "leadership moved to the other replica and the restarted one caught up")
	out = runCLI(t, c, "", "partition", "elect-leaders", "moving:0")
	require.Contains(t, out, "elected")
	require.Equal(t, ids[1], describe(t, ctx, cl, "moving").GetPartitions()[0].GetLeaderId())
}
