package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
)

// The acceptance test of consumer groups under faults, on real processes: a
// group of groupworker processes consumes a 12-partition RF=3 topic while
// the test produces keyed records with acks=all, adds two members, stops one
// cleanly, SIGKILLs one and SIGKILLs the process coordinating the group.
// Afterwards the workers' logs must show that every acknowledged record was
// processed, that no partition had two owners at once, that duplicates come
// only from the faults, that committed offsets never went backwards and that
// no fenced member's commit was accepted.
//
// The last variant runs the group coordinators as two processes of their
// own (storage nodes run none): the coordinator killed is one of them, and
// its groups move to the other.
func TestGroupUnderFaults(t *testing.T) {
	for _, v := range []struct {
		name, protocol, assignor string
		coordinators             int
	}{
		{"classic-cooperative-sticky", "classic", "cooperative-sticky", 0},
		{"consumer", "consumer", "", 0},
		{"classic-separate-coordinators", "classic", "cooperative-sticky", 2},
	} {
		t.Run(v.name, func(t *testing.T) { runGroupUnderFaults(t, v.name, v.protocol, v.assignor, v.coordinators) })
	}
}

const (
	faultTopic      = "gf-orders"
	faultPartitions = int32(12)
	faultGroup      = "gf-group"
	// faultMinAcked is how many acknowledged records production waits for:
	// at faultRate, 30 s, a few seconds past the group's recovery from the
	// last fault (about +27 s).
	faultMinAcked = 150_000
	// faultRate paces production (records/s): the faults fit in the time
	// the minimum takes, and the two cores keep up with consuming too.
	faultRate = 5000
	// faultSession is the members' session timeout: a SIGKILLed member's
	// partitions move after it.
	faultSession = 6 * time.Second
)

// faultClusterArgs make rebalances start at once and give consumer-protocol
// members the same short session as classic ones; fastSessions lets the
// controller notice the coordinator's death quickly.
var faultClusterArgs = append([]string{
	"--group.initial-rebalance-delay=0",
	"--group.consumer-session-timeout=" + faultSession.String(),
	"--group.consumer-heartbeat-interval=1s",
}, fastSessions...)

// faultRecord is one injected fault and how long the group took to recover:
// until every partition is owned by exactly one live member, every live
// member owns one, and every partition had a commit accepted since.
type faultRecord struct {
	name      string
	at        time.Time
	recovered time.Duration
}

func runGroupUnderFaults(t *testing.T, variant, protocol, assignor string, coordinators int) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, GroupCoordinators: coordinators, ExtraArgs: faultClusterArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	_, err := cl.CreateTopic(ctx, faultTopic, faultPartitions, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)

	args := []string{"--bootstrap=" + strings.Join(c.Bootstrap(), ","), "--group=" + faultGroup, "--topic=" + faultTopic,
		"--protocol=" + protocol, "--session-timeout=" + faultSession.String()}
	if assignor != "" {
		args = append(args, "--assignor="+assignor)
	}
	fleet := newWorkerFleet(t, groupWorker(t), args)
	for i := 1; i <= 4; i++ {
		fleet.start(fmt.Sprintf("w%d", i))
	}
	started := time.Now()
	fleet.awaitSettled(t, time.Time{}, 90*time.Second)
	t.Logf("4 members own the 12 partitions after %v", time.Since(started).Round(time.Millisecond))

	prod := startKeyedProduction(t, ctx, cl, faultTopic, faultRate)
	prodStart := time.Now()
	fleet.awaitSettled(t, prodStart, 60*time.Second)

	var faults []*faultRecord
	inject := func(name string, do func()) *faultRecord {
		f := &faultRecord{name: name, at: time.Now()}
		do()
		f.recovered = fleet.awaitSettled(t, f.at, 90*time.Second)
		t.Logf("fault %q at +%v: recovered after %v (%d records acknowledged so far)", name,
			f.at.Sub(prodStart).Round(time.Millisecond), f.recovered.Round(time.Millisecond), prod.count())
		faults = append(faults, f)
		// Let the group run undisturbed for a while between faults.
		time.Sleep(2 * time.Second)
		return f
	}
	inject("add 2 members", func() {
		fleet.start("w5")
		fleet.start("w6")
	})
	inject("SIGTERM w1", func() { fleet.stop(t, "w1") })
	inject("SIGKILL w2", func() { fleet.kill(t, "w2") })
	var coord *devcluster.Process
	coordFault := inject("SIGKILL coordinator", func() {
		id, addr, err := cl.FindCoordinator(ctx, faultGroup)
		require.NoError(t, err)
		coord = nodeByID(c, id)
		require.NotNil(t, coord, "coordinator node %d (%s)", id, addr)
		t.Logf("the group's coordinator is %s (node %d)", coord.Name, id)
		if coordinators > 0 {
			require.True(t, coord.Roles.Has(role.GroupCoordinator) && !coord.Roles.Has(role.StorageNode),
				"with coordinators of their own, %s (roles %s) coordinates the group", coord.Name, coord.Roles)
		}
		require.NoError(t, coord.Kill())
	})
	restart := inject("restart coordinator", func() {
		require.NoError(t, coord.Start())
		require.NoError(t, coord.WaitHealthy(ctx, 60*time.Second))
	})
	coordWindow := [2]time.Time{coordFault.at, restart.at.Add(restart.recovered).Add(10 * time.Second)}

	deadline := prodStart.Add(150 * time.Second)
	for prod.count() < faultMinAcked {
		require.True(t, time.Now().Before(deadline), "only %d records acknowledged in %v", prod.count(), time.Since(prodStart))
		time.Sleep(200 * time.Millisecond)
	}
	acked, failed := prod.stop()
	prodTime := time.Since(prodStart)
	t.Logf("produced for %v: %d records acknowledged (%.0f/s), %d failed", prodTime.Round(time.Millisecond), len(acked),
		float64(len(acked))/prodTime.Seconds(), failed)

	// Wait until the group committed everything, then stop the members.
	drainStart := time.Now()
	ends := map[int32]int64{}
	for p := range faultPartitions {
		ends[p] = latestOffset(t, ctx, cl, faultTopic, p)
	}
	tps := make([]client.TopicPartition, 0, faultPartitions)
	for p := range faultPartitions {
		tps = append(tps, client.TopicPartition{Topic: faultTopic, Partition: p})
	}
	var behind []string
	drained := false
	for !drained && time.Since(drainStart) < 90*time.Second {
		committed, err := cl.FetchOffsets(ctx, faultGroup, tps...)
		if err == nil {
			behind = behind[:0]
			for p := range faultPartitions {
				if got := committed[tps[p]].GetOffset(); got < ends[p] {
					behind = append(behind, fmt.Sprintf("%d: %d<%d", p, got, ends[p]))
				}
			}
			drained = len(behind) == 0
		}
		if !drained {
			time.Sleep(200 * time.Millisecond)
		}
	}
	require.True(t, drained, "the group did not commit the whole topic within 90 s; behind: %v", behind)
	t.Logf("the group committed the whole topic %v after production ended", time.Since(drainStart).Round(time.Millisecond))
	for _, w := range fleet.liveWorkers() {
		fleet.stop(t, w.name)
	}
	final, err := cl.FetchOffsets(ctx, faultGroup, tps...)
	require.NoError(t, err)

	h := readWorkerHistory(t, fleet)
	rep := checkGroupHistory(h, acked, final, protocol == "classic", coordWindow)
	logGroupReport(t, h, rep, len(acked))

	var recov []string
	for _, f := range faults {
		recov = append(recov, fmt.Sprintf("%q=%v stall=%v", f.name, f.recovered.Round(10*time.Millisecond),
			h.stall(f.at, f.at.Add(f.recovered)).Round(10*time.Millisecond)))
	}
	t.Logf("recovery per fault (settled; longest pause of any partition meanwhile): %s", strings.Join(recov, ", "))
	t.Logf("GROUPS-FAULT: variant=%s acked=%d processed=%d duplicates=%d dup_killed=%d dup_fenced=%d dup_coordinator=%d "+
		"generations=%d assignment_events=%d fenced_overlaps=%d commits_ok=%d commits_failed=%d produce_s=%.1f "+
		"recover_add=%.2fs recover_sigterm=%.2fs recover_sigkill=%.2fs recover_coordinator=%.2fs recover_restart=%.2fs",
		variant, len(acked), rep.processed, rep.duplicates, rep.dupCause["killed"], rep.dupCause["fenced"], rep.dupCause["coordinator"],
		rep.generations, rep.assignmentEvents, rep.fencedOverlaps, rep.commitsOK, rep.commitsFailed, prodTime.Seconds(),
		faults[0].recovered.Seconds(), faults[1].recovered.Seconds(), faults[2].recovered.Seconds(),
		faults[3].recovered.Seconds(), faults[4].recovered.Seconds())
}

// keyedProduction produces keyed records at a steady pace with acks=all and
// records every acknowledgement.
type keyedProduction struct {
	mu     sync.Mutex
	acked  []ack
	failed int
	stop   func() ([]ack, int)
}

func (k *keyedProduction) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.acked)
}

func startKeyedProduction(t *testing.T, ctx context.Context, cl *client.Client, topic string, perSecond int) *keyedProduction {
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll, DeliveryTimeout: 2 * time.Minute, Linger: 5 * time.Millisecond})
	k := &keyedProduction{}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		for seq := int64(0); pctx.Err() == nil; seq++ {
			if ahead := time.Duration(seq)*time.Second/time.Duration(perSecond) - time.Since(start); ahead > time.Millisecond {
				time.Sleep(ahead)
			}
			key := "k-" + strconv.FormatInt(seq, 10)
			err := p.Produce(pctx, &client.Record{Topic: topic, Partition: -1, Key: []byte(key), Value: []byte(key)}, func(r client.Result) {
				k.mu.Lock()
				defer k.mu.Unlock()
				if r.Err != nil {
					k.failed++
					return
				}
				k.acked = append(k.acked, ack{key: key, seq: seq, part: r.Partition, offset: r.Offset})
			})
			if err != nil {
				if pctx.Err() == nil {
					t.Errorf("produce: %v", err)
				}
				return
			}
		}
	})
	k.stop = func() ([]ack, int) {
		cancel()
		wg.Wait()
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
		defer ccancel()
		require.NoError(t, p.Close(cctx))
		k.mu.Lock()
		defer k.mu.Unlock()
		return slices.Clone(k.acked), k.failed
	}
	return k
}

// workerLine is one line a groupworker writes (see cmd/groupworker).
type workerLine struct {
	Kind       string  `json:"kind"`
	T          int64   `json:"t"`
	T0         int64   `json:"t0"`
	Member     string  `json:"member"`
	Gen        int32   `json:"gen"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Key        string  `json:"key"`
	OK         bool    `json:"ok"`
	Err        string  `json:"err"`
	Partitions []int32 `json:"partitions"`
}

// faultWorker is one groupworker process.
type faultWorker struct {
	name, out string
	cmd       *exec.Cmd
	exited    chan struct{}
	// stoppedAt and killedAt are when the test sent SIGTERM or SIGKILL.
	stoppedAt, killedAt time.Time

	// What awaitSettled has read of the output so far.
	read  int64
	rest  []byte
	owned map[int32]bool
}

// workerFleet starts and stops the workers and follows their output.
type workerFleet struct {
	bin, dir string
	args     []string
	t        *testing.T
	workers  []*faultWorker
	// lastCommit is, per partition, the start of the latest accepted commit
	// seen in any output.
	lastCommit map[int32]time.Time
}

func newWorkerFleet(t *testing.T, bin string, args []string) *workerFleet {
	f := &workerFleet{bin: bin, dir: t.TempDir(), args: args, t: t, lastCommit: map[int32]time.Time{}}
	f.dumpOnFailure(t)
	t.Cleanup(func() {
		for _, w := range f.workers {
			_ = w.cmd.Process.Kill() // already gone unless the test failed early
			<-w.exited
		}
		// SLUICE_TEST_LOGS keeps the workers' output too, as the cluster
		// harness keeps the servers' logs.
		if keep := os.Getenv("SLUICE_TEST_LOGS"); keep != "" {
			dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
			_ = os.MkdirAll(dst, 0o755)
			files, _ := filepath.Glob(filepath.Join(f.dir, "*"))
			for _, src := range files {
				if b, err := os.ReadFile(src); err == nil {
					_ = os.WriteFile(filepath.Join(dst, filepath.Base(src)), b, 0o644)
				}
			}
		}
	})
	return f
}

func (f *workerFleet) start(name string) *faultWorker {
	w := &faultWorker{name: name, out: filepath.Join(f.dir, name+".jsonl"), exited: make(chan struct{}), owned: map[int32]bool{}}
	stderr, err := os.Create(filepath.Join(f.dir, name+".stderr"))
	require.NoError(f.t, err)
	w.cmd = exec.Command(f.bin, append(slices.Clone(f.args), "--out="+w.out)...)
	w.cmd.Stdout, w.cmd.Stderr = stderr, stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(f.t, w.cmd.Start())
	go func() {
		_ = w.cmd.Wait() // how it ended is in its output and stderr
		_ = stderr.Close()
		close(w.exited)
	}()
	f.workers = append(f.workers, w)
	return w
}

func (f *workerFleet) worker(name string) *faultWorker {
	for _, w := range f.workers {
		if w.name == name {
			return w
		}
	}
	return nil
}

func (f *workerFleet) liveWorkers() []*faultWorker {
	var out []*faultWorker
	for _, w := range f.workers {
		if w.stoppedAt.IsZero() && w.killedAt.IsZero() {
			out = append(out, w)
		}
	}
	return out
}

// stop sends SIGTERM and waits for a clean exit: Close commits, revokes and
// leaves.
func (f *workerFleet) stop(t *testing.T, name string) {
	w := f.worker(name)
	w.stoppedAt = time.Now()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-w.exited:
	case <-time.After(40 * time.Second):
		t.Fatalf("worker %s did not exit within 40 s of SIGTERM", name)
	}
	require.True(t, w.cmd.ProcessState.Success(), "worker %s exit: %v", name, w.cmd.ProcessState)
}

// kill sends SIGKILL: the member vanishes without revoking or leaving.
func (f *workerFleet) kill(t *testing.T, name string) {
	w := f.worker(name)
	w.killedAt = time.Now()
	require.NoError(t, w.cmd.Process.Kill())
	<-w.exited
}

// refresh reads what the workers wrote since the last call: assignment
// changes and accepted commits.
func (f *workerFleet) refresh() {
	for _, w := range f.workers {
		fh, err := os.Open(w.out)
		if err != nil {
			continue // not created yet
		}
		_, _ = fh.Seek(w.read, 0)
		b, _ := bufio.NewReader(fh).ReadBytes(0) // to EOF
		_ = fh.Close()
		w.read += int64(len(b))
		buf := append(w.rest, b...)
		last := bytes.LastIndexByte(buf, '\n')
		if last < 0 {
			w.rest = buf
			continue
		}
		w.rest = slices.Clone(buf[last+1:])
		for ln := range bytes.SplitSeq(buf[:last], []byte{'\n'}) {
			if bytes.HasPrefix(ln, []byte(`{"kind":"record"`)) {
				continue
			}
			var l workerLine
			if parseWorkerLine(ln, &l) != nil {
				continue
			}
			switch l.Kind {
			case "assigned":
				for _, p := range l.Partitions {
					w.owned[p] = true
				}
			case "revoked", "lost":
				for _, p := range l.Partitions {
					delete(w.owned, p)
				}
			case "commit":
				if at := time.Unix(0, l.T0); l.OK && at.After(f.lastCommit[l.Partition]) {
					f.lastCommit[l.Partition] = at
				}
			}
		}
	}
}

// settled says whether every partition is owned by exactly one live worker,
// every live worker owns at least one, and (unless since is zero) every
// partition had a commit accepted that started after since.
func (f *workerFleet) settled(since time.Time) (bool, string) {
	f.refresh()
	owners := map[int32][]string{}
	live := f.liveWorkers()
	for _, w := range live {
		if len(w.owned) == 0 {
			return false, w.name + " owns nothing"
		}
		for p := range w.owned {
			owners[p] = append(owners[p], w.name)
		}
	}
	for p := range faultPartitions {
		if len(owners[p]) != 1 {
			return false, fmt.Sprintf("partition %d owned by %v", p, owners[p])
		}
		if !since.IsZero() && !f.lastCommit[p].After(since) {
			return false, fmt.Sprintf("no commit of partition %d accepted since", p)
		}
	}
	return true, ""
}

// awaitSettled waits until settled(since) and returns how long after since
// (or after the call, for a zero since) that was.
func (f *workerFleet) awaitSettled(t *testing.T, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	from := since
	if from.IsZero() {
		from = time.Now()
	}
	deadline := time.Now().Add(within)
	for {
		ok, why := f.settled(since)
		if ok {
			return time.Since(from)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle within %v: %s", within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dumpOnFailure attaches the end of every worker's output and stderr to a
// failing test's log.
func (f *workerFleet) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, w := range f.workers {
			for _, path := range []string{w.out, strings.TrimSuffix(w.out, ".jsonl") + ".stderr"} {
				b, _ := os.ReadFile(path)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				var keep []string
				for _, l := range lines {
					if !strings.HasPrefix(l, `{"kind":"record"`) {
						keep = append(keep, l)
					}
				}
				if len(keep) > 80 {
					keep = keep[len(keep)-80:]
				}
				t.Logf("---- %s (%d lines, last %d non-record lines) ----\n%s", filepath.Base(path), len(lines), len(keep), strings.Join(keep, "\n"))
			}
		}
	})
}
