package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// Clients retry what is retriable, within their timeouts, and say at once
// what is not: the caller never retries and never waits on silence (as
// Kafka's clients do with delivery.timeout.ms and default.api.timeout.ms).

// produceValues produces values 0..n-1 (as decimal strings) with acks=all
// and returns those acknowledged.
func produceValues(t *testing.T, ctx context.Context, cl *client.Client, topic string, from, n int) map[string]bool {
	t.Helper()
	p := cl.NewProducer(client.ProducerConfig{DeliveryTimeout: 45 * time.Second})
	defer func() { _ = p.Close(context.Background()) }()
	recs := make([]*client.Record, n)
	for i := range recs {
		recs[i] = &client.Record{Topic: topic, Partition: -1, Key: []byte(strconv.Itoa(from + i)), Value: []byte(strconv.Itoa(from + i))}
	}
	res, err := p.ProduceSync(ctx, recs...)
	require.NoError(t, err, "produce without the caller retrying")
	acked := map[string]bool{}
	for _, r := range res {
		acked[string(r.Record.Value)] = true
	}
	return acked
}

// consumeAll reads a topic from the beginning until every wanted value was
// seen; any error from AssignTopic or Poll is returned.
func consumeAll(ctx context.Context, cl *client.Client, topic string, want map[string]bool) error {
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	if err := k.AssignTopic(ctx, topic); err != nil {
		return fmt.Errorf("assigning %s: %w", topic, err)
	}
	seen := map[string]bool{}
	for missing := len(want); missing > 0; {
		recs, err := k.Poll(ctx)
		if err != nil {
			return fmt.Errorf("poll after %d of %d records: %w", len(want)-missing, len(want), err)
		}
		for _, r := range recs {
			if v := string(r.Value); want[v] && !seen[v] {
				seen[v] = true
				missing--
			}
		}
	}
	return nil
}

// A consumer started at once after a SIGKILL of a storage node that leads
// partitions reads every acknowledged record: the dead leader's partitions
// wait for their new leaders while the others are read.
func TestConsumerStartedRightAfterLeaderKill(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "orders", 6, 3, nil)
	require.NoError(t, err)
	acked := produceValues(t, ctx, cl, "orders", 0, 3000)

	ls, _ := leaders(t, ctx, cl, "orders")
	victim := nodeByID(c, ls[0])
	require.NotNil(t, victim)
	require.NoError(t, victim.Kill())

	fresh, err := client.New(client.Config{Bootstrap: c.Bootstrap()})
	require.NoError(t, err)
	defer fresh.Close()
	pollCtx, pollCancel := context.WithTimeout(ctx, 45*time.Second)
	defer pollCancel()
	require.NoError(t, consumeAll(pollCtx, fresh, "orders", acked), "consume without the caller retrying")
}

// A producer and a consumer started at once after a one-process server
// (every role) restarts succeed: the node refusing connections, then
// answering NODE_NOT_READY, are retried.
func TestClientsStartedRightAfterRestart(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "orders", 3, 1, nil)
	require.NoError(t, err)
	acked := produceValues(t, ctx, cl, "orders", 0, 300)

	p := c.Processes()[0]
	require.NoError(t, p.Kill())
	require.NoError(t, p.Start())

	fresh, err := client.New(client.Config{Bootstrap: c.Bootstrap()})
	require.NoError(t, err)
	defer fresh.Close()
	var wg sync.WaitGroup
	var consumeErr error
	wg.Go(func() { consumeErr = consumeAll(ctx, fresh, "orders", acked) })
	more := produceValues(t, ctx, fresh, "orders", 300, 300)
	wg.Wait()
	require.NoError(t, consumeErr, "consume without the caller retrying")
	require.NoError(t, consumeAll(ctx, fresh, "orders", more))
}

// runCLIErr runs the CLI with the given bootstrap and returns its combined
// output and error; ctx bounds it, so a hang fails the test instead of
// blocking it.
func runCLIErr(ctx context.Context, t *testing.T, bootstrap string, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", bootstrap}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Requests the server refuses for good end the command at once with the
// server's reason, instead of waiting forever.
func TestCLIConsumeShowsNonRetriableErrors(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true})
	bootstrap := strings.Join(c.Bootstrap(), ",")
	runCLI(t, c, "", "topic", "create", "t", "--partitions", "3", "--replication-factor", "1")
	runCLI(t, c, seqLines(10), "produce", "t", "--partition", "1")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown partition", []string{"consume", "t", "--partition", "7"}, []string{"UNKNOWN_TOPIC_OR_PARTITION", "3 partitions", "7"}},
		{"offset out of range", []string{"consume", "t", "--partition", "1", "--offset", "999999999"}, []string{"OFFSET_OUT_OF_RANGE", "999999999", "[0, 10]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Without the fix the command never returns: the context ends it.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := runCLIErr(ctx, t, bootstrap, "", tc.args...)
			require.NoError(t, ctx.Err(), "sluice %s hung; output: %s", strings.Join(tc.args, " "), out)
			require.Error(t, err, out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
		})
	}
}

// With a paused controller or a closed port as the first bootstrap
// address, commands go through the next address instead of waiting on the
// first.
func TestCLIBootstrapSkipsSilentAddresses(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "t", 1, 1, nil)
	require.NoError(t, err)
	d, err := cl.DescribeCluster(ctx)
	require.NoError(t, err)
	var paused, other *devcluster.Process
	for _, p := range c.Controllers() {
		switch {
		case p.NodeID == d.GetControllerId():
			other = p
		case paused == nil:
			paused = p
		}
	}
	require.NotNil(t, paused)
	require.NotNil(t, other)
	free, err := devcluster.FreePorts(1)
	require.NoError(t, err)
	closed := fmt.Sprintf("127.0.0.1:%d", free[0])
	require.NoError(t, paused.Pause())
	defer func() { _ = paused.Resume() }()

	for _, first := range []string{paused.Addr, closed} {
		bootstrap := first + "," + other.Addr
		for _, args := range [][]string{{"topic", "list"}, {"produce", "t"}} {
			// Without the fix a paused first address holds every command
			// for the client's whole request timeout.
			cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
			out, err := runCLIErr(cctx, t, bootstrap, "a\nb\n", args...)
			ccancel()
			require.NoError(t, err, "sluice %s with bootstrap %s: %s", strings.Join(args, " "), bootstrap, out)
		}
	}
}

// A producer to a topic deleted under it fails its records with
// UNKNOWN_TOPIC_OR_PARTITION once metadata confirms the topic is gone,
// not with REQUEST_TIMED_OUT when the delivery timeout ends.
func TestProduceToDeletedTopicFailsWithUnknownTopic(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "gone", 1, 1, nil)
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{DeliveryTimeout: 40 * time.Second})
	defer func() { _ = p.Close(context.Background()) }()
	_, err = p.ProduceSync(ctx, &client.Record{Topic: "gone", Partition: 0, Value: []byte("before")})
	require.NoError(t, err)
	_, err = cl.DeleteTopics(ctx, "gone")
	require.NoError(t, err)

	// The producer still knows the topic, so Produce accepts records; their
	// batches meet the deletion on the leader (the first ones may land
	// before the leader has learned of it).
	for i := 0; ; i++ {
		require.Less(t, i, 100, "records keep being acknowledged on a deleted topic")
		res, err := p.ProduceSync(ctx, &client.Record{Topic: "gone", Partition: 0, Value: []byte("after")})
		if err == nil {
			continue
		}
		require.True(t, errs.Is(res[0].Err, errs.UnknownTopicOrPartition), "got %v", res[0].Err)
		return
	}
}

// A storage node's health follows its standing with the controller: a node
// whose session expired while it was paused is fenced when it resumes, says
// NOT_SERVING until the controller unfences it, then SERVING again.
func TestStorageNodeHealthFollowsFencing(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 1, ExtraArgs: fastSessions})
	node := c.StorageNodes()[0]
	require.NoError(t, node.Pause())
	// Paused past its session: the controller fences it.
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		_, st := brokerEpoch(t, ctx, cl, node.NodeID)
		return st == commonv1.BrokerState_BROKER_STATE_FENCED
	}, 3*sessionTimeout, 50*time.Millisecond)
	require.NoError(t, node.Resume())
	require.Eventually(t, func() bool {
		log, err := os.ReadFile(node.LogPath)
		require.NoError(t, err)
		off := bytes.Index(log, []byte(`msg="component not serving"`))
		return off >= 0 && bytes.Contains(log[off:], []byte(`msg="component serving"`))
	}, 30*time.Second, 100*time.Millisecond, "health went NOT_SERVING while fenced and SERVING once unfenced")
	require.NoError(t, node.WaitHealthy(ctx, 30*time.Second))
}
