package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// Scale out and in with plans from the CLI: a fourth storage node joins a
// three-node cluster holding a few MB per partition while a producer runs;
// a generated plan moves a share of the replicas onto it under a 1 MiB/s
// reassignment throttle, which the copy respects; the replicas end up
// identical and no acknowledged record is lost. Then a node is drained
// and holds no replica.
func TestScaleOutThrottledAndDrain(t *testing.T) {
	began := time.Now()
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 4})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sn := c.StorageNodes()
	n1, n2, n3, newNode := sn[0].NodeID, sn[1].NodeID, sn[2].NodeID, sn[3]
	// The fourth node is down while the topic is created and filled: it
	// joins later with an empty data directory, as a new machine would.
	require.NoError(t, newNode.Stop(30*time.Second))

	const topic, partitions = "grow", int32(6)
	layout := [][]int32{{n1, n2}, {n2, n3}, {n3, n1}, {n1, n3}, {n2, n1}, {n3, n2}}
	spec := &controllerv1.TopicSpec{Name: topic}
	for i, rs := range layout {
		spec.Assignments = append(spec.Assignments, &controllerv1.ReplicaAssignment{Partition: int32(i), Replicas: rs})
	}
	_, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{spec}})
	require.NoError(t, err)

	// About 3 MB per partition before the move.
	var acked sync.Map // "partition/offset" -> value
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	pad := strings.Repeat("x", 1000)
	for round := range 12 {
		var recs []*client.Record
		for part := range partitions {
			for i := range 250 {
				recs = append(recs, &client.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "pre-%d-%d-%d-%s", round, part, i, pad)})
			}
		}
		res, err := p.ProduceSync(ctx, recs...)
		require.NoError(t, err)
		for i, r := range res {
			require.NoError(t, r.Err)
			acked.Store(fmt.Sprintf("%d/%d", r.Partition, r.Offset), string(recs[i].Value))
		}
	}

	// A producer keeps writing through the move.
	pctx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	live := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll, Linger: 5 * time.Millisecond})
	var liveAcked, liveFailed int
	var liveMu sync.Mutex
	wg.Go(func() {
		for seq := 0; pctx.Err() == nil; seq++ {
			v := fmt.Sprintf("live-%d", seq)
			err := live.Produce(pctx, &client.Record{Topic: topic, Partition: -1, Key: []byte(v), Value: []byte(v)}, func(r client.Result) {
				liveMu.Lock()
				defer liveMu.Unlock()
				if r.Err != nil {
					liveFailed++
					return
				}
				liveAcked++
				acked.Store(fmt.Sprintf("%d/%d", r.Partition, r.Offset), v)
			})
			if err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})

	require.NoError(t, newNode.Start())
	require.Eventually(t, func() bool {
		_, st := brokerEpoch(t, ctx, cl, newNode.NodeID)
		return st == commonv1.BrokerState_BROKER_STATE_ALIVE
	}, 30*time.Second, 100*time.Millisecond, "the new node registers")

	dir := t.TempDir()
	out := runCLI(t, c, "", "partition", "reassign", "--generate", "--topics", topic, "--brokers", fmt.Sprintf("%d,%d,%d,%d", n1, n2, n3, newNode.NodeID))
	t.Logf("generate:\n%s", out)
	plan := planFromOutput(t, out, "Proposed")
	onNew := 0
	for _, pp := range plan.Partitions {
		if slices.Contains(pp.Replicas, newNode.NodeID) {
			onNew++
		}
	}
	require.Equal(t, 3, onNew, "a balanced plan puts 3 of the 12 replicas on the new node")
	planPath := filepath.Join(dir, "plan.json")
	writePlanFile(t, planPath, plan)

	// Bad inputs are refused before anything moves.
	alt, err := cl.AlterConfigs(ctx, &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{{
		Resource: &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_BROKER},
		Ops:      []*controllerv1.AlterConfigOp{{Name: "leader.replication.throttled.rate", Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: "-1"}}}}})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidConfig, alt.GetResults()[0].GetError().GetCode(), "a negative throttle is refused")
	bs := strings.Join(c.Bootstrap(), ",")
	msg, err := runCLIErr(ctx, t, bs, "", "partition", "reassign", "--execute", "--file", planPath, "--throttle", "-5")
	require.Error(t, err)
	require.Contains(t, msg, "negative")
	msg, err = runCLIErr(ctx, t, bs, "", "partition", "reassign", "--generate", "--topics", topic, "--brokers", fmt.Sprintf("%d,99", n1))
	require.Error(t, err)
	require.Contains(t, msg, "99 is not a registered storage node")
	badPath := filepath.Join(dir, "bad.json")
	writePlanFile(t, badPath, planJSON{Version: 1, Partitions: []plannedPartitionJSON{{Topic: topic, Partition: 0, Replicas: []int32{n1, 99}}}})
	msg, err = runCLIErr(ctx, t, bs, "", "partition", "reassign", "--execute", "--file", badPath)
	require.Error(t, err)
	require.Contains(t, msg, "node 99 is not a registered storage node")

	// Which leader sends each copy: the throttle is per sending node.
	ls, _ := leaders(t, ctx, cl, topic)
	const rate = 1 << 20
	out = runCLI(t, c, "", "partition", "reassign", "--execute", "--file", planPath, "--throttle", fmt.Sprint(rate))
	t.Logf("execute:\n%s", out)
	require.Contains(t, out, "Throttle:")

	// Sample what the new node holds until every move is done.
	conn, err := cl.Conn(newNode.Addr)
	require.NoError(t, err)
	rc := replicationv1.NewReplicationServiceClient(conn)
	type sample struct {
		at    time.Time
		bytes map[int32]int64
	}
	var samples []sample
	movesDone := func() bool {
		for _, st := range describe(t, ctx, cl, topic).GetPartitions() {
			if len(st.GetAddingReplicas()) > 0 || len(st.GetRemovingReplicas()) > 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := rc.DescribeReplicas(ctx, &replicationv1.DescribeReplicasRequest{})
		if err == nil {
			s := sample{at: time.Now(), bytes: map[int32]int64{}}
			for _, r := range resp.GetReplicas() {
				if r.GetTopic() == topic {
					s.bytes[r.GetPartition()] = r.GetSizeBytes()
				}
			}
			samples = append(samples, s)
		}
		if movesDone() {
			break
		}
		require.True(t, time.Now().Before(deadline), "the moves finish within a minute")
		time.Sleep(100 * time.Millisecond)
	}
	// Bytes each leader sent to the new node, and the span over which the
	// new node's replicas grew.
	last := samples[len(samples)-1]
	byLeader := map[int32]int64{}
	var total int64
	for part, b := range last.bytes {
		byLeader[ls[part]] += b
		total += b
	}
	var first, full time.Time
	for _, s := range samples {
		var sum int64
		for _, b := range s.bytes {
			sum += b
		}
		if first.IsZero() && sum > 0 {
			first = s.at
		}
		if full.IsZero() && sum >= total {
			full = s.at
		}
	}
	span := full.Sub(first).Seconds()
	var need float64
	for l, b := range byLeader {
		need = max(need, float64(b)/rate)
		t.Logf("leader %d sent %.2f MB to the new node: %.2f MB/s over %.2f s (throttle %.2f MB/s)", l, float64(b)/1e6, float64(b)/1e6/span, span, float64(rate)/1e6)
	}
	t.Logf("new node received %.2f MB in %.2f s; the throttle needs at least %.2f s", float64(total)/1e6, span, need)
	require.Greater(t, total, int64(6<<20), "the moved replicas hold several MB")
	require.GreaterOrEqual(t, span, need*0.7, "the copy ran faster than the throttle allows")

	out = runCLI(t, c, "", "partition", "reassign", "--verify", "--file", planPath)
	t.Logf("verify:\n%s", out)
	require.Contains(t, out, "throttle removed")
	require.Equal(t, len(plan.Partitions), strings.Count(out, ": done"))
	cfgs, err := cl.DescribeConfigs(ctx, &controllerv1.DescribeConfigsRequest{Resources: []*controllerv1.ConfigResource{{Type: controllerv1.ResourceType_RESOURCE_TYPE_BROKER}}})
	require.NoError(t, err)
	for _, e := range cfgs.GetResults()[0].GetEntries() {
		require.NotEqual(t, "leader.replication.throttled.rate", e.GetName(), "the throttle is removed")
	}
	after := describe(t, ctx, cl, topic).GetPartitions()
	for _, pp := range plan.Partitions {
		require.Equal(t, pp.Replicas, after[pp.Partition].GetReplicas(), "partition %d", pp.Partition)
	}

	// Drain the third node while the producer still runs.
	out = runCLI(t, c, "", "partition", "reassign", "--generate", "--remove-brokers", fmt.Sprint(n3))
	t.Logf("drain plan:\n%s", out)
	drain := planFromOutput(t, out, "Proposed")
	drainPath := filepath.Join(dir, "drain.json")
	writePlanFile(t, drainPath, drain)
	runCLI(t, c, "", "partition", "reassign", "--execute", "--file", drainPath)
	require.Eventually(t, func() bool {
		return strings.Contains(runCLI(t, c, "", "partition", "reassign", "--verify", "--file", drainPath), "All ")
	}, 60*time.Second, 500*time.Millisecond, "the drain completes")
	conn3, err := cl.Conn(nodeByID(c, n3).Addr)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := replicationv1.NewReplicationServiceClient(conn3).DescribeReplicas(ctx, &replicationv1.DescribeReplicasRequest{})
		return err == nil && len(resp.GetReplicas()) == 0
	}, 30*time.Second, 200*time.Millisecond, "the drained node holds no replica")
	for _, st := range describe(t, ctx, cl, topic).GetPartitions() {
		require.NotContains(t, st.GetReplicas(), n3)
	}

	stopProducing()
	wg.Wait()
	require.NoError(t, live.Close(ctx))
	require.NoError(t, p.Close(ctx))
	liveMu.Lock()
	t.Logf("live producer: %d acknowledged, %d failed", liveAcked, liveFailed)
	require.Positive(t, liveAcked)
	liveMu.Unlock()

	waitFullISR(t, ctx, cl, topic)
	waitReplicaDirs(t, ctx, c, cl, topic)
	checkReplicasIdentical(t, ctx, c, cl, topic, partitions)
	checkLogEnds(t, ctx, c, cl, topic)
	read := readValues(t, ctx, cl, topic, partitions)
	lost := 0
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		var part int32
		var off int64
		fmt.Sscanf(k.(string), "%d/%d", &part, &off)
		if read[part][off] != v.(string) {
			lost++
		}
		return true
	})
	require.Zero(t, lost, "acknowledged records lost (of %d)", n)
	t.Logf("%d acknowledged records all read back; test took %v", n, time.Since(began).Round(time.Millisecond))
}

// plannedPartitionJSON mirrors the CLI's plan entries.
type plannedPartitionJSON struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
}

type planJSON struct {
	Version    int                    `json:"version"`
	Partitions []plannedPartitionJSON `json:"partitions"`
}

// planFromOutput returns the JSON line after the header starting with title.
func planFromOutput(t *testing.T, out, title string) planJSON {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, title) && i+1 < len(lines) {
			var p planJSON
			require.NoError(t, json.Unmarshal([]byte(lines[i+1]), &p))
			return p
		}
	}
	t.Fatalf("no %q plan in:\n%s", title, out)
	return planJSON{}
}

func writePlanFile(t *testing.T, path string, p planJSON) {
	b, err := json.Marshal(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// waitReplicaDirs waits until only a partition's replicas have its
// directory (a dropped replica is deleted after the move).
func waitReplicaDirs(t *testing.T, ctx context.Context, c *devcluster.Cluster, cl *client.Client, topic string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, st := range describe(t, ctx, cl, topic).GetPartitions() {
			for _, node := range c.StorageNodes() {
				_, err := os.Stat(filepath.Join(node.DataDir, "logs", fmt.Sprintf("%s-%d", topic, st.GetPartition())))
				if (err == nil) != slices.Contains(st.GetReplicas(), node.NodeID) {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "old replicas deleted")
}

// checkLogEnds compares every replica's log end offset as the replica
// reports it over gRPC (DescribeReplicas).
func checkLogEnds(t *testing.T, ctx context.Context, c *devcluster.Cluster, cl *client.Client, topic string) {
	t.Helper()
	for _, st := range describe(t, ctx, cl, topic).GetPartitions() {
		ends := map[int32]int64{}
		for _, id := range st.GetReplicas() {
			conn, err := cl.Conn(nodeByID(c, id).Addr)
			require.NoError(t, err)
			resp, err := replicationv1.NewReplicationServiceClient(conn).DescribeReplicas(ctx, &replicationv1.DescribeReplicasRequest{
				Partitions: []*commonv1.TopicPartition{{Topic: topic, Partition: st.GetPartition()}}})
			require.NoError(t, err)
			require.Len(t, resp.GetReplicas(), 1)
			ends[id] = resp.GetReplicas()[0].GetLogEndOffset()
		}
		for id, e := range ends {
			require.Equal(t, ends[st.GetReplicas()[0]], e, "partition %d: log end of node %d (%v)", st.GetPartition(), id, ends)
		}
	}
}

// readValues reads every partition from the start to its end: offset to value.
func readValues(t *testing.T, ctx context.Context, cl *client.Client, topic string, partitions int32) map[int32]map[int64]string {
	t.Helper()
	out := map[int32]map[int64]string{}
	ends := map[int32]int64{}
	for p := range partitions {
		ends[p] = latestOffset(t, ctx, cl, topic, p)
		out[p] = map[int64]string{}
	}
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	require.NoError(t, k.AssignTopic(ctx, topic))
	for {
		done := true
		for p, end := range ends {
			if k.Position(client.TopicPartition{Topic: topic, Partition: p}) < end {
				done = false
			}
		}
		if done {
			return out
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		recs, err := k.Poll(pctx)
		cancel()
		require.NoError(t, err, "reading back")
		for _, r := range recs {
			out[r.Partition][r.Offset] = string(r.Value)
		}
	}
}
