package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
)

// isrLagTime is replica.lag.time.max.ms for TestISRStableOnIdlePartitions,
// short so that seconds of idling span several lag times.
const isrLagTime = 2 * time.Second

// partitionISR is what the controller says of one partition.
type partitionISR struct {
	leader, leaderEpoch, partitionEpoch int32
	isr                                 []int32
}

func describeISR(t *testing.T, ctx context.Context, cl *client.Client, topic string) map[int32]partitionISR {
	t.Helper()
	d, err := cl.DescribeTopics(ctx, topic)
	require.NoError(t, err)
	out := map[int32]partitionISR{}
	for _, p := range d.GetTopics()[0].GetPartitions() {
		isr := slices.Clone(p.GetIsr())
		slices.Sort(isr)
		out[p.GetPartition()] = partitionISR{leader: p.GetLeaderId(), leaderEpoch: p.GetLeaderEpoch(), partitionEpoch: p.GetPartitionEpoch(), isr: isr}
	}
	return out
}

// An idle RF=3 topic with min.insync.replicas=2 keeps its ISR and partition
// epochs over many replica.lag.time.max.ms (2 s here), idle and with a
// trickle of one acks=all record every 3 s (more than the lag time apart):
// a follower that keeps fetching at the log end is in sync whether or not
// data arrives. A follower that stops fetching (SIGSTOP, shorter than its
// session) still leaves the ISR after the lag time, and rejoins after.
func TestISRStableOnIdlePartitions(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: []string{
		"--storage.replica-lag-time-max=" + isrLagTime.String(),
		// The paused follower must leave the ISR for lagging, not by
		// losing its session.
		"--controller.session-timeout=30s",
	}})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, partitions = "idle", int32(3)
	_, err := cl.CreateTopic(ctx, topic, partitions, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)
	waitFullISR(t, ctx, cl, topic)
	start := describeISR(t, ctx, cl, topic)
	t.Logf("after creation: %+v", start)

	// watch samples the partitions for d and fails at the first change.
	watch := func(d time.Duration, what string) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			now := describeISR(t, ctx, cl, topic)
			require.Equal(t, start, now, "%s: ISR or partition epoch changed", what)
		}
	}
	watch(15*time.Second, "idle for 15 s")

	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	defer func() { require.NoError(t, p.Close(ctx)) }()
	for i := range 4 {
		for part := range partitions {
			_, err := p.ProduceSync(ctx, &client.Record{Topic: topic, Partition: part, Value: []byte(strconv.Itoa(i))})
			require.NoError(t, err, "acks=all with min.insync.replicas=2 on an RF=3 partition")
		}
		watch(3*time.Second, fmt.Sprintf("trickle, after record %d", i))
	}

	// Pause a node: where it follows, it leaves the ISR after the lag time
	// and stays out while paused.
	victim := c.StorageNodes()[0]
	var followed []int32
	for part, st := range start {
		if st.leader != victim.NodeID {
			followed = append(followed, part)
		}
	}
	require.NotEmpty(t, followed)
	require.NoError(t, victim.Pause())
	paused := time.Now()
	require.Eventually(t, func() bool {
		now := describeISR(t, ctx, cl, topic)
		for _, part := range followed {
			if slices.Contains(now[part].isr, victim.NodeID) {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "a paused follower leaves the ISR")
	t.Logf("paused node %d left the ISR of partitions %v after %v", victim.NodeID, followed, time.Since(paused).Round(100*time.Millisecond))
	out := describeISR(t, ctx, cl, topic)
	for end := time.Now().Add(3 * isrLagTime); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		require.Equal(t, out, describeISR(t, ctx, cl, topic), "the ISR stays put while the follower is paused")
	}
	require.NoError(t, victim.Resume())
	waitFullISR(t, ctx, cl, topic)
}
