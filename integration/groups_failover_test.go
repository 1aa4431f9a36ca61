package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
)

// Group coordinators under process faults: SIGKILL of the node that
// coordinates groups while members commit, coordinators in processes of
// their own that die and come back, and writes to __consumer_offsets from
// anyone but the partition's current coordinator.

const (
	gfoOffsetsTopic = "__consumer_offsets"
	// gfoOffsetsPartitions is the server's default
	// group.offsets-topic-partitions.
	gfoOffsetsPartitions = 50
)

// gfoArgs let the controller notice a dead or paused process within 3 s,
// start rebalances at once and allow the members' short sessions.
var gfoArgs = append([]string{"--group.initial-rebalance-delay=0s", "--group.min-session-timeout=1s"}, fastSessions...)

// gfoAck is one acknowledged commit: offset was committed for every
// partition in tps.
type gfoAck struct {
	group  string
	offset int64
	tps    []client.TopicPartition
	gen    int32
	at     time.Time
	took   time.Duration
}

// gfoHistory is every commit the members sent and which were acknowledged.
type gfoHistory struct {
	mu        sync.Mutex
	acks      []gfoAck
	attempted map[string]int64 // group: highest offset sent
	failed    map[string]int   // group: commits not acknowledged
	pollErrs  map[string]int   // group: Poll errors other than its deadline
	lastErr   map[string]string
	polls     []time.Duration // how long each Poll took
}

func newGfoHistory() *gfoHistory {
	return &gfoHistory{attempted: map[string]int64{}, failed: map[string]int{}, pollErrs: map[string]int{}, lastErr: map[string]string{}}
}

func (h *gfoHistory) attempt(group string, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempted[group] = max(h.attempted[group], offset)
}

func (h *gfoHistory) ack(a gfoAck) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acks = append(h.acks, a)
}

func (h *gfoHistory) fail(group string, err error, poll bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if poll {
		h.pollErrs[group]++
	} else {
		h.failed[group]++
	}
	h.lastErr[group] = err.Error()
}

// firstAckAfter returns when the group's first commit acknowledged after t
// was acknowledged.
func (h *gfoHistory) firstAckAfter(group string, t time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.acks {
		if a.group == group && a.at.After(t) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// lastAcked returns, per group and partition, the last acknowledged offset.
func (h *gfoHistory) lastAcked() map[string]map[client.TopicPartition]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[client.TopicPartition]int64{}
	for _, a := range h.acks {
		if out[a.group] == nil {
			out[a.group] = map[client.TopicPartition]int64{}
		}
		for _, tp := range a.tps {
			out[a.group][tp] = a.offset
		}
	}
	return out
}

// gfoCommitter is one classic group member that commits increasing offsets
// of every partition it owns, one synchronous commit after each short Poll,
// on its own goroutine (Poll and commits belong to one goroutine).
type gfoCommitter struct {
	group string
	gc    *client.GroupConsumer
	stop  chan struct{}
	done  chan error
}

func gfoStartCommitter(t *testing.T, cl *client.Client, topic, group string, h *gfoHistory) *gfoCommitter {
	t.Helper()
	gc, err := cl.NewGroupConsumer(client.GroupConsumerConfig{GroupID: group, Topics: []string{topic},
		Assignors: []assign.Assignor{assign.Range()}, SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second,
		Reset: client.ResetEarliest})
	require.NoError(t, err)
	m := &gfoCommitter{group: group, gc: gc, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		next := int64(1)
		for {
			select {
			case <-m.stop:
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				m.done <- gc.Close(ctx)
				cancel()
				return
			default:
			}
			// Short polls keep the commit rate, and with it the
			// resolution of the measured outages, high.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			polled := time.Now()
			_, err := gc.Poll(ctx)
			cancel()
			h.mu.Lock()
			h.polls = append(h.polls, time.Since(polled))
			h.mu.Unlock()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				h.fail(group, err, true)
			}
			tps := gc.Assignment()
			if len(tps) == 0 {
				continue
			}
			offsets := make(map[client.TopicPartition]int64, len(tps))
			for _, tp := range tps {
				offsets[tp] = next
			}
			gen := gc.Generation()
			h.attempt(group, next)
			ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
			sent := time.Now()
			err = gc.CommitSync(ctx, offsets)
			cancel()
			if err == nil {
				h.ack(gfoAck{group: group, offset: next, tps: tps, gen: gen, at: time.Now(), took: time.Since(sent)})
			} else {
				h.fail(group, err, false)
			}
			next++
		}
	}()
	t.Cleanup(func() { _ = m.close() })
	return m
}

// close stops the member and returns Close's error; later calls return nil.
func (m *gfoCommitter) close() error {
	select {
	case <-m.stop:
		return nil
	default:
		close(m.stop)
	}
	return <-m.done
}

// gfoAwait polls cond every 50 ms until it holds or timeout passes; cond
// returns a description of what it still waits for.
func gfoAwait(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		require.True(t, time.Now().Before(deadline), "timed out after %v waiting for %s: %s", timeout, what, state)
		time.Sleep(50 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

// gfoRestart starts a killed process again and waits until it serves. A
// start that fails because the port is still held (a socket of the killed
// process that the kernel has not released yet) is retried.
func gfoRestart(t *testing.T, ctx context.Context, p *devcluster.Process) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		require.NoError(t, p.Start())
		err := p.WaitHealthy(ctx, time.Until(deadline))
		if err == nil {
			return
		}
		require.False(t, p.Running(), "%s: %v", p.Name, err)
		require.True(t, time.Now().Before(deadline), "%s did not start again: %v", p.Name, err)
		t.Logf("%s exited at start (%v); starting it again", p.Name, err)
		time.Sleep(200 * time.Millisecond) // the port is released by the kernel, which nothing here can wait on
	}
}

// gfoFullyReplicated reports whether every partition of the topics has a
// leader and all its replicas in sync, and every storage node is alive.
func gfoFullyReplicated(ctx context.Context, cl *client.Client, topics ...string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	md, err := cl.Metadata(ctx, topics...)
	if err != nil {
		return false, err.Error()
	}
	for _, b := range md.GetBrokers() {
		if slices.Contains(b.GetRoles(), "storage-node") && b.GetState() != commonv1.BrokerState_BROKER_STATE_ALIVE {
			return false, fmt.Sprintf("node %d is %v", b.GetId(), b.GetState())
		}
	}
	for _, ti := range md.GetTopics() {
		if ti.GetError() != nil || len(ti.GetPartitions()) == 0 {
			return false, fmt.Sprintf("topic %s: %v", ti.GetName(), errs.FromProto(ti.GetError()))
		}
		for _, p := range ti.GetPartitions() {
			if p.GetLeaderId() < 0 || len(p.GetIsr()) < len(p.GetReplicas()) {
				return false, fmt.Sprintf("%s-%d leader %d isr %v replicas %v", ti.GetName(), p.GetPartition(), p.GetLeaderId(), p.GetIsr(), p.GetReplicas())
			}
		}
	}
	return true, ""
}

// gfoPlacement asks FindCoordinator for every group.
func gfoPlacement(t *testing.T, ctx context.Context, cl *client.Client, groups []string) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, g := range groups {
		id, _, err := cl.FindCoordinator(ctx, g)
		require.NoError(t, err, "FindCoordinator(%s)", g)
		out[g] = id
	}
	return out
}

// TestGroupCoordinatorFailover SIGKILLs, ten times, the storage node that
// coordinates a chosen group while eight classic groups (one SDK
// GroupConsumer each, generation-fenced CommitSync of increasing offsets of
// every partition of a 12-partition topic) commit continuously, and
// restarts it each time. It measures, per kill, how long the groups
// coordinated by the killed node went without an acknowledged commit, and
// checks that in the end every group's committed offset of every partition
// is the last one acknowledged, or a later one that was sent.
func TestGroupCoordinatorFailover(t *testing.T) {
	sideBySide(t)
	const (
		topic  = "fo-t"
		kills  = 10
		groups = 8
	)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: gfoArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, 12, 3, nil)
	require.NoError(t, err)

	// The group ids differ only in their last character, so Java's
	// hashCode puts them on consecutive partitions of the offsets topic.
	var ids []string
	seen := map[int32]bool{}
	for i := range groups {
		id := fmt.Sprintf("fo-%d", i)
		p := gapiPartitionFor(id, gfoOffsetsPartitions)
		require.False(t, seen[p], "two groups on partition %d", p)
		seen[p] = true
		ids = append(ids, id)
	}
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	_, _, err = cl.FindCoordinator(fctx, ids[0])
	fcancel()
	require.NoError(t, err, "the first FindCoordinator creates the offsets topic")
	gfoAwait(t, 60*time.Second, "the offsets topic with three in-sync replicas", func() (bool, string) {
		return gfoFullyReplicated(ctx, cl, gfoOffsetsTopic, topic)
	})
	md, err := cl.Metadata(ctx, gfoOffsetsTopic)
	require.NoError(t, err)
	require.Len(t, md.GetTopics()[0].GetPartitions(), gfoOffsetsPartitions)
	for _, p := range md.GetTopics()[0].GetPartitions() {
		require.Len(t, p.GetReplicas(), 3, "offsets partition %d", p.GetPartition())
	}

	h := newGfoHistory()
	members := cluster.Client(t, c)
	var committers []*gfoCommitter
	for _, id := range ids {
		committers = append(committers, gfoStartCommitter(t, members, topic, id, h))
	}
	gfoAwait(t, 60*time.Second, "a commit of every group", func() (bool, string) {
		for _, id := range ids {
			if _, ok := h.firstAckAfter(id, time.Time{}); !ok {
				return false, id + " has no acknowledged commit"
			}
		}
		return true, ""
	})

	type killRecord struct {
		victim   int32
		affected []string
		chosen   time.Duration // outage of ids[0]
		worst    time.Duration // longest outage of an affected group
	}
	var records []killRecord
	var allOutages []time.Duration
	for k := range kills {
		placement := gfoPlacement(t, ctx, cl, ids)
		victimID := placement[ids[0]]
		victim := nodeByID(c, victimID)
		require.NotNil(t, victim, "coordinator %d of %s is no process of the cluster", victimID, ids[0])
		require.True(t, victim.Roles.Has(role.StorageNode), "coordinator %d is a storage node", victimID)
		var affected []string
		for _, id := range ids {
			if placement[id] == victimID {
				affected = append(affected, id)
			}
		}
		require.NoError(t, victim.Kill())
		killed := time.Now()
		rec := killRecord{victim: victimID, affected: affected}
		gfoAwait(t, 90*time.Second, fmt.Sprintf("kill %d: commits of %v after node %d died", k+1, affected, victimID), func() (bool, string) {
			for _, id := range affected {
				if _, ok := h.firstAckAfter(id, killed); !ok {
					h.mu.Lock()
					last := h.lastErr[id]
					h.mu.Unlock()
					return false, fmt.Sprintf("%s: last error %s", id, last)
				}
			}
			return true, ""
		})
		for _, id := range affected {
			at, _ := h.firstAckAfter(id, killed)
			d := at.Sub(killed)
			rec.worst = max(rec.worst, d)
			if id == ids[0] {
				rec.chosen = d
			}
			allOutages = append(allOutages, d)
		}
		records = append(records, rec)
		t.Logf("kill %d: node %d, groups %v, commits of %s back after %v, all after %v", k+1, victimID, affected, ids[0],
			rec.chosen.Round(time.Millisecond), rec.worst.Round(time.Millisecond))

		gfoRestart(t, ctx, victim)
		gfoAwait(t, 90*time.Second, fmt.Sprintf("node %d back in every ISR", victimID), func() (bool, string) {
			return gfoFullyReplicated(ctx, cl, gfoOffsetsTopic, topic)
		})
	}

	for _, m := range committers {
		require.NoError(t, m.close(), "closing %s", m.group)
	}
	last := h.lastAcked()
	h.mu.Lock()
	attempted := maps.Clone(h.attempted)
	acked, failed, pollErrs := len(h.acks), sumValues(h.failed), sumValues(h.pollErrs)
	pollP50 := percentile(h.polls, 0.5)
	gens := map[string]map[int32]bool{}
	var latencies []time.Duration
	for _, a := range h.acks {
		latencies = append(latencies, a.took)
		if gens[a.group] == nil {
			gens[a.group] = map[int32]bool{}
		}
		gens[a.group][a.gen] = true
	}
	h.mu.Unlock()
	for _, id := range ids {
		require.NotEmpty(t, last[id], "group %s never had a commit acknowledged", id)
		var tps []client.TopicPartition
		for p := range int32(12) {
			tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
		}
		got, err := cl.FetchOffsets(ctx, id, tps...)
		require.NoError(t, err, "OffsetFetch of %s", id)
		for tp, want := range last[id] {
			o := got[tp].GetOffset()
			require.GreaterOrEqual(t, o, want, "group %s %s-%d: OffsetFetch answers an offset older than the last acknowledged commit", id, tp.Topic, tp.Partition)
			require.LessOrEqual(t, o, attempted[id], "group %s %s-%d: an offset nobody committed", id, tp.Topic, tp.Partition)
		}
	}

	var chosen []time.Duration
	var perKill []string
	for i, r := range records {
		chosen = append(chosen, r.chosen)
		perKill = append(perKill, fmt.Sprintf("%d:n%d/%dg/%v/%v", i+1, r.victim, len(r.affected), r.chosen.Round(time.Millisecond), r.worst.Round(time.Millisecond)))
	}
	genCounts := make([]string, 0, len(ids))
	for _, id := range ids {
		genCounts = append(genCounts, fmt.Sprintf("%s=%d", id, len(gens[id])))
	}
	t.Logf("GROUPS-FAILOVER: kills=%d chosen-group unavailability p50=%v max=%v; every affected group p50=%v max=%v (n=%d); per kill (node/groups affected/chosen/slowest): %s; commits acked=%d (latency p50 %v p99 %v) not-acked=%d poll-errors=%d (Poll p50 %v); generations per group: %s",
		kills, percentile(chosen, 0.5).Round(time.Millisecond), slices.Max(chosen).Round(time.Millisecond),
		percentile(allOutages, 0.5).Round(time.Millisecond), slices.Max(allOutages).Round(time.Millisecond), len(allOutages),
		strings.Join(perKill, " "), acked, percentile(latencies, 0.5).Round(time.Millisecond), percentile(latencies, 0.99).Round(time.Millisecond),
		failed, pollErrs, pollP50.Round(time.Millisecond), strings.Join(genCounts, " "))
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// gfoGroupClient returns a client of the group-coordinator service at addr.
func gfoGroupClient(t *testing.T, cl *client.Client, addr string) groupv1.GroupCoordinatorServiceClient {
	t.Helper()
	conn, err := cl.Conn(addr)
	require.NoError(t, err)
	return groupv1.NewGroupCoordinatorServiceClient(conn)
}

// gfoFindAt asks the node at addr which node coordinates group.
func gfoFindAt(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient, group string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := gc.FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{group}})
	if err != nil {
		return -1, err
	}
	co := resp.GetCoordinators()[0]
	if e := errs.FromProto(co.GetError()); e != nil {
		return -1, e
	}
	return co.GetNodeId(), nil
}

// gfoCommitAt commits offset for tp at the node at addr, as an
// administrator does (generation -1, no member); nil means acknowledged.
func gfoCommitAt(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient, group string, tp client.TopicPartition, offset int64) error {
	resp, err := gc.OffsetCommit(ctx, &groupv1.OffsetCommitRequest{GroupId: group, GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: tp.Topic, Partition: tp.Partition, Offset: offset}}})
	if err != nil {
		return err
	}
	for _, r := range resp.GetResults() {
		if e := errs.FromProto(r.GetError()); e != nil {
			return e
		}
	}
	return nil
}

// gfoFetchAt returns the group's committed offset of tp from the node at
// addr.
func gfoFetchAt(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient, group string, tp client.TopicPartition) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := gc.OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: group, MemberEpoch: -1,
		Partitions: []*commonv1.TopicPartition{{Topic: tp.Topic, Partition: tp.Partition}}})
	if err != nil {
		return -1, err
	}
	if e := errs.FromProto(resp.GetError()); e != nil {
		return -1, e
	}
	for _, p := range resp.GetPartitions() {
		if p.GetTopic() == tp.Topic && p.GetPartition() == tp.Partition {
			if e := errs.FromProto(p.GetError()); e != nil {
				return -1, e
			}
			return p.GetOffset(), nil
		}
	}
	return -1, fmt.Errorf("OffsetFetch answered without %s-%d", tp.Topic, tp.Partition)
}

// gfoConsumer is a classic group member that consumes and auto-commits on
// its own goroutine and keeps polling through errors, counting them.
type gfoConsumer struct {
	gc   *client.GroupConsumer
	led  *ledger
	stop chan struct{}
	done chan error

	mu      sync.Mutex
	errs    int
	lastErr string
}

func gfoStartConsumer(t *testing.T, cl *client.Client, topic, group string) *gfoConsumer {
	t.Helper()
	gc, err := cl.NewGroupConsumer(client.GroupConsumerConfig{GroupID: group, Topics: []string{topic},
		SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, Reset: client.ResetEarliest,
		AutoCommit: true, AutoCommitInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	m := &gfoConsumer{gc: gc, led: newLedger(), stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for {
			select {
			case <-m.stop:
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				m.done <- gc.Close(ctx)
				cancel()
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			recs, err := gc.Poll(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				m.mu.Lock()
				m.errs++
				m.lastErr = err.Error()
				m.mu.Unlock()
			}
			m.led.add(recs)
		}
	}()
	t.Cleanup(func() { _ = m.close() })
	return m
}

func (m *gfoConsumer) close() error {
	select {
	case <-m.stop:
		return nil
	default:
		close(m.stop)
	}
	return <-m.done
}

func (m *gfoConsumer) pollErrors() (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.errs, m.lastErr
}

// TestGroupCoordinatorsAsOwnProcesses runs two group coordinators in
// processes of their own beside three storage nodes. Every group is
// coordinated by one of them and both get a share. When one is SIGKILLed,
// its groups move to the other, which serves their committed offsets; when
// it comes back, exactly the groups rendezvous hashing gives it return, and
// offsets stay intact. A classic group consumer whose coordinator is the
// killed process consumes every record produced before, during and after.
func TestGroupCoordinatorsAsOwnProcesses(t *testing.T) {
	sideBySide(t)
	const (
		topic    = "own-t"
		parts    = 6
		consumed = "own-consumer"
	)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, GroupCoordinators: 2, ExtraArgs: gfoArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, parts, 3, nil)
	require.NoError(t, err)
	coordinators := map[int32]*devcluster.Process{}
	for _, p := range c.Processes() {
		if p.Roles.Has(role.GroupCoordinator) {
			require.False(t, p.Roles.Has(role.StorageNode), "%s runs storage and the group coordinator", p.Name)
			coordinators[p.NodeID] = p
		}
	}
	require.Len(t, coordinators, 2)

	ids := []string{consumed}
	for i := range 15 {
		ids = append(ids, fmt.Sprintf("own-%d", i))
	}
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	_, _, err = cl.FindCoordinator(fctx, ids[0])
	fcancel()
	require.NoError(t, err, "the first FindCoordinator creates the offsets topic")
	gfoAwait(t, 60*time.Second, "the offsets topic with three in-sync replicas", func() (bool, string) {
		return gfoFullyReplicated(ctx, cl, gfoOffsetsTopic, topic)
	})
	before := gfoPlacement(t, ctx, cl, ids)
	share := map[int32]int{}
	for _, id := range ids {
		require.Contains(t, coordinators, before[id], "group %s is coordinated by node %d, not by a coordinator process", id, before[id])
		share[before[id]]++
	}
	require.Len(t, share, 2, "both coordinator processes get groups: %v", share)
	t.Logf("placement before the kill: %v (groups per node %v)", before, share)

	// Member-less groups committed by an administrator, and one group with
	// a consumer.
	tp := func(p int32) client.TopicPartition { return client.TopicPartition{Topic: topic, Partition: p} }
	last := map[string]int64{}
	commitAll := func(offset int64) {
		for _, id := range ids[1:] {
			require.NoError(t, cl.CommitOffsets(ctx, id, map[client.TopicPartition]int64{tp(0): offset, tp(1): offset + 1}), "commit to %s", id)
			last[id] = offset
		}
	}
	checkAll := func(when string) {
		for _, id := range ids[1:] {
			got := committedOffsets(t, cl, id, tp(0), tp(1))
			require.Equal(t, map[client.TopicPartition]int64{tp(0): last[id], tp(1): last[id] + 1}, got, "%s: offsets of %s", when, id)
		}
	}
	commitAll(100)
	cons := gfoStartConsumer(t, cl, topic, consumed)
	produceSpread(t, ctx, cl, topic, parts, 0, 200)
	gfoAwait(t, 60*time.Second, "the consumer to read the first 200 records", func() (bool, string) {
		return cons.led.distinct() == 200, fmt.Sprintf("%d read", cons.led.distinct())
	})

	victimID := before[consumed]
	victim := coordinators[victimID]
	var survivorID int32
	for id := range coordinators {
		if id != victimID {
			survivorID = id
		}
	}
	var moved []string
	for _, id := range ids {
		if before[id] == victimID {
			moved = append(moved, id)
		}
	}
	require.NoError(t, victim.Kill())
	killed := time.Now()

	// Commits of the moved groups succeed again once the survivor has
	// taken their partitions over; the consumer reads on meanwhile.
	produceSpread(t, ctx, cl, topic, parts, 200, 400)
	outages := make([]time.Duration, len(moved))
	var wg sync.WaitGroup
	for i, id := range moved {
		if id == consumed {
			continue
		}
		wg.Go(func() {
			for ctx.Err() == nil && time.Since(killed) < 90*time.Second {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				err := cl.CommitOffsets(cctx, id, map[client.TopicPartition]int64{tp(2): 7})
				ccancel()
				if err == nil {
					outages[i] = time.Since(killed)
					return
				}
			}
		})
	}
	wg.Wait()
	var commitOutages []time.Duration
	for i, id := range moved {
		if id == consumed {
			continue
		}
		require.NotZero(t, outages[i], "commits of %s never succeeded after the kill", id)
		commitOutages = append(commitOutages, outages[i])
	}
	after := gfoPlacement(t, ctx, cl, ids)
	for _, id := range ids {
		require.Equal(t, survivorID, after[id], "group %s after node %d died", id, victimID)
	}
	checkAll("after the kill")
	gfoAwait(t, 60*time.Second, "the consumer to read the 200 records produced after the kill", func() (bool, string) {
		return cons.led.distinct() == 400, fmt.Sprintf("%d read", cons.led.distinct())
	})
	t.Logf("node %d killed: %d groups moved to node %d; commits back after p50 %v max %v",
		victimID, len(moved), survivorID, percentile(commitOutages, 0.5).Round(time.Millisecond), slices.Max(commitOutages).Round(time.Millisecond))

	commitAll(200)
	gfoRestart(t, ctx, victim)
	var returned []string
	gfoAwait(t, 60*time.Second, "the placement rendezvous hashing gives with both coordinators", func() (bool, string) {
		returned = returned[:0]
		for _, id := range ids {
			fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
			got, _, err := cl.FindCoordinator(fctx, id)
			fcancel()
			if err != nil || got != before[id] {
				return false, fmt.Sprintf("%s at node %d (%v), before the kill at %d", id, got, err, before[id])
			}
			if got == victimID {
				returned = append(returned, id)
			}
		}
		return true, ""
	})
	require.NotEmpty(t, returned)
	checkAll("after the restart")
	commitAll(300)
	checkAll("after committing at the returned coordinator")
	produceSpread(t, ctx, cl, topic, parts, 400, 600)
	gfoAwait(t, 60*time.Second, "the consumer to read every record", func() (bool, string) {
		return cons.led.distinct() == 600, fmt.Sprintf("%d read", cons.led.distinct())
	})
	gfoAwait(t, 30*time.Second, "the consumer's commits to cover every record", func() (bool, string) {
		n := committedTotal(t, ctx, cl, consumed, topic, parts)
		return n == 600, fmt.Sprintf("%d committed", n)
	})
	n, lastErr := cons.pollErrors()
	require.NoError(t, cons.close())
	t.Logf("GROUPS-OWN-PROCESSES: %d groups, %v per node; node %d killed: %d moved to node %d, commits back after p50 %v max %v; restarted: %d returned (%v); consumer read 600 records (%d duplicates), %d Poll errors (last: %s)",
		len(ids), share, victimID, len(moved), survivorID, percentile(commitOutages, 0.5).Round(time.Millisecond),
		slices.Max(commitOutages).Round(time.Millisecond), len(returned), returned, len(cons.led.duplicates()), n, lastErr)
}

// gfoProduceInternal produces one record to a partition of the offsets
// topic at its leader, with fence (nil: as a plain client), and returns
// the error of the call or of the partition.
func gfoProduceInternal(ctx context.Context, t *testing.T, cl *client.Client, leaderAddr string, partition int32, fence *storagev1.CoordinatorFence) error {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	require.NoError(t, b.AppendKV(time.Now().UnixMilli(), []byte("not-a-group-key"), []byte("value")))
	batch, err := b.Build()
	require.NoError(t, err)
	conn, err := cl.Conn(leaderAddr)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := storagev1.NewStorageServiceClient(conn).Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 5000, Coordinator: fence,
		Partitions: []*storagev1.ProducePartition{{Topic: gfoOffsetsTopic, Partition: partition, Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}}}})
	if err != nil {
		return errs.From(err)
	}
	if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
		return e
	}
	return nil
}

// gfoLeader returns the process that leads a partition of topic.
func gfoLeader(t *testing.T, ctx context.Context, c *devcluster.Cluster, cl *client.Client, topic string, partition int32) *devcluster.Process {
	t.Helper()
	md, err := cl.Metadata(ctx, topic)
	require.NoError(t, err)
	ps := md.GetTopics()[0].GetPartitions()[partition]
	p := nodeByID(c, ps.GetLeaderId())
	require.NotNil(t, p, "%s-%d has no leader: %v", topic, partition, ps)
	return p
}

// gfoCommittedInLog reads a partition of the offsets topic from its start
// to its high watermark and returns, in log order, every offset committed
// there for group and tp.
func gfoCommittedInLog(t *testing.T, ctx context.Context, cl *client.Client, partition int32, group string, tp client.TopicPartition) []int64 {
	t.Helper()
	otp := client.TopicPartition{Topic: gfoOffsetsTopic, Partition: partition}
	end, err := cl.ListOffset(ctx, gfoOffsetsTopic, partition, client.OffsetLatest)
	require.NoError(t, err)
	cons := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer cons.Close()
	cons.Assign(otp)
	cons.Seek(otp, 0)
	var out []int64
	deadline := time.Now().Add(30 * time.Second)
	for cons.Position(otp) < end {
		require.True(t, time.Now().Before(deadline), "reading %s-%d: at %d of %d", gfoOffsetsTopic, partition, cons.Position(otp), end)
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		recs, err := cons.Poll(pctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("reading %s-%d: %v", gfoOffsetsTopic, partition, err)
			continue
		}
		for _, r := range recs {
			if len(r.Key) < 2 || r.Value == nil || r.Offset >= end {
				continue
			}
			if v := int16(binary.BigEndian.Uint16(r.Key)); v != 0 && v != 1 {
				continue // group metadata and other record kinds
			}
			var k kmsg.OffsetCommitKey
			require.NoError(t, k.ReadFrom(r.Key), "offset commit key at %d", r.Offset)
			if k.Group != group || k.Topic != tp.Topic || k.Partition != tp.Partition {
				continue
			}
			var v kmsg.OffsetCommitValue
			require.NoError(t, v.ReadFrom(r.Value), "offset commit value at %d", r.Offset)
			out = append(out, v.Offset)
		}
	}
	return out
}

// TestInternalTopicWritesAreFenced checks that only a partition's current
// coordinator writes __consumer_offsets: (a) a client's Produce is refused
// as INVALID_REQUEST naming the group coordinator, (b) a Produce with a
// coordinator fence naming a node that does not coordinate the partition
// is refused as NOT_COORDINATOR, neither moving the log end, and (c) a
// coordinator process paused until its partition moved to the other one
// and then resumed acknowledges no commit, and the new coordinator's
// commit is what the group has and what the log ends with.
func TestInternalTopicWritesAreFenced(t *testing.T) {
	sideBySide(t)
	const topic = "fence-t"
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, GroupCoordinators: 2, ExtraArgs: gfoArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, 1, 3, nil)
	require.NoError(t, err)
	tp := client.TopicPartition{Topic: topic, Partition: 0}
	coordinators := map[int32]*devcluster.Process{}
	for _, p := range c.Processes() {
		if p.Roles.Has(role.GroupCoordinator) {
			coordinators[p.NodeID] = p
		}
	}
	require.Len(t, coordinators, 2)
	other := func(id int32) *devcluster.Process {
		for oid, p := range coordinators {
			if oid != id {
				return p
			}
		}
		return nil
	}
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	_, _, err = cl.FindCoordinator(fctx, "fence-a")
	fcancel()
	require.NoError(t, err, "the first FindCoordinator creates the offsets topic")
	gfoAwait(t, 60*time.Second, "the offsets topic with three in-sync replicas", func() (bool, string) {
		return gfoFullyReplicated(ctx, cl, gfoOffsetsTopic, topic)
	})

	t.Run("client-produce", func(t *testing.T) {
		const group = "fence-a"
		require.NoError(t, cl.CommitOffsets(ctx, group, map[client.TopicPartition]int64{tp: 1}))
		pid := gapiPartitionFor(group, gfoOffsetsPartitions)
		end, err := cl.ListOffset(ctx, gfoOffsetsTopic, pid, client.OffsetLatest)
		require.NoError(t, err)
		require.Positive(t, end, "the commit is in partition %d", pid)
		leader := gfoLeader(t, ctx, c, cl, gfoOffsetsTopic, pid)

		err = gfoProduceInternal(ctx, t, cl, leader.Addr, pid, nil)
		require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "a client's Produce to %s-%d: %v", gfoOffsetsTopic, pid, err)
		require.Contains(t, err.Error(), "group-coordinator", "the refusal names who writes the topic")
		t.Logf("client Produce refused: %v", err)

		p := cl.NewProducer(client.ProducerConfig{})
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = p.ProduceSync(pctx, &client.Record{Topic: gfoOffsetsTopic, Partition: pid, Value: []byte("v")})
		pcancel()
		_ = p.Close(ctx) // the produce error is what counts
		require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "the SDK producer's Produce: %v", err)
		t.Logf("SDK producer refused: %v", err)

		after, err := cl.ListOffset(ctx, gfoOffsetsTopic, pid, client.OffsetLatest)
		require.NoError(t, err)
		require.Equal(t, end, after, "the log end of %s-%d moved", gfoOffsetsTopic, pid)
	})

	t.Run("wrong-coordinator-fence", func(t *testing.T) {
		const group = "fence-b"
		require.NoError(t, cl.CommitOffsets(ctx, group, map[client.TopicPartition]int64{tp: 1}))
		coord, _, err := cl.FindCoordinator(ctx, group)
		require.NoError(t, err)
		require.Contains(t, coordinators, coord)
		pid := gapiPartitionFor(group, gfoOffsetsPartitions)
		end, err := cl.ListOffset(ctx, gfoOffsetsTopic, pid, client.OffsetLatest)
		require.NoError(t, err)
		leader := gfoLeader(t, ctx, c, cl, gfoOffsetsTopic, pid)
		for _, impostor := range []int32{other(coord).NodeID, leader.NodeID} {
			err := gfoProduceInternal(ctx, t, cl, leader.Addr, pid, &storagev1.CoordinatorFence{NodeId: impostor})
			require.Equal(t, errs.NotCoordinator, errs.CodeOf(err), "a write fenced by node %d (node %d coordinates %s-%d): %v", impostor, coord, gfoOffsetsTopic, pid, err)
			t.Logf("fence naming node %d refused: %v", impostor, err)
		}
		after, err := cl.ListOffset(ctx, gfoOffsetsTopic, pid, client.OffsetLatest)
		require.NoError(t, err)
		require.Equal(t, end, after, "the log end of %s-%d moved", gfoOffsetsTopic, pid)
	})

	// Three rounds, each with one commit sent to the paused node (it
	// reads it when it resumes) and one sent right after SIGCONT.
	t.Run("deposed-coordinator", func(t *testing.T) {
		const group = "fence-c"
		pid := gapiPartitionFor(group, gfoOffsetsPartitions)
		coordID, _, err := cl.FindCoordinator(ctx, group)
		require.NoError(t, err)
		stale := coordinators[coordID]
		require.NotNil(t, stale, "node %d coordinates %s", coordID, group)
		fresh := other(coordID)
		staleGC, freshGC := gfoGroupClient(t, cl, stale.Addr), gfoGroupClient(t, cl, fresh.Addr)
		t.Cleanup(func() {
			if stale.Paused() {
				_ = stale.Resume() // let the cluster stop cleanly
			}
		})
		commit := func(gc groupv1.GroupCoordinatorServiceClient, offset int64) error {
			// Longer than the 30 s a coordinator keeps retrying a write,
			// so the answer is final when it comes.
			cctx, ccancel := context.WithTimeout(ctx, 40*time.Second)
			defer ccancel()
			return gfoCommitAt(cctx, gc, group, tp, offset)
		}
		require.NoError(t, commit(staleGC, 1), "commit at the coordinator, node %d", stale.NodeID)
		want, refused := int64(1), []int64{}
		for round := range 3 {
			require.NoError(t, stale.Pause())
			moved := gfoAwait(t, 60*time.Second, fmt.Sprintf("%s to move to node %d", group, fresh.NodeID), func() (bool, string) {
				id, err := gfoFindAt(ctx, freshGC, group)
				if err != nil || id != fresh.NodeID {
					return false, fmt.Sprintf("node %d answers %d (%v)", fresh.NodeID, id, err)
				}
				o, err := gfoFetchAt(ctx, freshGC, group, tp)
				if err != nil {
					return false, fmt.Sprintf("OffsetFetch at node %d: %v", fresh.NodeID, err)
				}
				require.Equal(t, want, o, "the new coordinator replayed the commits of the old one")
				return true, ""
			})
			want = int64(100 * (round + 1))
			require.NoError(t, commit(freshGC, want), "commit at the new coordinator, node %d", fresh.NodeID)

			queued, early, late := want+1, make(chan error, 1), want+2
			go func() { early <- commit(staleGC, queued) }()
			require.NoError(t, stale.Resume())
			resumed := time.Now()
			lateErr := commit(staleGC, late)
			lateTook := time.Since(resumed)
			earlyErr := <-early
			t.Logf("round %d: node %d paused, %s moved to node %d after %v; at the resumed node, the queued commit: %v; the commit after SIGCONT (%v): %v",
				round+1, stale.NodeID, group, fresh.NodeID, moved.Round(time.Millisecond), earlyErr, lateTook.Round(time.Millisecond), lateErr)
			require.Error(t, earlyErr, "round %d: the deposed coordinator, node %d, acknowledged the commit sent while it was paused", round+1, stale.NodeID)
			require.Error(t, lateErr, "round %d: the deposed coordinator, node %d, acknowledged the commit sent after SIGCONT", round+1, stale.NodeID)
			refused = append(refused, queued, late)

			// With both coordinators alive, rendezvous hashing gives the
			// partition back to the resumed node, which must serve what
			// the other one committed.
			gfoAwait(t, 60*time.Second, fmt.Sprintf("%s to settle on node %d", group, stale.NodeID), func() (bool, string) {
				for _, gc := range []groupv1.GroupCoordinatorServiceClient{staleGC, freshGC} {
					if id, err := gfoFindAt(ctx, gc, group); err != nil || id != stale.NodeID {
						return false, fmt.Sprintf("answered %d (%v)", id, err)
					}
				}
				_, err := gfoFetchAt(ctx, staleGC, group, tp)
				return err == nil, fmt.Sprint(err)
			})
			o, err := gfoFetchAt(ctx, staleGC, group, tp)
			require.NoError(t, err)
			require.Equal(t, want, o, "round %d: OffsetFetch at the current coordinator, node %d", round+1, stale.NodeID)
		}
		require.Equal(t, map[client.TopicPartition]int64{tp: want}, committedOffsets(t, cl, group, tp))
		inLog := gfoCommittedInLog(t, ctx, cl, pid, group, tp)
		for _, o := range refused {
			require.NotContains(t, inLog, o, "a refused commit is in %s-%d: %v", gfoOffsetsTopic, pid, inLog)
		}
		require.Equal(t, []int64{1, 100, 200, 300}, inLog, "the commits of %s in %s-%d", group, gfoOffsetsTopic, pid)
	})
}
