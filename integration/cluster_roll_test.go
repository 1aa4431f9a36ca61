package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// rollHook restarts processes of a test cluster when `sluice cluster roll`
// asks through its restart command: the command writes req-<node> into dir
// and waits for done-<node>. On each request the hook first records whether
// the cluster was ready for it (no under-replicated partition, every node
// alive): a roll that did not wait for the previous restart to recover
// asks while the restarted node is still out of its ISRs.
type rollHook struct {
	t   *testing.T
	c   *devcluster.Cluster
	cl  *client.Client
	dir string

	mu         sync.Mutex
	order      []int32
	wasActive  []bool // whether each restarted node was the active controller when asked
	violations []string
}

// command is the --restart-cmd: plain sh, so the test needs no other tool.
func (h *rollHook) command() string {
	return fmt.Sprintf(`echo {role} > %[1]s/req-{node}.tmp && mv %[1]s/req-{node}.tmp %[1]s/req-{node} && `+
		`until [ -e %[1]s/done-{node} ]; do sleep 0.05; done; grep -qx ok %[1]s/done-{node} || { cat %[1]s/done-{node} >&2; exit 1; }`, h.dir)
}

func (h *rollHook) run(ctx context.Context) {
	seen := map[string]bool{}
	for ctx.Err() == nil {
		reqs, _ := filepath.Glob(filepath.Join(h.dir, "req-*"))
		for _, req := range reqs {
			name := filepath.Base(req)
			if strings.HasSuffix(name, ".tmp") || seen[name] {
				continue
			}
			seen[name] = true
			id, err := strconv.Atoi(strings.TrimPrefix(name, "req-"))
			result := "ok"
			if err != nil {
				result = "bad request " + name
			} else {
				result = h.restart(ctx, int32(id))
			}
			tmp := filepath.Join(h.dir, "done.tmp")
			if err := os.WriteFile(tmp, []byte(result+"\n"), 0o644); err == nil {
				err = os.Rename(tmp, filepath.Join(h.dir, fmt.Sprintf("done-%d", id)))
				if err != nil {
					h.t.Errorf("answering the restart of node %d: %v", id, err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // polling interval of the request directory
		}
	}
}

func (h *rollHook) restart(ctx context.Context, id int32) string {
	if why := h.notReady(ctx); why != "" {
		h.mu.Lock()
		h.violations = append(h.violations, fmt.Sprintf("node %d asked to restart while %s", id, why))
		h.mu.Unlock()
	}
	active := false
	descCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if desc, err := h.cl.DescribeCluster(descCtx); err == nil {
		active = desc.GetControllerId() == id
	}
	cancel()
	h.mu.Lock()
	h.order = append(h.order, id)
	h.wasActive = append(h.wasActive, active)
	h.mu.Unlock()
	p := nodeByID(h.c, id)
	if p == nil {
		return fmt.Sprintf("no process with node id %d", id)
	}
	// SIGTERM, as systemctl or docker would send. The node must stop by
	// itself well inside the test's 60 s --grpc.graceful-stop-timeout:
	// open streams end once leaderships have moved, and a node that waited
	// for its clients to end them would be killed here and fail the roll.
	t0 := time.Now()
	if err := p.Stop(20 * time.Second); err != nil {
		return err.Error()
	}
	h.t.Logf("%s (node %d) stopped in %v", p.Name, id, time.Since(t0).Round(10*time.Millisecond))
	if err := p.Start(); err != nil {
		return err.Error()
	}
	return "ok"
}

// notReady says why the cluster was not ready for the next restart, "" if it
// was.
func (h *rollHook) notReady(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	desc, err := h.cl.DescribeCluster(ctx)
	if err != nil {
		return "the cluster could not be described: " + err.Error()
	}
	for _, b := range desc.GetBrokers() {
		if b.GetState() != commonv1.BrokerState_BROKER_STATE_ALIVE {
			return fmt.Sprintf("node %d was %s", b.GetId(), b.GetState())
		}
	}
	list, err := h.cl.ListTopics(ctx, true)
	if err != nil {
		return "topics could not be listed: " + err.Error()
	}
	var names []string
	for _, t := range list.GetTopics() {
		names = append(names, t.GetName())
	}
	topics, err := h.cl.DescribeTopics(ctx, names...)
	if err != nil {
		return "topics could not be described: " + err.Error()
	}
	for _, t := range topics.GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetLeaderId() < 0 || len(p.GetIsr()) < len(p.GetReplicas()) {
				return fmt.Sprintf("%s-%d was under-replicated (replicas %v, isr %v)", t.GetName(), p.GetPartition(), p.GetReplicas(), p.GetIsr())
			}
		}
	}
	return ""
}

// rollTraffic produces with acks=all and idempotence at a steady pace,
// recording what was acknowledged, errors the producer surfaced after its
// own retries, and the gaps between acknowledgements.
type rollTraffic struct {
	mu       sync.Mutex
	acked    map[string]bool
	errs     []string
	lastAck  time.Time
	maxGap   time.Duration
	gapAt    time.Time
	maxDelay time.Duration
}

func (tr *rollTraffic) produce(ctx context.Context, p *client.Producer, topic string, stop <-chan struct{}) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-time.After(5 * time.Millisecond): // pace: about 200 records/s
		}
		v := strconv.Itoa(n)
		sent := time.Now()
		err := p.Produce(ctx, &client.Record{Topic: topic, Partition: -1, Key: []byte(v), Value: []byte(v)}, func(r client.Result) {
			now := time.Now()
			tr.mu.Lock()
			defer tr.mu.Unlock()
			if r.Err != nil {
				tr.errs = append(tr.errs, fmt.Sprintf("record %s: %v", r.Record.Value, r.Err))
				return
			}
			tr.acked[string(r.Record.Value)] = true
			if !tr.lastAck.IsZero() && now.Sub(tr.lastAck) > tr.maxGap {
				tr.maxGap, tr.gapAt = now.Sub(tr.lastAck), tr.lastAck
			}
			if now.After(tr.lastAck) {
				tr.lastAck = now
			}
			tr.maxDelay = max(tr.maxDelay, now.Sub(sent))
		})
		if err != nil {
			tr.mu.Lock()
			tr.errs = append(tr.errs, fmt.Sprintf("record %s: %v", v, err))
			tr.mu.Unlock()
			return n
		}
		n++
	}
}

// `sluice cluster roll` restarts every process of a cluster (three storage
// nodes, each with the replication and coordinator roles, and three
// controllers forming the etcd quorum)
// through a restart command while an idempotent acks=all producer and a
// consumer group run: every acknowledged record is kept exactly once and
// consumed, the clients surface no error, each restart is asked for only
// once the previous one has recovered (no under-replicated partition), and
// the controllers go last, the active one very last.
func TestClusterRollingRestart(t *testing.T) {
	began := time.Now()
	// A graceful stop far longer than a node may take to stop (see
	// restart): streams still open when it runs would hold it all along.
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 3, ExtraArgs: []string{"--grpc.graceful-stop-timeout=60s"}})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "rolled"
	_, err := cl.CreateTopic(ctx, topic, 3, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)

	hook := &rollHook{t: t, c: c, cl: cl, dir: t.TempDir()}
	hookCtx, stopHook := context.WithCancel(ctx)
	hookDone := make(chan struct{})
	go func() { defer close(hookDone); hook.run(hookCtx) }()
	defer func() { stopHook(); <-hookDone }()

	roll := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","),
			"cluster", "roll", "--restart-cmd", hook.command(), "--step-timeout", "60s", "--poll-interval", "200ms"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		t.Logf("sluice cluster roll %s:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		return out.String(), err
	}
	plan, err := roll("--dry-run")
	require.NoError(t, err)
	active := awaitActiveController(t, ctx, c, cl, nil)
	require.Regexp(t, `(?s)1\. storage-node .*2\. storage-node .*3\. storage-node .*4\. controller .*5\. controller .*6\. controller\s+node `+
		strconv.Itoa(int(active.NodeID))+` .*active controller`, plan)
	require.Empty(t, hook.order, "a dry run restarts nothing")

	led := newLedger()
	members := []*groupMember{
		startGroupMember(t, cl, client.GroupConsumerConfig{GroupID: topic, Topics: []string{topic}, Reset: client.ResetEarliest}, led),
		startGroupMember(t, cl, client.GroupConsumerConfig{GroupID: topic, Topics: []string{topic}, Reset: client.ResetEarliest}, led),
	}
	tr := &rollTraffic{acked: map[string]bool{}}
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll, DeliveryTimeout: 60 * time.Second})
	stopProducing := make(chan struct{})
	var produced int
	var wg sync.WaitGroup
	wg.Go(func() { produced = tr.produce(ctx, p, topic, stopProducing) })
	awaitGroup(t, 30*time.Second, "the group to consume", members, func() bool { return led.distinct() > 100 })

	// When the group last received a new record, for the report.
	var growthMu sync.Mutex
	var lastGrew time.Time
	lastGrowth := func() time.Time { growthMu.Lock(); defer growthMu.Unlock(); return lastGrew }
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() {
		for n := 0; sampleCtx.Err() == nil; {
			if d := led.distinct(); d > n {
				n = d
				growthMu.Lock()
				lastGrew = time.Now()
				growthMu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(100 * time.Millisecond): // sampling interval
			}
		}
	}()
	// Stalls are measured from here: before the roll the producer only
	// warms up.
	tr.mu.Lock()
	tr.maxGap, tr.maxDelay = 0, 0
	tr.mu.Unlock()
	rollStart := time.Now()
	out, err := roll()
	rollTook := time.Since(rollStart)
	require.NoError(t, err, "the roll")
	close(stopProducing)
	wg.Wait()
	require.NoError(t, p.Flush(ctx))
	require.NoError(t, p.Close(ctx))

	hook.mu.Lock()
	order, wasActive, violations := append([]int32(nil), hook.order...), append([]bool(nil), hook.wasActive...), append([]string(nil), hook.violations...)
	hook.mu.Unlock()
	require.Empty(t, violations, "the roll asked for a restart before the cluster had recovered")
	require.Len(t, order, len(c.Processes()), "every process restarted once")
	controllers := map[int32]bool{}
	for _, p := range c.Controllers() {
		controllers[p.NodeID] = true
	}
	for i, id := range order {
		last := i >= len(order)-len(controllers)
		require.Equal(t, last, controllers[id], "step %d (node %d): controllers restart last, after every other process", i+1, id)
		require.Equal(t, i == len(order)-1, wasActive[i], "step %d (node %d): only the last restart is of the active controller", i+1, id)
	}
	// The roll's own account: each step ends healthy with no under-replicated
	// partition before the next step's restart command runs.
	steps := regexp.MustCompile(`step (\d+)/\d+ node \d+: (restarting|restart command done|restarted|healthy, registered, under-replicated partitions 0)`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, s := range steps {
		got = append(got, s[1]+" "+s[2])
	}
	var want []string
	for i := 1; i <= len(order); i++ {
		want = append(want, fmt.Sprintf("%d restarting", i), fmt.Sprintf("%d restart command done", i), fmt.Sprintf("%d restarted", i),
			fmt.Sprintf("%d healthy, registered, under-replicated partitions 0", i))
	}
	require.Equal(t, want, got, "the roll's steps in order")

	tr.mu.Lock()
	acked, errs, maxGap, gapAt, maxDelay := len(tr.acked), tr.errs, tr.maxGap, tr.gapAt, tr.maxDelay
	tr.mu.Unlock()
	require.Empty(t, errs, "the producer surfaced errors after its own retries")
	require.Equal(t, produced, acked, "every produced record acknowledged")

	// Every acknowledged record is in the log exactly once (idempotence held
	// through every leader change) and the group consumed it.
	inLog, where := readPartitions(t, ctx, cl, topic, 3)
	var dups []string
	for v, n := range inLog {
		if n > 1 {
			dups = append(dups, v)
		}
	}
	require.Empty(t, dups, "records written twice")
	for v := range tr.acked {
		require.True(t, inLog[v] == 1, "acknowledged record %s lost", v)
	}
	t.Logf("rolling restart: %d processes in %v; %d records acknowledged, none lost or duplicated; longest gap between acknowledgements %v (from %v into the roll), longest produce latency %v; test took %v",
		len(order), rollTook.Round(100*time.Millisecond), acked, maxGap.Round(time.Millisecond), gapAt.Sub(rollStart).Round(100*time.Millisecond),
		maxDelay.Round(time.Millisecond), time.Since(began).Round(100*time.Millisecond))

	deadline := time.Now().Add(30 * time.Second)
	for led.distinct() < acked && time.Now().Before(deadline) {
		for _, m := range members {
			require.NoError(t, m.failed(), "a group member stopped")
		}
		time.Sleep(50 * time.Millisecond) // polling interval of a condition with a deadline
	}
	if missing := led.distinct() - acked; missing < 0 {
		byPart := map[int32]int{}
		led.mu.Lock()
		for v := range tr.acked {
			if led.seen[v] == 0 {
				byPart[where[v]]++
			}
		}
		led.mu.Unlock()
		var assigned []string
		for i, m := range members {
			assigned = append(assigned, fmt.Sprintf("member %d: %v", i, m.gc.Assignment()))
		}
		t.Fatalf("the group consumed %d of %d acknowledged records within 30 s of the check's start, the last one %v into the roll; missing by partition %v; %s",
			led.distinct(), acked, lastGrowth().Sub(rollStart).Round(100*time.Millisecond), byPart, strings.Join(assigned, "; "))
	}
	t.Logf("group consumed every acknowledged record (%d re-delivered)", len(led.duplicates()))
	for _, m := range members {
		require.NoError(t, m.close(), "a group member surfaced an error")
	}

}

// readPartitions reads every partition of topic from the start to its end
// offset and counts each value, and says which partition holds it.
func readPartitions(t *testing.T, ctx context.Context, cl *client.Client, topic string, parts int32) (map[string]int, map[string]int32) {
	t.Helper()
	counts, where := map[string]int{}, map[string]int32{}
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	end := map[int32]int64{}
	var tps []client.TopicPartition
	for i := range parts {
		off, err := cl.ListOffset(ctx, topic, i, client.OffsetLatest)
		require.NoError(t, err)
		if off > 0 {
			end[i] = off
			tps = append(tps, client.TopicPartition{Topic: topic, Partition: i})
		}
	}
	k.Assign(tps...)
	pos := map[int32]int64{}
	for len(end) > 0 {
		recs, err := k.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			counts[string(r.Value)]++
			where[string(r.Value)] = r.Partition
			pos[r.Partition] = r.Offset + 1
			if pos[r.Partition] >= end[r.Partition] {
				delete(end, r.Partition)
			}
		}
	}
	return counts, where
}
