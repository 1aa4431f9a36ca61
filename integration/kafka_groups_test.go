package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// Consumer groups over Kafka's wire protocol, with real clients: franz-go's
// kgo with each classic balancer and with the consumer protocol (KIP-848),
// IBM/sarama's ConsumerGroup at two protocol versions, and kadm's group
// administration. One cluster of three storage nodes (each coordinates a
// share of __consumer_offsets, so FindCoordinator's routing is exercised)
// serves every subtest.

// kgGroupArgs make rebalances quick: a short initial delay, sessions as
// short as the clients below ask for, and a fast consumer-protocol
// heartbeat.
var kgGroupArgs = []string{
	"--group.initial-rebalance-delay=200ms", "--group.min-session-timeout=1s",
	"--group.consumer-heartbeat-interval=500ms", "--group.consumer-session-timeout=10s",
}

// kgLedger counts every record a group's members processed, by value.
type kgLedger struct {
	mu   sync.Mutex
	seen map[string]int
	dups []string
}

func newKgLedger() *kgLedger { return &kgLedger{seen: map[string]int{}} }

func (l *kgLedger) add(topic string, partition int32, offset int64, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[value]++; l.seen[value] == 2 {
		l.dups = append(l.dups, fmt.Sprintf("%s (%s-%d@%d)", value, topic, partition, offset))
	}
}

func (l *kgLedger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *kgLedger) duplicates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.dups...)
}

// kgProduce writes n records with values prefix-i over every partition of
// topic (round robin) with a kgo producer, and waits for their acks.
func kgProduce(t *testing.T, c *devcluster.Cluster, topic, prefix string, n int) {
	t.Helper()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBootstrap()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%05d", prefix, i)}
	}
	require.NoError(t, p.ProduceSync(ctx, recs...).FirstErr())
}

// kgTopic creates a topic and waits until a Kafka client sees every
// partition with a leader.
func kgTopic(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client, topic string, partitions int32) {
	adm := kadm.NewClient(kcl)
	t.Helper()
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, partitions, 1, nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		md, err := adm.Metadata(ctx, topic)
		require.NoError(ct, err)
		td, ok := md.Topics[topic]
		require.True(ct, ok)
		require.NoError(ct, td.Err)
		require.Len(ct, td.Partitions, int(partitions))
		for _, p := range td.Partitions {
			require.NoError(ct, p.Err)
			require.GreaterOrEqual(ct, p.Leader, int32(0))
		}
	}, 30*time.Second, 100*time.Millisecond)
}

// kgMember is one kgo group member consuming on its own goroutine: each
// poll's records are recorded and committed before a rebalance may
// revoke them (BlockRebalanceOnPoll), so a partition that moves is picked
// up exactly where its previous owner stopped.
type kgMember struct {
	cl   *kgo.Client
	stop chan struct{}
	done chan struct{}
	err  error
}

func startKgMember(t *testing.T, c *devcluster.Cluster, group, topic string, l *kgLedger, opts ...kgo.Opt) *kgMember {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(c.KafkaBootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond), kgo.RebalanceTimeout(20 * time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	cl, err := kgo.NewClient(append(base, opts...)...)
	require.NoError(t, err)
	m := &kgMember{cl: cl, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) { l.add(r.Topic, r.Partition, r.Offset, string(r.Value)) })
			if recs := fs.Records(); len(recs) > 0 {
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := cl.CommitRecords(cctx, recs...); err != nil && m.err == nil {
					m.err = err
				}
				ccancel()
			}
			cl.AllowRebalance()
		}
	}()
	return m
}

// close stops polling and leaves the group (kgo sends LeaveGroup, or a
// leaving ConsumerGroupHeartbeat).
func (m *kgMember) close() error {
	close(m.stop)
	<-m.done
	m.cl.Close()
	return m.err
}

// kgCheckAssigned waits until the group is stable with n members and every
// partition of topic assigned to exactly one of them, as kadm describes
// it (classic groups: DescribeGroups; consumer groups:
// ConsumerGroupDescribe).
func kgCheckAssigned(t *testing.T, kcl *kgo.Client, group, topic string, partitions, n int, consumerProtocol bool) {
	adm := kadm.NewClient(kcl)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		owners := map[int32]int{}
		members := 0
		if consumerProtocol {
			req := kmsg.NewPtrConsumerGroupDescribeRequest()
			req.Groups = []string{group}
			resp, err := req.RequestWith(ctx, kcl)
			require.NoError(ct, err)
			require.Len(ct, resp.Groups, 1)
			g := resp.Groups[0]
			require.Zero(ct, g.ErrorCode)
			require.Equal(ct, "Stable", g.State)
			members = len(g.Members)
			for _, m := range g.Members {
				for _, tp := range m.Assignment.TopicPartitions {
					for _, p := range tp.Partitions {
						owners[p]++
					}
				}
			}
		} else {
			ds, err := adm.DescribeGroups(ctx, group)
			require.NoError(ct, err)
			d := ds[group]
			require.NoError(ct, d.Err)
			require.Equal(ct, "Stable", d.State)
			members = len(d.Members)
			for _, m := range d.Members {
				ca, ok := m.Assigned.AsConsumer()
				require.True(ct, ok)
				for _, tp := range ca.Topics {
					require.Equal(ct, topic, tp.Topic)
					for _, p := range tp.Partitions {
						owners[p]++
					}
				}
			}
		}
		require.Equal(ct, n, members)
		require.Len(ct, owners, partitions)
		for p, k := range owners {
			require.Equal(ct, 1, k, "partition %d has %d owners", p, k)
		}
	}, 40*time.Second, 200*time.Millisecond)
}

// kgCheckCommitted checks that the group's committed offset of every
// partition is the partition's end offset.
func kgCheckCommitted(t *testing.T, kcl *kgo.Client, group, topic string, total int) {
	adm := kadm.NewClient(kcl)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, ends.Error())
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		offs, err := adm.FetchOffsets(ctx, group)
		require.NoError(ct, err)
		require.NoError(ct, offs.Error())
		sum := int64(0)
		ends.Each(func(e kadm.ListedOffset) {
			o, ok := offs.Lookup(topic, e.Partition)
			require.True(ct, ok, "partition %d has a committed offset", e.Partition)
			require.Equal(ct, e.Offset, o.At, "partition %d", e.Partition)
			sum += o.At
		})
		require.Equal(ct, int64(total), sum)
	}, 20*time.Second, 200*time.Millisecond)
}

// kgRunGroup is the scenario every kgo variant runs: three members share a
// topic, one leaves, the other two take its partitions over, and every
// record is processed exactly once with its offset committed.
func kgRunGroup(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client, name string, consumerProtocol bool, opts ...kgo.Opt) {
	const partitions, perPhase = 6, 120
	topic, group := "kg-"+name, "kg-group-"+name
	kgTopic(t, c, kcl, topic, partitions)
	l := newKgLedger()
	members := make([]*kgMember, 3)
	for i := range members {
		members[i] = startKgMember(t, c, group, topic, l, opts...)
	}
	defer func() {
		for _, m := range members {
			if m != nil {
				_ = m.close()
			}
		}
	}()
	kgCheckAssigned(t, kcl, group, topic, partitions, 3, consumerProtocol)
	kgProduce(t, c, topic, "a", perPhase)
	require.Eventually(t, func() bool { return l.distinct() == perPhase }, 30*time.Second, 50*time.Millisecond,
		"the group consumed %d of %d records", l.distinct(), perPhase)

	require.NoError(t, members[2].close())
	members[2] = nil
	kgCheckAssigned(t, kcl, group, topic, partitions, 2, consumerProtocol)
	kgProduce(t, c, topic, "b", perPhase)
	require.Eventually(t, func() bool { return l.distinct() == 2*perPhase }, 30*time.Second, 50*time.Millisecond,
		"the group consumed %d of %d records", l.distinct(), 2*perPhase)
	for i := range 2 {
		require.NoError(t, members[i].close())
		members[i] = nil
	}
	require.Empty(t, l.duplicates(), "records processed twice")
	kgCheckCommitted(t, kcl, group, topic, 2*perPhase)
}

func TestKafkaGroups(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: kgGroupArgs})
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBootstrap()...))
	require.NoError(t, err)
	t.Cleanup(kcl.Close)

	classic := []struct {
		name     string
		balancer kgo.GroupBalancer
	}{
		{"range", kgo.RangeBalancer()},
		{"roundrobin", kgo.RoundRobinBalancer()},
		{"sticky", kgo.StickyBalancer()},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()},
	}
	for _, b := range classic {
		t.Run("kgo-classic-"+b.name, func(t *testing.T) {
			t.Parallel()
			kgRunGroup(t, c, kcl, b.name, false, kgo.Balancers(b.balancer))
		})
	}
	// kgo v1.22.3 speaks KIP-848 when asked (ServerSideBalancer) and the
	// broker serves ConsumerGroupHeartbeat v1; the sticky balancer asks
	// for the server's "uniform" assignor.
	t.Run("kgo-consumer-protocol", func(t *testing.T) {
		t.Parallel()
		kgRunGroup(t, c, kcl, "kip848", true, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	})
	for _, v := range []sarama.KafkaVersion{sarama.V2_1_0_0, sarama.V3_6_0_0} {
		t.Run("sarama-"+v.String(), func(t *testing.T) {
			t.Parallel()
			kgSarama(t, c, kcl, v)
		})
	}
	t.Run("kadm", func(t *testing.T) {
		t.Parallel()
		kgAdmin(t, c, kcl)
	})
	t.Run("kgo-static-membership", func(t *testing.T) {
		t.Parallel()
		kgStatic(t, c, kcl)
	})
	// One group, two protocols on the wire: an SDK member over gRPC and a
	// kgo member over Kafka's protocol. Classic members agree on "range"
	// (the SDK writes Kafka's ConsumerMemberMetadata, so either can lead);
	// consumer-protocol members are assigned by the server.
	t.Run("mixed-grpc-kafka-classic", func(t *testing.T) {
		t.Parallel()
		kgMixed(t, c, kcl, "classic", client.GroupProtocolClassic, kgo.Balancers(kgo.RangeBalancer()))
	})
	t.Run("mixed-grpc-kafka-consumer-protocol", func(t *testing.T) {
		t.Parallel()
		kgMixed(t, c, kcl, "kip848", client.GroupProtocolConsumer, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	})
}

// kgMixed runs one SDK member and one kgo member in a group: they split the
// partitions, every record is consumed once, and each commits over its own
// protocol into the same group offsets.
func kgMixed(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client, name string, protocol client.GroupProtocol, opts ...kgo.Opt) {
	const partitions, n = 4, 80
	topic, group := "kg-mixed-"+name, "kg-group-mixed-"+name
	kgTopic(t, c, kcl, topic, partitions)
	l := newKgLedger()
	cl := cluster.Client(t, c)
	cfg := client.GroupConsumerConfig{GroupID: group, Topics: []string{topic}, Protocol: protocol, Reset: client.ResetEarliest,
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RebalanceTimeout: 20 * time.Second}
	if protocol == client.GroupProtocolClassic {
		cfg.Assignors = []assign.Assignor{assign.Range()}
	}
	gc, err := cl.NewGroupConsumer(cfg)
	require.NoError(t, err)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				done <- gc.Close(ctx)
				cancel()
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			recs, err := gc.Poll(ctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			for _, r := range recs {
				l.add(r.Topic, r.Partition, r.Offset, string(r.Value))
			}
			if len(recs) > 0 {
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := gc.CommitSync(cctx, nil)
				ccancel()
				if err != nil {
					done <- err
					return
				}
			}
		}
	}()
	m := startKgMember(t, c, group, topic, l, opts...)
	kgCheckAssigned(t, kcl, group, topic, partitions, 2, protocol == client.GroupProtocolConsumer)
	require.Eventually(t, func() bool { return len(gc.Assignment()) > 0 }, 20*time.Second, 50*time.Millisecond,
		"the SDK member owns some partitions")
	kgProduce(t, c, topic, "mixed", n)
	require.Eventually(t, func() bool { return l.distinct() == n }, 30*time.Second, 50*time.Millisecond,
		"the group consumed %d of %d records", l.distinct(), n)
	require.NoError(t, m.close())
	close(stop)
	require.NoError(t, <-done)
	require.Empty(t, l.duplicates())
	kgCheckCommitted(t, kcl, group, topic, n)
}

// kgSaramaHandler records and marks every message; sarama's auto-commit
// commits the marks (and retries a commit that failed).
type kgSaramaHandler struct{ l *kgLedger }

func (kgSaramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (kgSaramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h kgSaramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.l.add(msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
		s.MarkMessage(msg, "")
	}
	return nil
}

// kgSarama runs two sarama ConsumerGroup members over a topic at protocol
// version v (2.1 joins with JoinGroup v3, before KIP-394; 3.6 with v7+).
func kgSarama(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client, v sarama.KafkaVersion) {
	const partitions, n = 4, 100
	name := "sarama-" + v.String()
	topic, group := "kg-"+name, "kg-group-"+name
	kgTopic(t, c, kcl, topic, partitions)
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "kg-sarama"
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	l := newKgLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var groups []sarama.ConsumerGroup
	for range 2 {
		cg, err := sarama.NewConsumerGroup(c.KafkaBootstrap(), group, cfg)
		require.NoError(t, err)
		groups = append(groups, cg)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := cg.Consume(ctx, []string{topic}, kgSaramaHandler{l}); err != nil && ctx.Err() == nil {
					t.Logf("sarama consume: %v", err)
					time.Sleep(100 * time.Millisecond) // back off before joining again, as sarama's own examples do
				}
			}
		}()
		go func() {
			defer wg.Done()
			for err := range cg.Errors() {
				t.Logf("sarama group error: %v", err)
			}
		}()
	}
	kgCheckAssigned(t, kcl, group, topic, partitions, 2, false)
	kgProduce(t, c, topic, "s", n)
	require.Eventually(t, func() bool { return l.distinct() == n }, 30*time.Second, 50*time.Millisecond,
		"sarama's group consumed %d of %d records", l.distinct(), n)
	kgCheckCommitted(t, kcl, group, topic, n)
	cancel()
	for _, cg := range groups {
		require.NoError(t, cg.Close())
	}
	wg.Wait()
	require.Empty(t, l.duplicates())
}

// kgAdmin lists, describes, fetches the offsets of, deletes offsets of and
// deletes groups with kadm.
func kgAdmin(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client) {
	adm := kadm.NewClient(kcl)
	const partitions = 3
	topic, group := "kg-admin", "kg-group-admin"
	kgTopic(t, c, kcl, topic, partitions)
	kgProduce(t, c, topic, "x", 30)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	l := newKgLedger()
	m := startKgMember(t, c, group, topic, l, kgo.ClientID("kg-admin-member"))
	kgCheckAssigned(t, kcl, group, topic, partitions, 1, false)
	require.Eventually(t, func() bool { return l.distinct() == 30 }, 30*time.Second, 50*time.Millisecond)

	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	lg, ok := listed[group]
	require.True(t, ok, "ListGroups asks every node and finds the group on its coordinator: %v", listed.Groups())
	require.Equal(t, "consumer", lg.ProtocolType)
	require.Equal(t, "Stable", lg.State)

	ds, err := adm.DescribeGroups(ctx, group)
	require.NoError(t, err)
	d := ds[group]
	require.NoError(t, d.Err)
	require.Len(t, d.Members, 1)
	require.Equal(t, "kg-admin-member", d.Members[0].ClientID)
	require.NotEmpty(t, d.Members[0].ClientHost)

	dres, err := adm.DeleteGroups(ctx, group)
	require.NoError(t, err)
	require.Error(t, dres[group].Err, "a group with members is not deleted")

	require.NoError(t, m.close())
	kgCheckCommitted(t, kcl, group, topic, 30)

	// Offsets of an empty group can be deleted one partition at a time.
	del := kadm.TopicsSet{}
	del.Add(topic, 0)
	dor, err := adm.DeleteOffsets(ctx, group, del)
	require.NoError(t, err)
	require.NoError(t, dor.Error())
	offs, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	_, has0 := offs.Lookup(topic, 0)
	require.False(t, has0, "the deleted offset is gone")
	o1, has1 := offs.Lookup(topic, 1)
	require.True(t, has1)
	require.Positive(t, o1.At)

	listed, err = adm.ListGroups(ctx, "Empty")
	require.NoError(t, err)
	require.Contains(t, listed.Groups(), group)

	dres, err = adm.DeleteGroups(ctx, group)
	require.NoError(t, err)
	require.NoError(t, dres[group].Err)
	offs, err = adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	require.Empty(t, offs.Sorted(), "the offsets went with the group")
	ds, err = adm.DescribeGroups(ctx, group)
	require.NoError(t, err)
	require.Equal(t, "Dead", ds[group].State)
	names := listed.Groups()
	sort.Strings(names)
	t.Logf("groups listed: %v", names)
}

// kgStatic restarts the leader of a group of static members (KIP-345)
// within its session: it gets its partitions back without a rebalance
// (JoinGroup v9 tells it to skip the assignment, KIP-814), so the other
// member never gives any up.
func kgStatic(t *testing.T, c *devcluster.Cluster, kcl *kgo.Client) {
	const partitions, n = 4, 40
	topic, group := "kg-static", "kg-group-static"
	kgTopic(t, c, kcl, topic, partitions)
	l := newKgLedger()
	var mu sync.Mutex
	revoked, assignedA := 0, map[int32]bool{}
	a := startKgMember(t, c, group, topic, l, kgo.InstanceID("a"), kgo.Balancers(kgo.RangeBalancer()))
	kgCheckAssigned(t, kcl, group, topic, partitions, 1, false)
	b := startKgMember(t, c, group, topic, l, kgo.InstanceID("b"), kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
			mu.Lock()
			revoked++
			mu.Unlock()
		}))
	defer func() { _ = b.close() }()
	kgCheckAssigned(t, kcl, group, topic, partitions, 2, false)
	kgProduce(t, c, topic, "before", n)
	require.Eventually(t, func() bool { return l.distinct() == n }, 30*time.Second, 50*time.Millisecond)

	// A static member does not leave the group when it closes; its
	// successor with the same instance id takes its place.
	mu.Lock()
	revokedBefore := revoked // what b revoked while the group formed
	mu.Unlock()
	require.NoError(t, a.close())
	a = startKgMember(t, c, group, topic, l, kgo.InstanceID("a"), kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, got map[string][]int32) {
			mu.Lock()
			for _, p := range got[topic] {
				assignedA[p] = true
			}
			mu.Unlock()
		}))
	defer func() { _ = a.close() }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(assignedA) == partitions/2
	}, 20*time.Second, 50*time.Millisecond, "the restarted member gets its half back")
	kgProduce(t, c, topic, "after", n)
	require.Eventually(t, func() bool { return l.distinct() == 2*n }, 30*time.Second, 50*time.Millisecond)
	kgCheckAssigned(t, kcl, group, topic, partitions, 2, false)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, revokedBefore, revoked, "the other member gave nothing up: no rebalance")
	require.Empty(t, l.duplicates())
}
