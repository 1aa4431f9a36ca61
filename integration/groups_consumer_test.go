package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// groupArgs make rebalances quick: a short initial rebalance delay and a
// minimum session timeout low enough for the test's members.
var groupArgs = []string{
	"--group.initial-rebalance-delay=300ms", "--group.min-session-timeout=1s",
	"--group.consumer-heartbeat-interval=300ms", "--group.consumer-session-timeout=6s",
}

// groupVariant is one way a group rebalances.
type groupVariant struct {
	name      string
	protocol  client.GroupProtocol
	assignors []assign.Assignor
}

var groupVariants = []groupVariant{
	{"classic-cooperative-sticky", client.GroupProtocolClassic, []assign.Assignor{assign.CooperativeSticky()}},
	{"classic-range", client.GroupProtocolClassic, []assign.Assignor{assign.Range()}},
	{"consumer", client.GroupProtocolConsumer, nil},
}

// ledger counts every record group members returned, by value.
type ledger struct {
	mu   sync.Mutex
	seen map[string]int
	dups []string
}

func newLedger() *ledger { return &ledger{seen: map[string]int{}} }

func (l *ledger) add(recs []*client.ConsumedRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		v := string(r.Value)
		if l.seen[v]++; l.seen[v] == 2 {
			l.dups = append(l.dups, fmt.Sprintf("%s (%s-%d@%d)", v, r.Topic, r.Partition, r.Offset))
		}
	}
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *ledger) duplicates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.dups...)
}

// groupMember runs one group consumer on its own goroutine: Poll, commits
// and Close all happen there, as Kafka's consumer requires.
type groupMember struct {
	gc   *client.GroupConsumer
	stop chan struct{}
	done chan error
}

func startGroupMember(t *testing.T, cl *client.Client, cfg client.GroupConsumerConfig, led *ledger) *groupMember {
	t.Helper()
	gc, err := cl.NewGroupConsumer(cfg)
	require.NoError(t, err)
	m := &groupMember{gc: gc, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for {
			select {
			case <-m.stop:
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				m.done <- gc.Close(ctx)
				cancel()
				return
			default:
			}
			// Short polls, as an application that does other work between
			// them: rebalances must survive Polls that end mid-join.
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			recs, err := gc.Poll(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = gc.Close(ctx) // the Poll error is the one to report
				cancel()
				m.done <- fmt.Errorf("poll: %w", err)
				return
			}
			led.add(recs)
		}
	}()
	t.Cleanup(func() { m.close() })
	return m
}

// close stops the member and returns Close's error (or the Poll error that
// stopped it before); calling it again returns nil.
func (m *groupMember) close() error {
	select {
	case <-m.stop:
		return nil
	default:
		close(m.stop)
	}
	return <-m.done
}

// failed returns the error that stopped the member, if one did.
func (m *groupMember) failed() error {
	select {
	case err := <-m.done:
		m.done <- err
		return err
	default:
		return nil
	}
}

func awaitGroup(t *testing.T, timeout time.Duration, what string, members []*groupMember, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, m := range members {
			require.NoError(t, m.failed(), "a member stopped while waiting for %s", what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; members:\n%s", timeout, what, assignments(members))
		}
		time.Sleep(50 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

// produceSpread produces values prefix-from .. prefix-(to-1), partition i%parts.
func produceSpread(t *testing.T, ctx context.Context, cl *client.Client, topic string, parts int32, from, to int) {
	t.Helper()
	p := cl.NewProducer(client.ProducerConfig{})
	defer func() { _ = p.Close(context.Background()) }()
	recs := make([]*client.Record, 0, to-from)
	for i := from; i < to; i++ {
		recs = append(recs, &client.Record{Topic: topic, Partition: int32(i) % parts, Value: []byte(topic + "-" + strconv.Itoa(i))})
	}
	_, err := p.ProduceSync(ctx, recs...)
	require.NoError(t, err)
}

// split reports whether the members' assignments are disjoint, cover
// every partition, and give each member its even share.
func split(members []*groupMember, parts int) bool {
	owner := map[client.TopicPartition]int{}
	for i, m := range members {
		a := m.gc.Assignment()
		if len(a) != parts/len(members) {
			return false
		}
		for _, tp := range a {
			if _, dup := owner[tp]; dup {
				return false
			}
			owner[tp] = i
		}
	}
	return len(owner) == parts
}

func assignments(members []*groupMember) string {
	var b strings.Builder
	for i, m := range members {
		fmt.Fprintf(&b, "member %d (%s, generation %d): %v\n", i, m.gc.MemberID(), m.gc.Generation(), m.gc.Assignment())
	}
	return b.String()
}

// Group consumers sharing a six-partition topic, for each rebalance
// protocol and with two and three members: in a clean run every record is
// returned exactly once; the partitions are split evenly; a member that
// leaves hands its partitions to the others, which read on from its
// commits; and after every member stopped, a new one resumes at the
// committed offsets.
func TestGroupConsumersShareTopic(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	// The variants use topics and groups of their own and spend most of
	// their time waiting on rebalances and commits: they share the cluster
	// at once.
	for _, v := range groupVariants {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s-%d", v.name, n), func(t *testing.T) {
				t.Parallel()
				testGroupShare(t, cl, v, n)
			})
		}
	}
}

func testGroupShare(t *testing.T, cl *client.Client, v groupVariant, n int) {
	const parts = 6
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("share-%s-%d", v.name, n)
	_, err := cl.CreateTopic(ctx, topic, parts, 1, nil)
	require.NoError(t, err)
	cfg := client.GroupConsumerConfig{
		GroupID: topic, Topics: []string{topic}, Protocol: v.protocol, Assignors: v.assignors,
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RebalanceTimeout: 20 * time.Second,
		AutoCommit: true, AutoCommitInterval: 200 * time.Millisecond, Reset: client.ResetEarliest,
	}
	led := newLedger()
	produceSpread(t, ctx, cl, topic, parts, 0, 600)
	var members []*groupMember
	for range n {
		members = append(members, startGroupMember(t, cl, cfg, led))
	}
	awaitGroup(t, time.Minute, "the first 600 records", members, func() bool { return led.distinct() >= 600 })
	awaitGroup(t, 30*time.Second, "an even split", members, func() bool { return split(members, parts) })
	t.Logf("split:\n%s", assignments(members))

	leaver, rest := members[0], members[1:]
	handed := leaver.gc.Assignment()
	require.NoError(t, leaver.close(), "the leaving member's Close")
	produceSpread(t, ctx, cl, topic, parts, 600, 1200)
	awaitGroup(t, time.Minute, "the remaining members to take over "+fmt.Sprint(handed), rest, func() bool {
		owned := 0
		for _, m := range rest {
			owned += len(m.gc.Assignment())
		}
		return owned == parts && (len(rest) == 1 || split(rest, parts))
	})
	awaitGroup(t, time.Minute, "the next 600 records", rest, func() bool { return led.distinct() >= 1200 })
	t.Logf("after a member left:\n%s", assignments(rest))

	for _, m := range rest {
		require.NoError(t, m.close())
	}
	var tps []client.TopicPartition
	for p := range int32(parts) {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	committed, err := cl.FetchOffsets(ctx, topic, tps...)
	require.NoError(t, err)
	for _, tp := range tps {
		require.Equal(t, int64(200), committed[tp].GetOffset(), "%v: every record read was committed by the members' last commits", tp)
	}

	produceSpread(t, ctx, cl, topic, parts, 1200, 1500)
	late := newLedger()
	again := startGroupMember(t, cl, cfg, late)
	awaitGroup(t, time.Minute, "a new member to read the 300 records produced since", []*groupMember{again}, func() bool { return late.distinct() >= 300 })
	require.NoError(t, again.close())
	for v := range late.seen {
		i, err := strconv.Atoi(strings.TrimPrefix(v, topic+"-"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, i, 1200, "record %s was read again after the restart: it was committed", v)
	}
	require.Equal(t, 300, late.distinct())
	require.Empty(t, late.duplicates())
	require.Empty(t, led.duplicates(), "records returned twice in a clean run")
	require.Equal(t, 1200, led.distinct())
}

// consumeCLI runs `sluice consume` and returns its stdout.
func consumeCLI(t *testing.T, c *devcluster.Cluster, args ...string) []string {
	t.Helper()
	out := runCLI(t, c, "", append([]string{"consume"}, args...)...)
	if out == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// `sluice consume --group` prints what the group has not committed and
// commits what it printed, whether it stops at --max-messages, at
// --timeout or on Ctrl-C; --from-beginning applies only where nothing is
// committed.
func TestConsumeCLIGroupCommitsWhatItPrinted(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	// Cleanup, not defer: the parallel subtests run after this function
	// returns.
	t.Cleanup(cancel)
	// The protocols use topics and groups of their own and spend most of
	// their time in the CLI's --timeout runs: they share the cluster at
	// once.
	for _, proto := range []string{"classic", "consumer"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			topic, group := "cli-"+proto, "cli-group-"+proto
			_, err := cl.CreateTopic(ctx, topic, 3, 1, nil)
			require.NoError(t, err)
			produceSpread(t, ctx, cl, topic, 3, 0, 300)
			base := []string{topic, "--group", group, "--group-protocol", proto}
			printed := map[string]bool{}
			take := func(lines []string) {
				for _, l := range lines {
					require.False(t, printed[l], "%s printed again", l)
					printed[l] = true
				}
			}

			first := consumeCLI(t, c, append(base, "--from-beginning", "--max-messages", "100", "--timeout", "60s")...)
			require.Len(t, first, 100)
			take(first)
			require.Equal(t, int64(100), committedTotal(t, ctx, cl, group, topic, 3), "exactly what was printed is committed")

			// Committed offsets win over --from-beginning.
			second := consumeCLI(t, c, append(base, "--from-beginning", "--max-messages", "50", "--timeout", "60s")...)
			require.Len(t, second, 50)
			take(second)
			require.Equal(t, int64(150), committedTotal(t, ctx, cl, group, topic, 3))

			// Without --max-messages, --timeout ends the run and still
			// commits. Partitions with commits resume there, one without
			// (a partition the first runs' batches did not reach) starts
			// at the earliest offset.
			third := consumeCLI(t, c, append(base, "--from-beginning", "--timeout", "8s")...)
			require.Len(t, third, 150)
			take(third)
			require.Equal(t, int64(300), committedTotal(t, ctx, cl, group, topic, 3))

			// Ctrl-C: the records printed before it are committed.
			produceSpread(t, ctx, cl, topic, 3, 300, 360)
			lines := interruptedConsume(t, c, 60, base...)
			take(lines)
			require.Len(t, printed, 360)
			require.Equal(t, int64(360), committedTotal(t, ctx, cl, group, topic, 3))

			// A new group without --from-beginning starts at the end.
			fresh := consumeCLI(t, c, topic, "--group", group+"-new", "--group-protocol", proto, "--timeout", "5s")
			require.Empty(t, fresh)
		})
	}
}

// committedTotal sums a group's committed offsets over a topic's
// partitions.
func committedTotal(t *testing.T, ctx context.Context, cl *client.Client, group, topic string, parts int32) int64 {
	t.Helper()
	var tps []client.TopicPartition
	for p := range parts {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	got, err := cl.FetchOffsets(ctx, group, tps...)
	require.NoError(t, err)
	var sum int64
	for _, tp := range tps {
		if o := got[tp].GetOffset(); o > 0 {
			sum += o
		}
	}
	return sum
}

// interruptedConsume runs `sluice consume` until it printed want lines,
// then sends SIGINT and returns what it printed.
func interruptedConsume(t *testing.T, c *devcluster.Cluster, want int, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "consume"}, args...)...)
	out := &lockedBuffer{}
	var errOut strings.Builder
	cmd.Stdout, cmd.Stderr = out, &errOut
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(time.Minute)
	for out.lines() < want {
		require.True(t, time.Now().Before(deadline), "printed %d of %d lines; stderr: %s", out.lines(), want, errOut.String())
		time.Sleep(50 * time.Millisecond) // polling interval of a condition with a deadline
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "stderr: %s", errOut.String())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	sort.Strings(lines)
	return lines
}

// lockedBuffer is a stdout sink that can be read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) lines() int { return strings.Count(l.String(), "\n") }

// Members that join one by one, each while the group is reading, take
// partitions over from the commits made as they are revoked: with
// automatic commits too rare to help (one a minute), every record is still
// returned exactly once, for each rebalance protocol.
func TestGroupConsumersJoinOneByOne(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	for _, v := range groupVariants {
		t.Run(v.name, func(t *testing.T) {
			const parts, n, per = 6, 3, 300
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			topic := "one-by-one-" + v.name
			_, err := cl.CreateTopic(ctx, topic, parts, 1, nil)
			require.NoError(t, err)
			cfg := client.GroupConsumerConfig{
				GroupID: topic, Topics: []string{topic}, Protocol: v.protocol, Assignors: v.assignors,
				SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RebalanceTimeout: 20 * time.Second,
				AutoCommit: true, AutoCommitInterval: time.Minute, Reset: client.ResetEarliest,
			}
			led := newLedger()
			var members []*groupMember
			for k := range n {
				produceSpread(t, ctx, cl, topic, parts, k*per, (k+1)*per)
				members = append(members, startGroupMember(t, cl, cfg, led))
				awaitGroup(t, time.Minute, fmt.Sprintf("%d records with %d members", (k+1)*per, k+1), members,
					func() bool { return led.distinct() >= (k+1)*per })
			}
			awaitGroup(t, time.Minute, "an even split", members, func() bool { return split(members, parts) })
			produceSpread(t, ctx, cl, topic, parts, n*per, (n+1)*per)
			awaitGroup(t, time.Minute, "the last records", members, func() bool { return led.distinct() >= (n+1)*per })
			for i, m := range members {
				require.NoError(t, m.close(), "closing member %d", i)
			}
			require.Empty(t, led.duplicates(), "records returned twice")
			require.Equal(t, (n+1)*per, led.distinct())
		})
	}
}

// A pattern subscription reads every topic whose whole name matches, and
// no other, with either protocol (the classic member resolves the pattern
// itself, the consumer protocol sends it to the coordinator).
func TestGroupConsumerTopicPattern(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, v := range []groupVariant{groupVariants[0], groupVariants[2]} {
		t.Run(v.name, func(t *testing.T) {
			prefix := "pat-" + v.name
			for _, topic := range []string{prefix + "-a", prefix + "-b", prefix + "-a-not"} {
				_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
				require.NoError(t, err)
				produceSpread(t, ctx, cl, topic, 2, 0, 50)
			}
			led := newLedger()
			m := startGroupMember(t, cl, client.GroupConsumerConfig{
				GroupID: prefix, TopicPattern: prefix + "-[ab]", Protocol: v.protocol, Assignors: v.assignors,
				SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
				AutoCommit: true, Reset: client.ResetEarliest,
			}, led)
			awaitGroup(t, time.Minute, "the records of both matching topics", []*groupMember{m}, func() bool { return led.distinct() >= 100 })
			require.Len(t, m.gc.Assignment(), 4)
			require.NoError(t, m.close())
			require.Equal(t, 100, led.distinct())
			for v := range led.seen {
				require.NotContains(t, v, "-not-", "a topic the pattern does not match in full")
			}
		})
	}
}

// When a topic grows, the group assigns the new partitions: the classic
// leader notices on its periodic metadata check and rebalances, the
// consumer protocol's coordinator on its own; records produced to them are
// read, once.
func TestGroupConsumersFollowNewPartitions(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	for _, v := range groupVariants {
		t.Run(v.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			topic := "grow-" + v.name
			_, err := cl.CreateTopic(ctx, topic, 2, 1, nil)
			require.NoError(t, err)
			cfg := client.GroupConsumerConfig{
				GroupID: topic, Topics: []string{topic}, Protocol: v.protocol, Assignors: v.assignors,
				SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
				AutoCommit: true, AutoCommitInterval: 200 * time.Millisecond, Reset: client.ResetEarliest,
				// The classic leader sees the new partitions on its next
				// metadata refresh, not the default 10 s later.
				MetadataMaxAge: time.Second,
			}
			led := newLedger()
			members := []*groupMember{startGroupMember(t, cl, cfg, led), startGroupMember(t, cl, cfg, led)}
			produceSpread(t, ctx, cl, topic, 2, 0, 100)
			awaitGroup(t, time.Minute, "the first records", members, func() bool { return led.distinct() >= 100 })

			resp, err := cl.CreatePartitions(ctx, &controllerv1.CreatePartitionsRequest{Topics: []*controllerv1.PartitionIncrease{{Topic: topic, TotalCount: 4}}})
			require.NoError(t, err)
			require.Nil(t, resp.GetResults()[0].GetError())
			awaitGroup(t, time.Minute, "the new partitions assigned", members, func() bool { return split(members, 4) })
			produceSpread(t, ctx, cl, topic, 4, 100, 200)
			awaitGroup(t, time.Minute, "the records of every partition", members, func() bool { return led.distinct() >= 200 })
			for _, m := range members {
				require.NoError(t, m.close())
			}
			require.Empty(t, led.duplicates())
			require.Equal(t, 200, led.distinct())
		})
	}
}

// A member that stops calling Poll for longer than the rebalance timeout
// (max.poll.interval.ms) leaves the group, so the others take its
// partitions; when it polls again it reports them lost (not revoked: they
// may have been read by others already) and joins again.
func TestGroupMemberThatStopsPollingLeaves(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true, ExtraArgs: groupArgs})
	cl := cluster.Client(t, c)
	for _, v := range []groupVariant{groupVariants[1], groupVariants[2]} {
		t.Run(v.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			const parts = 6
			topic := "stall-" + v.name
			_, err := cl.CreateTopic(ctx, topic, parts, 1, nil)
			require.NoError(t, err)
			var mu sync.Mutex
			var lost, revoked []client.TopicPartition
			cfg := client.GroupConsumerConfig{
				GroupID: topic, Topics: []string{topic}, Protocol: v.protocol, Assignors: v.assignors,
				SessionTimeout: 6 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RebalanceTimeout: 3 * time.Second,
				AutoCommit: true, Reset: client.ResetEarliest,
			}
			other := startGroupMember(t, cl, cfg, newLedger())
			cfg.OnLost = func(_ context.Context, tps []client.TopicPartition) {
				mu.Lock()
				lost = append(lost, tps...)
				mu.Unlock()
			}
			cfg.OnRevoked = func(_ context.Context, tps []client.TopicPartition) {
				mu.Lock()
				revoked = append(revoked, tps...)
				mu.Unlock()
			}
			stalled, err := cl.NewGroupConsumer(cfg)
			require.NoError(t, err)
			defer func() { _ = stalled.Close(context.Background()) }() // the test's checks come first
			poll := func() {
				pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := stalled.Poll(pctx)
				pcancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					require.NoError(t, err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for len(stalled.Assignment()) != parts/2 || len(other.gc.Assignment()) != parts/2 {
				require.True(t, time.Now().Before(deadline), "no even split: %v / %v", stalled.Assignment(), other.gc.Assignment())
				poll()
			}
			mine := stalled.Assignment()
			revokedBefore := len(revoked)

			// Stop polling: the other member ends up with every partition.
			awaitGroup(t, 30*time.Second, "the other member to take every partition", []*groupMember{other},
				func() bool { return len(other.gc.Assignment()) == parts })

			deadline = time.Now().Add(time.Minute)
			for len(stalled.Assignment()) != parts/2 || len(other.gc.Assignment()) != parts/2 {
				require.True(t, time.Now().Before(deadline), "no split after the stalled member came back")
				poll()
			}
			mu.Lock()
			defer mu.Unlock()
			require.ElementsMatch(t, mine, lost, "the partitions held while stalled are reported lost")
			require.Len(t, revoked, revokedBefore, "lost partitions are not reported revoked")
		})
	}
}
