package integration

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// The consumer-group benchmarks run on real processes and take minutes, so
// they are benchmarks (plain `go test` never runs them) and skip under
// -short. `make bench-groups` runs them; docs/performance.md ("Consumer
// groups") says how and what they gave. Every figure is a median over
// benchRounds rounds; the variants of one round run back to back, in an
// order that rotates from round to round, so their ratios come from the
// same minutes of the same machine.
var (
	benchRounds         = flag.Int("groups.rounds", 3, "rounds of each consumer-group benchmark; figures are medians over them")
	benchCatchUpRecords = flag.Int("groups.catchup-records", 1_000_000, "1 KiB records the catch-up benchmark reads")
)

// benchArgs apply to every process of the group benchmarks: rebalances
// start at once (the 3 s initial rebalance delay exists to gather the first
// members of an empty group, and would only add a constant to the first
// join), and info logs, because the harness's debug logs cost CPU on a
// 2-core machine with 900 partitions.
var benchArgs = []string{"--group.initial-rebalance-delay=0", "--log.level=info"}

// The rebalance scenario of KIP-848's anchor: 10 members consume 900
// partitions and an 11th joins.
const (
	rebalanceTopics     = 9
	rebalancePartitions = 100
	rebalanceMembers    = 10
	// trickleRate is records per second spread over the 900 partitions, so
	// that every member keeps consuming and a pause shows as a gap.
	trickleRate = 600
)

// rebalanceVariant is one rebalance protocol on one cluster.
type rebalanceVariant struct {
	name      string
	protocol  client.GroupProtocol
	assignors []assign.Assignor
	// fast selects the cluster whose consumer-protocol heartbeat interval
	// is 500 ms rather than the default 5 s.
	fast bool
	// perTopic: the assignor balances each topic on its own (range), so
	// a member's total may exceed another's by one per topic.
	perTopic bool
	// heartbeat is the longest a member may go without hearing of a
	// rebalance: the client's heartbeat (classic, set in the member's
	// config) or the coordinator's interval (consumer protocol).
	heartbeat time.Duration
}

var rebalanceVariants = []rebalanceVariant{
	{name: "classic-eager-range", protocol: client.GroupProtocolClassic, assignors: []assign.Assignor{assign.Range()}, perTopic: true, heartbeat: 3 * time.Second},
	{name: "classic-cooperative-sticky", protocol: client.GroupProtocolClassic, assignors: []assign.Assignor{assign.CooperativeSticky()}, heartbeat: 3 * time.Second},
	// The classic protocol with a 500 ms client heartbeat, to compare with
	// the consumer protocol at the same interval.
	{name: "classic-eager-range-hb500ms", protocol: client.GroupProtocolClassic, assignors: []assign.Assignor{assign.Range()}, perTopic: true, heartbeat: 500 * time.Millisecond},
	{name: "classic-coop-sticky-hb500ms", protocol: client.GroupProtocolClassic, assignors: []assign.Assignor{assign.CooperativeSticky()}, heartbeat: 500 * time.Millisecond},
	{name: "consumer-uniform-hb5s", protocol: client.GroupProtocolConsumer, heartbeat: 5 * time.Second},
	{name: "consumer-uniform-hb500ms", protocol: client.GroupProtocolConsumer, fast: true, heartbeat: 500 * time.Millisecond},
}

// rebalanceResult is what one round of one variant measured.
type rebalanceResult struct {
	// settle is from the new member's first Poll until the last change of
	// any member's assignment before the group reached its target.
	settle time.Duration
	// firstGain is from the join until the new member owned a partition.
	firstGain time.Duration
	// stopped counts the original members that owned nothing at some point.
	stopped int
	// revoked is the partitions each original member gave up.
	revoked []int
	// maxGap is, per original member, the longest it went without records
	// during the rebalance; baseGap the same over baselineWindow before the
	// join, for comparison.
	maxGap, baseGap []time.Duration
	// revokedAt is, per original member that gave up partitions, when it
	// did, from the join: when it heard of the rebalance.
	revokedAt []time.Duration
	// load is /proc/loadavg's 1-minute figure at the join.
	load string
	// pollErrs are the errors Poll returned to any member during the round.
	pollErrs []string
	// changes counts assignment callbacks with partitions, over all members.
	changes int
	// minOwned, maxOwned are the smallest and largest final assignments.
	minOwned, maxOwned int
}

// BenchmarkRebalance measures a group of 10 consumers on 9 topics of 100
// partitions when an 11th member joins, for classic eager (range), classic
// cooperative-sticky and the consumer protocol (uniform, with the default
// 5 s heartbeat interval and with 500 ms). One invocation is the whole
// experiment (benchRounds rounds of every variant); b.N is not used.
func BenchmarkRebalance(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real processes and runs for minutes")
	}
	// Two one-process clusters (every role, one storage node, RF 1): the
	// consumer-protocol heartbeat interval is a server setting.
	slow := cluster.Start(b, cluster.Options{Combined: true, ExtraArgs: benchArgs})
	fast := cluster.Start(b, cluster.Options{Combined: true,
		ExtraArgs: append(slices.Clone(benchArgs), "--group.consumer-heartbeat-interval=500ms")})
	var topics []string
	for i := range rebalanceTopics {
		topics = append(topics, fmt.Sprintf("rebalance-%d", i))
	}
	stopTrickles := make([]func(), 0, 2)
	for _, c := range []*devcluster.Cluster{slow, fast} {
		cl := cluster.Client(b, c)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, topic := range topics {
			_, err := cl.CreateTopic(ctx, topic, rebalancePartitions, 1, nil)
			require.NoError(b, err)
		}
		cancel()
		stopTrickles = append(stopTrickles, startTrickle(b, cl, topics))
	}
	defer func() {
		for _, stop := range stopTrickles {
			stop()
		}
	}()

	results := map[string][]rebalanceResult{}
	for round := range *benchRounds {
		for i := range rebalanceVariants {
			v := rebalanceVariants[(i+round)%len(rebalanceVariants)]
			c := slow
			if v.fast {
				c = fast
			}
			r := runRebalance(b, c, topics, v, fmt.Sprintf("rebalance-%s-%d", v.name, round))
			slices.Sort(r.revokedAt)
			b.Logf("round %d %-27s load %s  settle %6.3fs  new member's first partition %6.3fs  stopped %2d/%d  revoked per member %v at %v after the join  longest gap without records per member %v (%v in %v before the join)  final %d-%d partitions per member, %d assignment changes",
				round, v.name, r.load, r.settle.Seconds(), r.firstGain.Seconds(), r.stopped, rebalanceMembers, r.revoked, roundDurations(r.revokedAt),
				roundDurations(r.maxGap), roundDurations(r.baseGap), baselineWindow, r.minOwned, r.maxOwned, r.changes)
			for _, e := range r.pollErrs {
				b.Logf("round %d %s: Poll returned: %s", round, v.name, e)
			}
			results[v.name] = append(results[v.name], r)
		}
	}
	b.Logf("medians over %d rounds:", *benchRounds)
	for _, v := range rebalanceVariants {
		rs := results[v.name]
		settle := medianOf(rs, func(r rebalanceResult) float64 { return r.settle.Seconds() })
		first := medianOf(rs, func(r rebalanceResult) float64 { return r.firstGain.Seconds() })
		stopped := medianOf(rs, func(r rebalanceResult) float64 { return float64(r.stopped) })
		revoked := medianOf(rs, func(r rebalanceResult) float64 { return float64(sum(r.revoked)) / float64(len(r.revoked)) })
		gap := medianOf(rs, func(r rebalanceResult) float64 { return slices.Max(r.maxGap).Seconds() })
		baseGap := medianOf(rs, func(r rebalanceResult) float64 { return slices.Max(r.baseGap).Seconds() })
		lastRevoke := medianOf(rs, func(r rebalanceResult) float64 {
			if len(r.revokedAt) == 0 {
				return 0
			}
			return slices.Max(r.revokedAt).Seconds()
		})
		errCount := 0
		for _, r := range rs {
			errCount += len(r.pollErrs)
		}
		b.Logf("%-27s settle %6.3fs (runs %v)  first partition of the new member %6.3fs  last original member to revoke %6.3fs  stopped members %.0f  revoked per member %.1f  longest gap %.3fs (%.3fs before the join)  Poll errors in all rounds %d",
			v.name, settle, settles(rs), first, lastRevoke, stopped, revoked, gap, baseGap, errCount)
		b.ReportMetric(settle, v.name+"-settle-s")
		b.ReportMetric(stopped, v.name+"-stopped")
		b.ReportMetric(revoked, v.name+"-revoked/member")
	}
}

// startTrickle produces trickleRate records per second, each to a partition
// of topics drawn at random, until the returned function is called. Random
// rather than in turn: in turn, a member whose partitions come in a block
// of the cycle (range's contiguous shares) gets its records in one burst per
// 1.5 s cycle, which shows as a long gap without any rebalance.
func startTrickle(b *testing.B, cl *client.Client, topics []string) func() {
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksLeader, DisableIdempotence: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		const tick = 10 * time.Millisecond
		per := trickleRate * int(tick) / int(time.Second)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for range per {
				topic, part := topics[rand.IntN(len(topics))], int32(rand.IntN(rebalancePartitions))
				// A failed record only thins the trickle; the benchmark
				// watches assignments, not these records.
				if err := p.Produce(ctx, &client.Record{Topic: topic, Partition: part, Value: []byte("trickle")}, nil); err != nil {
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := p.Close(cctx); err != nil && !errors.Is(err, context.Canceled) {
			b.Logf("closing the trickle producer: %v", err)
		}
	}
}

// watchedMember is a group consumer with its own SDK client whose
// assignment changes and record arrivals are recorded with their times.
type watchedMember struct {
	cl   *client.Client
	gc   *client.GroupConsumer
	stop chan struct{}
	done chan error

	mu      sync.Mutex
	owned   map[client.TopicPartition]bool
	changes []ownChange
	// From windowStart on, lastRecord and maxGap track the longest time
	// without records.
	windowStart, lastRecord time.Time
	maxGap                  time.Duration
	records                 int
	// pollErrs are the errors Poll returned (other than its deadline).
	pollErrs []string
}

// ownChange is one assignment callback.
type ownChange struct {
	at             time.Time
	added, removed int
	ownedAfter     int
}

func startWatchedMember(b *testing.B, c *devcluster.Cluster, cfg client.GroupConsumerConfig) *watchedMember {
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap()})
	require.NoError(b, err)
	m := &watchedMember{cl: cl, owned: map[client.TopicPartition]bool{}, stop: make(chan struct{}), done: make(chan error, 1)}
	cfg.OnAssigned = func(_ context.Context, tps []client.TopicPartition) { m.change(tps, nil) }
	cfg.OnRevoked = func(_ context.Context, tps []client.TopicPartition) { m.change(nil, tps) }
	cfg.OnLost = cfg.OnRevoked
	m.gc, err = cl.NewGroupConsumer(cfg)
	require.NoError(b, err)
	go m.run()
	return m
}

func (m *watchedMember) change(added, removed []client.TopicPartition) {
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tp := range added {
		m.owned[tp] = true
	}
	for _, tp := range removed {
		delete(m.owned, tp)
	}
	m.changes = append(m.changes, ownChange{at: time.Now(), added: len(added), removed: len(removed), ownedAfter: len(m.owned)})
}

// run polls until stopped, as an application does: Poll, rebalance
// callbacks and Close all on one goroutine.
func (m *watchedMember) run() {
	for {
		select {
		case <-m.stop:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			m.done <- m.gc.Close(ctx)
			cancel()
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		recs, err := m.gc.Poll(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			// An application logs a failed Poll and polls again; the
			// benchmark counts them, and a member that cannot recover
			// shows as a group that never settles.
			m.mu.Lock()
			m.pollErrs = append(m.pollErrs, err.Error())
			m.mu.Unlock()
			t := time.NewTimer(100 * time.Millisecond) // retry backoff
			select {
			case <-m.stop:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if len(recs) > 0 {
			m.received(len(recs), time.Now())
		}
	}
}

func (m *watchedMember) received(n int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records += n
	if !m.windowStart.IsZero() {
		m.maxGap = max(m.maxGap, now.Sub(later(m.lastRecord, m.windowStart)))
	}
	m.lastRecord = now
}

// openWindow starts the gap measurement at t0.
func (m *watchedMember) openWindow(t0 time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.windowStart, m.maxGap = t0, 0
}

// closeWindow returns the longest gap without records from t0 to end.
func (m *watchedMember) closeWindow(end time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	gap := m.maxGap
	if end.After(m.lastRecord) {
		gap = max(gap, end.Sub(later(m.lastRecord, m.windowStart)))
	}
	return gap
}

func (m *watchedMember) snapshot() (owned []client.TopicPartition, changes []ownChange, records int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for tp := range m.owned {
		owned = append(owned, tp)
	}
	return owned, slices.Clone(m.changes), m.records
}

func (m *watchedMember) failed() error {
	select {
	case err := <-m.done:
		m.done <- err
		return err
	default:
		return nil
	}
}

// close stops the member and its client.
func (m *watchedMember) close() error {
	close(m.stop)
	err := <-m.done
	if cerr := m.cl.Close(); err == nil {
		err = cerr
	}
	return err
}

// runRebalance runs one round of the scenario on its own group and returns
// what it measured.
func runRebalance(b *testing.B, c *devcluster.Cluster, topics []string, v rebalanceVariant, group string) rebalanceResult {
	cfg := client.GroupConsumerConfig{
		GroupID: group, Topics: topics, Protocol: v.protocol, Assignors: v.assignors,
		AutoCommit: true, Reset: client.ResetLatest,
	}
	if v.protocol == client.GroupProtocolClassic {
		cfg.HeartbeatInterval = v.heartbeat
	}
	var members []*watchedMember
	defer func() {
		// Leave together: closing one at a time would rebalance the rest
		// ten times over.
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Go(func() {
				if err := m.close(); err != nil {
					b.Logf("closing a member of %s: %v", group, err)
				}
			})
		}
		wg.Wait()
	}()
	for range rebalanceMembers {
		members = append(members, startWatchedMember(b, c, cfg))
	}
	total := rebalanceTopics * rebalancePartitions
	awaitSettled(b, 3*time.Minute, "the first 10 members to settle", members, v, total, time.Second)
	awaitMembers(b, time.Minute, "every member to receive records", members, func() bool {
		for _, m := range members {
			if _, _, n := m.snapshot(); n == 0 {
				return false
			}
		}
		return true
	})
	before := make([]int, len(members))
	for i, m := range members {
		_, ch, _ := m.snapshot()
		before[i] = len(ch)
	}
	r := rebalanceResult{baseGap: make([]time.Duration, rebalanceMembers)}
	baseStart := time.Now()
	for _, m := range members {
		m.openWindow(baseStart)
	}
	awaitMembers(b, 2*baselineWindow, "the baseline window", members, func() bool { return time.Since(baseStart) >= baselineWindow })
	baseEnd := time.Now()
	for i, m := range members {
		r.baseGap[i] = m.closeWindow(baseEnd)
	}

	r.load = loadAverage()
	t0 := time.Now()
	for _, m := range members {
		m.openWindow(t0)
	}
	members = append(members, startWatchedMember(b, c, cfg))
	end := awaitSettled(b, 3*time.Minute, "the group of 11 to settle", members, v, total, v.heartbeat+time.Second)

	r.settle, r.minOwned = end.Sub(t0), total
	for _, m := range members {
		m.mu.Lock()
		r.pollErrs = append(r.pollErrs, m.pollErrs...)
		m.mu.Unlock()
	}
	r.revoked, r.maxGap = make([]int, rebalanceMembers), make([]time.Duration, rebalanceMembers)
	for i, m := range members {
		owned, ch, _ := m.snapshot()
		r.minOwned, r.maxOwned = min(r.minOwned, len(owned)), max(r.maxOwned, len(owned))
		if i == rebalanceMembers {
			for _, c := range ch {
				if c.added > 0 {
					r.firstGain = c.at.Sub(t0)
					break
				}
			}
			r.changes += len(ch)
			continue
		}
		stopped := false
		for _, c := range ch[before[i]:] {
			if c.removed > 0 && r.revoked[i] == 0 {
				r.revokedAt = append(r.revokedAt, c.at.Sub(t0))
			}
			r.revoked[i] += c.removed
			stopped = stopped || c.ownedAfter == 0
		}
		if stopped {
			r.stopped++
		}
		r.changes += len(ch) - before[i]
		r.maxGap[i] = m.closeWindow(end)
	}
	return r
}

// baselineWindow is how long gaps between records are watched before the
// join, to compare the gaps during the rebalance with.
const baselineWindow = 5 * time.Second

// loadAverage returns the 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// awaitSettled waits until the members' assignments cover every partition
// once, every member owns some, the split is as even as the assignor makes
// it, and nothing changed for quiet. It returns the time of the last change.
func awaitSettled(b *testing.B, timeout time.Duration, what string, members []*watchedMember, v rebalanceVariant, total int, quiet time.Duration) time.Time {
	var last time.Time
	awaitMembers(b, timeout, what, members, func() bool {
		last = time.Time{}
		owner := map[client.TopicPartition]bool{}
		counts := make([]int, len(members))
		perTopic := make([]map[string]int, len(members))
		for i, m := range members {
			owned, ch, _ := m.snapshot()
			if len(owned) == 0 {
				return false
			}
			if len(ch) > 0 && ch[len(ch)-1].at.After(last) {
				last = ch[len(ch)-1].at
			}
			counts[i] = len(owned)
			perTopic[i] = map[string]int{}
			for _, tp := range owned {
				if owner[tp] {
					return false
				}
				owner[tp] = true
				perTopic[i][tp.Topic]++
			}
		}
		if len(owner) != total || !balanced(counts, perTopic, v.perTopic) {
			return false
		}
		return time.Since(last) >= quiet
	})
	return last
}

// balanced reports whether no member owns more than one partition more
// than another, overall or (perTopic) in every topic.
func balanced(counts []int, perTopic []map[string]int, byTopic bool) bool {
	if !byTopic {
		return slices.Max(counts)-slices.Min(counts) <= 1
	}
	topics := map[string]bool{}
	for _, pt := range perTopic {
		for t := range pt {
			topics[t] = true
		}
	}
	for t := range topics {
		lo, hi := -1, 0
		for _, pt := range perTopic {
			n := pt[t]
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		if hi-lo > 1 {
			return false
		}
	}
	return true
}

func awaitMembers(b *testing.B, timeout time.Duration, what string, members []*watchedMember, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, m := range members {
			require.NoError(b, m.failed(), "a member stopped while waiting for %s", what)
		}
		if time.Now().After(deadline) {
			var desc strings.Builder
			for i, m := range members {
				owned, ch, n := m.snapshot()
				fmt.Fprintf(&desc, "member %d (%s, generation %d): %d partitions, %d changes, %d records\n", i, m.gc.MemberID(), m.gc.Generation(), len(owned), len(ch), n)
			}
			require.FailNow(b, "timed out after "+timeout.String()+" waiting for "+what, desc.String())
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, 0, len(xs))
	for _, x := range xs {
		vs = append(vs, f(x))
	}
	sort.Float64s(vs)
	if len(vs) == 0 {
		return 0
	}
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func settles(rs []rebalanceResult) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.3f", r.settle.Seconds()))
	}
	return strings.Join(parts, " ")
}

func percents(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.1f%%", 100*x))
	}
	return strings.Join(parts, " ")
}

func roundDurations(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// catchUpReader reads the whole pre-filled topic once.
type catchUpReader struct {
	name string
	read func(b *testing.B, cl *client.Client, topic string, group string, want int) catchUpResult
}

// catchUpResult is one reader's timing: total from its start (a group
// consumer's join included) to the last record, and from its first record.
type catchUpResult struct {
	total, fromFirst time.Duration
	// cpu is the benchmark process's CPU time (user and system) during the
	// read: the reader's own cost, which neighbours on a shared machine
	// disturb less than they disturb wall time.
	cpu time.Duration
}

// BenchmarkGroupCatchUp compares one group consumer reading a pre-filled
// 6-partition topic of 1 KiB records with the plain assign-mode consumer
// on the same topic, in the same run. One invocation is the whole
// experiment (benchRounds rounds, readers in rotating order); b.N is not
// used. The records are read from the page cache (the topic was just
// written on a machine with room to spare).
func BenchmarkGroupCatchUp(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real processes and runs for minutes")
	}
	const (
		topic = "catch-up"
		parts = 6
		size  = 1024
	)
	want := *benchCatchUpRecords
	c := cluster.Start(b, cluster.Options{Combined: true, ExtraArgs: benchArgs})
	cl := cluster.Client(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, parts, 1, nil)
	require.NoError(b, err)
	fillStart := time.Now()
	fillTopic(b, ctx, cl, topic, parts, want, size)
	b.Logf("filled %s: %d records of %d B in %.1fs", topic, want, size, time.Since(fillStart).Seconds())

	readers := []catchUpReader{
		{"assign", readAssigned},
		{"group-classic", readGrouped(client.GroupProtocolClassic)},
		{"group-consumer", readGrouped(client.GroupProtocolConsumer)},
	}
	results := map[string][]catchUpResult{}
	// ratios holds each group reader's MB/s over the assign reader's of the
	// same round.
	ratios := map[string][]float64{}
	mb := float64(want) * size / 1e6
	for round := range *benchRounds {
		byName := map[string]catchUpResult{}
		for i := range readers {
			r := readers[(i+round)%len(readers)]
			cpu0 := processCPU(b)
			res := r.read(b, cl, topic, fmt.Sprintf("catch-up-%s-%d", r.name, round), want)
			res.cpu = processCPU(b) - cpu0
			b.Logf("round %d load %s %-15s %7.1f MB/s (%.3fs; %.1f MB/s from the first record; client CPU %.2f s per GB)",
				round, loadAverage(), r.name, mb/res.total.Seconds(), res.total.Seconds(), mb/res.fromFirst.Seconds(), res.cpu.Seconds()*1000/mb)
			results[r.name] = append(results[r.name], res)
			byName[r.name] = res
		}
		for _, r := range readers[1:] {
			ratios[r.name] = append(ratios[r.name], byName["assign"].total.Seconds()/byName[r.name].total.Seconds())
		}
	}
	rate := func(rs []catchUpResult, first bool) float64 {
		return medianOf(rs, func(r catchUpResult) float64 {
			if first {
				return mb / r.fromFirst.Seconds()
			}
			return mb / r.total.Seconds()
		})
	}
	base := rate(results["assign"], false)
	b.ReportMetric(base, "assign-MB/s")
	for _, r := range readers {
		cpu := medianOf(results[r.name], func(c catchUpResult) float64 { return c.cpu.Seconds() * 1000 / mb })
		b.Logf("%-15s median client CPU %.2f s per GB", r.name, cpu)
		b.ReportMetric(cpu, r.name+"-client-CPU-s/GB")
	}
	for _, r := range readers[1:] {
		got := rate(results[r.name], false)
		paired := medianOf(ratios[r.name], func(x float64) float64 { return x })
		b.Logf("%-15s median %.1f MB/s = %.1f %% of assign %.1f MB/s; median of the per-round ratios %.1f %% (rounds %s); from the first record: %.1f against %.1f MB/s",
			r.name, got, 100*got/base, base, 100*paired, percents(ratios[r.name]), rate(results[r.name], true), rate(results["assign"], true))
		b.ReportMetric(100*paired, r.name+"-paired-%-of-assign")
		b.ReportMetric(got, r.name+"-MB/s")
		b.ReportMetric(100*got/base, r.name+"-%-of-assign")
	}
}

// processCPU returns the CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fillTopic produces n records of size bytes round-robin over the topic's
// partitions, in large batches as a bulk load would.
func fillTopic(b *testing.B, ctx context.Context, cl *client.Client, topic string, parts int32, n, size int) {
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksLeader, DisableIdempotence: true, BatchBytes: 256 << 10, MaxRequestBytes: 4 << 20, BufferBytes: 64 << 20})
	value := make([]byte, size)
	var (
		mu    sync.Mutex
		first error
	)
	for i := range n {
		err := p.Produce(ctx, &client.Record{Topic: topic, Partition: int32(i) % parts, Value: value}, func(r client.Result) {
			if r.Err != nil {
				mu.Lock()
				first = cmp.Or(first, r.Err)
				mu.Unlock()
			}
		})
		require.NoError(b, err)
	}
	require.NoError(b, p.Close(ctx))
	require.NoError(b, first, "producing the catch-up topic")
}

// readAssigned reads every partition from offset 0 with the plain
// consumer.
func readAssigned(b *testing.B, cl *client.Client, topic, _ string, want int) catchUpResult {
	start := time.Now()
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	require.NoError(b, k.AssignTopic(context.Background(), topic))
	return drain(b, start, want, k.Poll)
}

// readGrouped reads the topic with one group consumer of a new group,
// committing automatically as Kafka's default does.
func readGrouped(protocol client.GroupProtocol) func(b *testing.B, cl *client.Client, topic, group string, want int) catchUpResult {
	return func(b *testing.B, cl *client.Client, topic, group string, want int) catchUpResult {
		start := time.Now()
		gc, err := cl.NewGroupConsumer(client.GroupConsumerConfig{
			GroupID: group, Topics: []string{topic}, Protocol: protocol, AutoCommit: true, Reset: client.ResetEarliest,
		})
		require.NoError(b, err)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(b, gc.Close(ctx))
		}()
		return drain(b, start, want, gc.Poll)
	}
}

// drain polls until want records arrived.
func drain(b *testing.B, start time.Time, want int, poll func(context.Context) ([]*client.ConsumedRecord, error)) catchUpResult {
	var first time.Time
	got := 0
	deadline := time.Now().Add(5 * time.Minute)
	for got < want {
		require.True(b, time.Now().Before(deadline), "read %d of %d records in 5 minutes", got, want)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs, err := poll(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(b, err)
		}
		if len(recs) > 0 && first.IsZero() {
			first = time.Now()
		}
		got += len(recs)
	}
	end := time.Now()
	require.Equal(b, want, got, "records read")
	return catchUpResult{total: end.Sub(start), fromFirst: end.Sub(first)}
}
