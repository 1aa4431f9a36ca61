package integration

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/integration/netns"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// A leader's storage node taken off the network (every packet to and from
// it dropped, the producer's included, as docker network disconnect does)
// loses its partitions to the other replicas once its session expires, and
// an acks=all producer that was writing to it goes on writing to the new
// leader while the node is still cut off: the producer does not wait for
// the heal.
func TestProducerMovesOffDisconnectedLeader(t *testing.T) {
	const topic = "disconnect"
	net, c, cl, ctx := startCutCluster(t, topic)
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	var mu sync.Mutex
	var acks []time.Time
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		produceEvery20ms(pctx, p, topic, func(r client.Result) {
			if r.Err == nil {
				mu.Lock()
				acks = append(acks, time.Now())
				mu.Unlock()
			}
		})
	})
	defer func() { stop(); wg.Wait(); _ = p.Close(context.Background()) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(acks) > 50 },
		30*time.Second, 50*time.Millisecond, "the producer writes before the cut")

	cutAt, movedAt, healAt := cutLeader(t, ctx, net, c, cl, topic, nil)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acks[len(acks)-1].After(healAt.Add(2 * time.Second))
	}, 60*time.Second, 100*time.Millisecond, "the producer writes after the heal")

	mu.Lock()
	during, firstAfter, longest := gaps(acks, cutAt, movedAt, healAt)
	mu.Unlock()
	if !firstAfter.IsZero() {
		t.Logf("+%v: first record acknowledged after the cut (past the ones in flight)", firstAfter.Sub(cutAt).Round(time.Millisecond))
	}
	t.Logf("longest stall %v; %d records acknowledged during the %v cut", longest.Round(time.Millisecond), during, cutDuration)
	require.False(t, movedAt.IsZero(), "the controller moved the leader off the disconnected node")
	require.Positive(t, during, "records acknowledged by the new leader while the old one was cut off")
}

// A consumer following a partition whose leader is taken off the network
// goes on reading from the new leader while the old one is still cut off:
// its fetch stream to the old leader is silent (follow streams send
// nothing while there is nothing new), so it is the consumer's metadata
// check that moves it, not the heal. So does a consumer assigned the
// partition after the cut, which must first find its starting offset and
// begins by asking the old leader.
func TestConsumerMovesOffDisconnectedLeader(t *testing.T) {
	const topic = "disconnect-consume"
	net, c, cl, ctx := startCutCluster(t, topic)

	// The consumer has a client of its own, so its metadata is its own.
	k := slowKeepaliveClient(t, c).NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	k.Assign(client.TopicPartition{Topic: topic, Partition: 0})
	var mu sync.Mutex
	var reads []time.Time
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for pctx.Err() == nil {
			recs, _ := k.Poll(pctx) // errors are retried inside; the gaps tell
			now := time.Now()
			mu.Lock()
			for range recs {
				reads = append(reads, now)
			}
			mu.Unlock()
		}
	})
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	wg.Go(func() { produceEvery20ms(pctx, p, topic, nil) })
	defer func() { stop(); wg.Wait(); _ = p.Close(context.Background()) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(reads) > 50 },
		30*time.Second, 50*time.Millisecond, "the consumer reads before the cut")

	var lateReads []time.Time
	cutAt, movedAt, healAt := cutLeader(t, ctx, net, c, cl, topic, func() {
		// Assigned once the leader is cut off: it must first find its
		// starting offset, and begins by asking the old leader.
		late := slowKeepaliveClient(t, c).NewConsumer(client.ConsumerConfig{Reset: client.ResetLatest})
		t.Cleanup(late.Close)
		late.Assign(client.TopicPartition{Topic: topic, Partition: 0})
		wg.Go(func() {
			for pctx.Err() == nil {
				recs, _ := late.Poll(pctx)
				now := time.Now()
				mu.Lock()
				for range recs {
					lateReads = append(lateReads, now)
				}
				mu.Unlock()
			}
		})
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reads[len(reads)-1].After(healAt.Add(2 * time.Second))
	}, 60*time.Second, 100*time.Millisecond, "the consumer reads after the heal")

	mu.Lock()
	lateDuring := 0
	for _, r := range lateReads {
		if r.Before(healAt) {
			lateDuring++
		}
	}
	if len(lateReads) > 0 {
		t.Logf("+%v: first record read by the consumer assigned after the cut", lateReads[0].Sub(cutAt).Round(time.Millisecond))
	}
	during, firstAfter, longest := gaps(reads, cutAt, movedAt, healAt)
	mu.Unlock()
	if !firstAfter.IsZero() {
		t.Logf("+%v: first record read after the cut", firstAfter.Sub(cutAt).Round(time.Millisecond))
	}
	t.Logf("longest gap between reads %v; %d records read during the %v cut", longest.Round(time.Millisecond), during, cutDuration)
	require.False(t, movedAt.IsZero(), "the controller moved the leader off the disconnected node")
	require.Positive(t, during, "records read from the new leader while the old one was cut off")
	require.Positive(t, lateDuring, "records read by the consumer assigned after the cut while the old leader was cut off")
}

// slowKeepaliveClient is a client whose connections notice a dead peer
// only after a minute and a half (the default is 15 s): the consumer test's
// 20 s cut then ends before keepalive could end a fetch stream, so only the
// consumer's own metadata check can move it during the cut.
func slowKeepaliveClient(t *testing.T, c *devcluster.Cluster) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), DialOptions: []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute, Timeout: 30 * time.Second, PermitWithoutStream: true}),
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// startCutCluster starts a controller and 3 storage nodes, each on a host
// of its own network namespace, with the controller's default session
// timeout and heartbeats (as in a deployment), and a one-partition RF 3
// topic with min.insync.replicas 2 whose replicas are all in sync.
func startCutCluster(t *testing.T, topic string) (*netns.Net, *devcluster.Cluster, *client.Client, context.Context) {
	t.Helper()
	net, hosts := namespaces(t, 4)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, Hosts: hosts, Wrap: net.Exec})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, err := cl.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)
	waitFullISR(t, ctx, cl, topic)
	return net, c, cl, ctx
}

// produceEvery20ms produces one record to the topic's partition 0 every
// 20 ms until ctx ends, so a stall shows as a gap between acks or reads.
func produceEvery20ms(ctx context.Context, p *client.Producer, topic string, onAck func(client.Result)) {
	for seq := 0; ctx.Err() == nil; seq++ {
		if p.Produce(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(seq))}, onAck) != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cutDuration is how long cutLeader keeps the leader off the network: the
// leader moves 7-10 s in, which leaves room for a slow machine.
const cutDuration = 20 * time.Second

// cutLeader drops every packet of the host of the topic's partition-0
// leader for cutDuration, runs afterCut (if set) once the cut is made,
// watches the controller's view for the leader moving, and heals. movedAt
// is zero if the leader never moved.
func cutLeader(t *testing.T, ctx context.Context, net *netns.Net, c *devcluster.Cluster, cl *client.Client, topic string, afterCut func()) (cutAt, movedAt, healAt time.Time) {
	t.Helper()
	ls, eps := leaders(t, ctx, cl, topic)
	victim := nodeByID(c, ls[0])
	host := int(victim.NodeID - 1) // process index = host index
	cutAt = time.Now()
	t.Logf("disconnecting node %d (%s), leader of %s-0 in epoch %d, for %v", victim.NodeID, victim.Addr, topic, eps[0], cutDuration)
	net.Disconnect(host)
	if afterCut != nil {
		afterCut()
	}
	for time.Since(cutAt) < cutDuration {
		if movedAt.IsZero() {
			if l, _ := leaders(t, ctx, cl, topic); l[0] != victim.NodeID && l[0] >= 0 {
				movedAt = time.Now()
				t.Logf("+%v: the controller moved the leader to node %d", movedAt.Sub(cutAt).Round(time.Millisecond), l[0])
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	healAt = time.Now()
	net.Heal(host)
	t.Logf("+%v: healed", healAt.Sub(cutAt).Round(time.Millisecond))
	return cutAt, movedAt, healAt
}

// gaps reads the times at which records were acknowledged or read:
// how many came between the leader's move and the heal (from the new
// leader, since the cut-off one can answer nothing), the first more than
// a second after the cut (past those in flight), and the longest gap
// after the cut.
func gaps(times []time.Time, cutAt, movedAt, healAt time.Time) (during int, firstAfter time.Time, longest time.Duration) {
	for i, a := range times {
		if !movedAt.IsZero() && a.After(movedAt) && a.Before(healAt) {
			during++
		}
		if firstAfter.IsZero() && a.After(cutAt.Add(time.Second)) {
			firstAfter = a
		}
		if i > 0 && a.After(cutAt) {
			longest = max(longest, a.Sub(times[i-1]))
		}
	}
	return during, firstAfter, longest
}
