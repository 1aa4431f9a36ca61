package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
)

// copier runs one txnworker process, restarting it when it exits on its
// own (an aborted transaction) until stopped.
type copier struct {
	t       *testing.T
	args    []string
	journal string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitCode int
	stopped  bool
	starts   int
}

func startCopier(t *testing.T, c *devcluster.Cluster, dir, tid string, extra ...string) *copier {
	return startCopierAs(t, c, dir, tid, tid, extra...)
}

// startCopierAs starts a copier whose journal is named name.
func startCopierAs(t *testing.T, c *devcluster.Cluster, dir, name, tid string, extra ...string) *copier {
	w := &copier{t: t, journal: filepath.Join(dir, name+".jsonl")}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{w.journal, w.journal + ".stderr"} {
			data, _ := os.ReadFile(name)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("---- last lines of %s ----\n%s", filepath.Base(name), strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	w.args = append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "--group", "eos", "--in", "eos-in", "--out-topic", "eos-out",
		"--transactional-id", tid, "--out", w.journal}, extra...)
	w.start()
	return w
}

func (w *copier) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	cmd := exec.Command(txnWorker(w.t), w.args...)
	stderr, err := os.OpenFile(w.journal+".stderr", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(w.t, err)
	cmd.Stderr = stderr
	require.NoError(w.t, cmd.Start())
	_ = stderr.Close() // the child holds its own descriptor
	w.cmd, w.exited, w.starts = cmd, make(chan struct{}), w.starts+1
	exited := w.exited
	go func() {
		_ = cmd.Wait() // the exit code is what matters
		w.mu.Lock()
		w.exitCode = cmd.ProcessState.ExitCode()
		restart := !w.stopped && w.exitCode == 2
		close(exited)
		w.mu.Unlock()
		if restart {
			time.Sleep(200 * time.Millisecond)
			w.mu.Lock()
			stopped := w.stopped
			w.mu.Unlock()
			if !stopped {
				w.start()
			}
		}
	}()
}

// kill SIGKILLs the worker and starts it again after a pause.
func (w *copier) kill(pause time.Duration) {
	w.mu.Lock()
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL) // it may have exited already
	<-exited
	time.Sleep(pause)
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if !stopped && w.exitCodeNow() != 2 { // exit code 2 restarts by itself
		w.start()
	}
}

func (w *copier) exitCodeNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exitCode
}

func (w *copier) signal(sig syscall.Signal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.cmd.Process.Signal(sig) // the process may be gone
}

func (w *copier) stop() {
	w.mu.Lock()
	w.stopped = true
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// journalCounts counts a worker's journal lines by kind.
func journalCounts(t *testing.T, path string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Kind string }
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out[l.Kind]++
		}
	}
	return out
}

// produceNumbered writes values 0..n-1 to topic, keyed by value.
func produceNumbered(t *testing.T, ctx context.Context, cl *client.Client, topic string, n int) {
	// Small input batches (~2 KiB, ~130 records): a copier's poll returns
	// whole batches, so this bounds its transactions. Batches grown to
	// 1 MiB while a partition's produce is in flight would let the copy
	// finish in a few seconds, before the faults begin.
	p := cl.NewProducer(client.ProducerConfig{Linger: 5 * time.Millisecond, BatchBytes: 2048, MaxBatchBytes: 2048})
	var failed sync.Map
	for i := range n {
		v := []byte(strconv.Itoa(i))
		require.NoError(t, p.Produce(ctx, &client.Record{Topic: topic, Partition: -1, Key: v, Value: v}, func(r client.Result) {
			if r.Err != nil {
				failed.Store(i, r.Err)
			}
		}))
	}
	require.NoError(t, p.Close(ctx))
	failed.Range(func(k, v any) bool { t.Fatalf("input record %v: %v", k, v); return false })
}

// countCopies reads the whole output topic with the given isolation and
// counts each value.
func countCopies(t *testing.T, cl *client.Client, topic string, readCommitted bool) (map[string]int, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: readCommitted})
	defer k.Close()
	require.NoError(t, k.AssignTopic(ctx, topic))
	ends := map[int32]int64{}
	for p := range int32(6) {
		// The high watermark: once no transaction is open, the last
		// stable offset is there too.
		off, err := cl.ListOffset(ctx, topic, p, client.OffsetLatest)
		require.NoError(t, err)
		ends[p] = off
	}
	counts := map[string]int{}
	total := 0
	for {
		done := true
		for p, end := range ends {
			if k.Position(client.TopicPartition{Topic: topic, Partition: p}) < end {
				done = false
			}
		}
		if done {
			return counts, total
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		recs, err := k.Poll(pctx)
		pcancel()
		require.NoError(t, ctx.Err(), "reading %s back", topic)
		if err != nil && pctx.Err() == nil {
			require.NoError(t, err)
		}
		for _, r := range recs {
			counts[string(r.Value)]++
			total++
		}
	}
}

// Exactly-once read-process-write on real processes: 3 transactional
// copiers in one group copy 100,000 numbered records from a 6-partition
// input topic to an output topic, committing their input positions in the
// same transactions, while copiers, storage nodes (leaders of the topics'
// partitions) and the processes coordinating the copiers' transactional ids
// (storage nodes too: coordinators run at the leaders of their internal
// topics' partitions) are SIGKILLed over and over. A
// read_committed reader of the output sees every input exactly once; a
// read_uncommitted one sees the records of aborted transactions too, and
// there must be some, or the faults proved nothing.
func TestExactlyOnceCopyUnderFaults(t *testing.T) {
	const n = 100_000
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	for _, topic := range []string{"eos-in", "eos-out"} {
		_, err := cl.CreateTopic(ctx, topic, 6, 3, map[string]string{"min.insync.replicas": "2"})
		require.NoError(t, err)
	}
	produceNumbered(t, ctx, cl, "eos-in", n)

	dir := t.TempDir()
	var workers []*copier
	for i := range 3 {
		// Small transactions (one 4 KiB chunk, ~130 records) held open
		// 200 ms each, so the copy lasts about a minute and faults land
		// inside transactions.
		workers = append(workers, startCopier(t, c, dir, fmt.Sprintf("copier-%d", i), "--fetch-bytes", "4096", "--pause-before-commit", "200ms"))
	}
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()

	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	copied := func() int {
		counts, _ := countCopies(t, cl, "eos-out", true)
		return len(counts)
	}
	kills := map[string]int{}
	start := time.Now()
	rounds := 12
	if os.Getenv("EOS_NO_FAULTS") != "" {
		rounds = 0
	}
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		// Every third fault is a storage node (with its coordinators), so
		// each run has both kinds; targets and timing come from the seed.
		switch round % 3 {
		case 0, 1:
			w := workers[rng.IntN(len(workers))]
			w.kill(time.Duration(rng.IntN(1000)) * time.Millisecond)
			kills["worker"]++
		case 2:
			// Alternately a random storage node, and the one whose
			// process coordinates a copier's transactional id.
			nodes := c.StorageNodes()
			p, kind := nodes[rng.IntN(len(nodes))], "storage"
			if round%2 == 1 {
				live := nodes[rng.IntN(len(nodes))]
				for !live.Running() {
					live = nodes[rng.IntN(len(nodes))]
				}
				p, kind = coordinatorProcess(t, c, live.Addr, fmt.Sprintf("copier-%d", rng.IntN(len(workers)))), "txn-coordinator"
			}
			require.NoError(t, p.Kill())
			time.Sleep(time.Second)
			require.NoError(t, p.Restart())
			kills[kind]++
		}
	}
	t.Logf("faults done after %v: %v", time.Since(start).Round(time.Second), kills)
	// Let the copiers finish: every input in the output.
	deadline := time.Now().Add(4 * time.Minute)
	for got := copied(); got < n; got = copied() {
		require.True(t, time.Now().Before(deadline), "only %d of %d inputs copied", got, n)
		time.Sleep(2 * time.Second)
	}
	for _, w := range workers {
		w.stop()
	}

	committed, committedTotal := countCopies(t, cl, "eos-out", true)
	_, allTotal := countCopies(t, cl, "eos-out", false)
	var missing, dups []string
	for i := range n {
		switch c := committed[strconv.Itoa(i)]; {
		case c == 0:
			missing = append(missing, strconv.Itoa(i))
		case c > 1:
			dups = append(dups, strconv.Itoa(i))
		}
	}
	aborted := allTotal - committedTotal
	journals := map[string]int{}
	starts := 0
	for _, w := range workers {
		for k, v := range journalCounts(t, w.journal) {
			journals[k] += v
		}
		starts += w.starts
	}
	t.Logf("EOS-COPY: inputs=%d committed_copies=%d missing=%d duplicates=%d aborted_records=%d kills=%v worker_starts=%d journal=%v",
		n, committedTotal, len(missing), len(dups), aborted, kills, starts, journals)
	requireProducerStateAgrees(t, cl, "eos-out", 6)
	require.Empty(t, missing, "inputs never copied (first few)")
	require.Empty(t, dups, "inputs copied more than once")
	require.Equal(t, n, committedTotal)
	require.Positive(t, aborted, "no transaction was aborted: the faults proved nothing")
}

// requireProducerStateAgrees checks that every replica of every partition
// holds the same producer state (ids, epochs, last sequences, open
// transactions), as the leader does: the state is a function of the log.
func requireProducerStateAgrees(t *testing.T, cl *client.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	md, err := cl.Metadata(ctx, topic)
	require.NoError(t, err)
	compared := 0
	for _, ti := range md.GetTopics() {
		if ti.GetName() != topic {
			continue
		}
		for p, pi := range ti.GetPartitions() {
			var last string
			require.Eventually(t, func() bool {
				var states []string
				for _, node := range pi.GetReplicas() {
					res, err := cl.DescribeProducersOn(ctx, topic, int32(p), node)
					if err != nil {
						return false
					}
					var b strings.Builder
					for _, ps := range res.GetProducers() {
						fmt.Fprintf(&b, "%d/%d/%d/%d/%d/%d ", ps.GetProducerId(), ps.GetProducerEpoch(), ps.GetLastSequence(),
							ps.GetCurrentTxnStartOffset(), ps.GetCoordinatorEpoch(), ps.GetLastTimestampMs())
					}
					states = append(states, b.String())
				}
				last = strings.Join(states, " | ")
				for _, st := range states[1:] {
					if st != states[0] {
						return false
					}
				}
				return states[0] != ""
			}, 30*time.Second, 200*time.Millisecond, "%s-%d: replicas disagree on producer state: %s", topic, p, last)
			compared++
		}
	}
	require.Equal(t, int(partitions), compared)
}
