package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

// logBytes sums the sizes of a storage node's segment files of topic.
func logBytes(t *testing.T, node *devcluster.Process, topic string) map[string]int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(node.DataDir, "logs", topic+"-*", "*.log"))
	require.NoError(t, err)
	out := map[string]int64{}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			out[f] = fi.Size()
		}
	}
	return out
}

// partitionBytes sums logBytes per partition directory.
func partitionBytes(t *testing.T, node *devcluster.Process, topic string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for f, n := range logBytes(t, node, topic) {
		out[filepath.Dir(f)] += n
	}
	return out
}

// A storage node that loses power drops what it wrote but did not fsync.
// With sluice.fsync.before.ack=false an acks=all record may be acknowledged
// before any replica made it durable; Sluice's promise is then that it
// survives the crash of any single node, because every in-sync replica
// holds it. Three storage nodes, RF 3, min.insync.replicas=2: produce
// acks=all, crash the leader of partition 0 through the fault-injection
// endpoint with its unsynced bytes dropped (exit 137, no clean shutdown),
// keep producing, restart it, and check every acknowledged record is read
// back at its offset and the node is back in every ISR.
func TestCrashDroppingUnsyncedBytesLosesNoAcknowledgedRecord(t *testing.T) {
	crashDroppingUnsynced(t, cluster.Options{})
}

// crashDroppingUnsynced runs the test above on a cluster of o's binary and
// environment (a planted bug's build, to see the test can fail).
func crashDroppingUnsynced(t *testing.T, o cluster.Options) {
	o.StorageNodes = 3
	o.ExtraArgs = append(o.ExtraArgs, "--unsafe.fault-injection", "--unsafe.fault-seed=7")
	c := cluster.Start(t, o)
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic, partitions = "crash-unsynced", int32(3)
	_, err := cl.CreateTopic(ctx, topic, partitions, 3, map[string]string{
		"min.insync.replicas": "2", "sluice.fsync.before.ack": "false"})
	require.NoError(t, err)
	waitFullISR(t, ctx, cl, topic)

	// Requests need a valid body: a process answers 400 with a reason.
	ls, _ := leaders(t, ctx, cl, topic)
	victim := nodeByID(c, ls[0])
	require.NotNil(t, victim, "leader %d of partition 0", ls[0])
	fc := faultapi.Client{HTTPAddr: victim.HTTPAddr}
	_, err = fc.Disk(ctx, faultapi.DiskFault{Op: "sync"})
	var fe *faultapi.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, 400, fe.Status, "%v", err)

	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll, DeliveryTimeout: 2 * time.Minute, Linger: 2 * time.Millisecond})
	w := &workload{lastAck: map[int32]time.Time{}}
	pctx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { produceSlowly(pctx, t, p, w, topic, 2000) })
	acksSince := func(at time.Time) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for part := range partitions {
			if !w.lastAck[part].After(at) {
				return false
			}
		}
		return true
	}
	start := time.Now()
	require.Eventually(t, func() bool { return acksSince(start) }, 30*time.Second, 20*time.Millisecond, "every partition acknowledges")
	// Let unsynced bytes pile up on every replica: each storage node's log
	// of every partition grows by pileUp bytes past what it held once
	// every partition acknowledged (nothing fsyncs them: flush.ms and
	// flush.messages are unset and acks do not wait for fsync).
	const pileUp = 16 << 10
	base := map[string]int64{}
	for _, n := range c.StorageNodes() {
		maps.Copy(base, partitionBytes(t, n, topic))
	}
	require.Len(t, base, 3*int(partitions), "every storage node holds a log of every partition")
	require.Eventually(t, func() bool {
		for _, n := range c.StorageNodes() {
			for dir, size := range partitionBytes(t, n, topic) {
				if size-base[dir] < pileUp {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "every replica's log grows by %d bytes", pileUp)

	before := logBytes(t, victim, topic)
	require.NoError(t, fc.Crash(ctx, true))
	select {
	case <-victim.Exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still runs after the crash request", victim.Name)
	}
	var exitErr *exec.ExitError
	require.True(t, errors.As(victim.ExitErr(), &exitErr), "exit: %v", victim.ExitErr())
	require.Equal(t, 137, exitErr.ExitCode())
	after := logBytes(t, victim, topic)
	dropped := int64(0)
	for f, n := range before {
		dropped += max(n-after[f], 0)
	}
	t.Logf("crashed %s (node %d, leader of partition 0): %d bytes of its segment files were not fsynced and are gone", victim.Name, victim.NodeID, dropped)
	require.Positive(t, dropped, "the crash dropped unsynced bytes (else this test shows nothing)")

	// The others take over and acknowledge again while the node is down.
	crashed := time.Now()
	require.Eventually(t, func() bool { return acksSince(crashed) }, 60*time.Second, 20*time.Millisecond, "acknowledgements resume")
	require.NoError(t, victim.Restart())
	require.NoError(t, victim.WaitHealthy(ctx, 90*time.Second))
	restarted := time.Now()
	require.Eventually(t, func() bool { return acksSince(restarted) }, 60*time.Second, 20*time.Millisecond, "acknowledgements after the restart")
	stopProducing()
	wg.Wait()
	require.NoError(t, p.Close(ctx))

	waitFullISR(t, ctx, cl, topic)
	for part, st := range describeISR(t, ctx, cl, topic) {
		require.Contains(t, st.isr, victim.NodeID, "the restarted node rejoined the ISR of partition %d", part)
	}
	w.mu.Lock()
	acked, failed := append([]ack(nil), w.acked...), w.failed
	w.mu.Unlock()
	read := readAll(t, ctx, cl, topic, partitions)
	total := 0
	for _, recs := range read {
		total += len(recs)
	}
	dups := checkHistory(t, acked, read)
	t.Logf("%d acknowledged, %d failed, %d read back (%d duplicates): every acknowledged record at its offset", len(acked), failed, total, dups)
	checkReplicasIdentical(t, ctx, c, cl, topic, partitions)
}

// produceSlowly produces numbered records at about rate per second into w
// until ctx ends.
func produceSlowly(ctx context.Context, t *testing.T, p *client.Producer, w *workload, topic string, rate int) {
	start := time.Now()
	for seq := int64(0); ctx.Err() == nil; seq++ {
		if ahead := time.Duration(seq)*time.Second/time.Duration(rate) - time.Since(start); ahead > time.Millisecond {
			time.Sleep(ahead)
		}
		key := "k-" + strconv.Itoa(int(seq)%100)
		err := p.Produce(ctx, &client.Record{Topic: topic, Partition: -1, Key: []byte(key), Value: []byte(strconv.FormatInt(seq, 10))}, func(r client.Result) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if r.Err != nil {
				w.failed++
				if w.failed <= 3 {
					t.Logf("record %d: %v", seq, r.Err)
				}
				return
			}
			w.acked = append(w.acked, ack{key: key, seq: seq, part: r.Partition, offset: r.Offset})
			w.lastAck[r.Partition] = time.Now()
		})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("produce: %v", fmt.Sprint(err))
			}
			return
		}
		w.mu.Lock()
		w.produced++
		w.mu.Unlock()
	}
}
