package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
)

// ack is what the producer was told about one record.
type ack struct {
	key    string
	seq    int64
	part   int32
	offset int64
}

// workload produces keyed records continuously and records every
// acknowledgement and the time of every acknowledgement per partition.
type workload struct {
	mu       sync.Mutex
	acked    []ack
	lastAck  map[int32]time.Time
	failed   int
	produced int64
}

// rate paces the workload (records/s): enough to exceed the 300,000-record
// bar in a minute while keeping what the test holds in memory and reads
// back bounded.
const rate = 15000

// startWorkload creates topic (3 replicas, min.insync.replicas=2) and
// produces keyed records to it with acks=all until stop, which waits for
// the last answers and returns what was acknowledged and how many failed.
func startWorkload(t *testing.T, ctx context.Context, cl *client.Client, topic string, partitions int32,
	deliveryTimeout time.Duration) (w *workload, stop func() ([]ack, int)) {
	t.Helper()
	_, err := cl.CreateTopic(ctx, topic, partitions, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll, DeliveryTimeout: deliveryTimeout, Linger: 2 * time.Millisecond})
	w = &workload{lastAck: map[int32]time.Time{}}
	pctx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(pctx, t, p, topic) })
	return w, func() ([]ack, int) {
		stopProducing()
		wg.Wait()
		require.NoError(t, p.Close(ctx))
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]ack(nil), w.acked...), w.failed
	}
}

func (w *workload) run(ctx context.Context, t *testing.T, p *client.Producer, topic string) {
	keys := 1000
	start := time.Now()
	for seq := int64(0); ctx.Err() == nil; seq++ {
		if ahead := time.Duration(seq)*time.Second/rate - time.Since(start); ahead > time.Millisecond {
			time.Sleep(ahead)
		}
		key := "k-" + strconv.Itoa(int(seq)%keys)
		rec := &client.Record{Topic: topic, Partition: -1, Key: []byte(key), Value: []byte(strconv.FormatInt(seq, 10))}
		err := p.Produce(ctx, rec, func(r client.Result) {
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
			if ctx.Err() != nil {
				return
			}
			t.Logf("produce: %v", err)
			return
		}
		w.mu.Lock()
		w.produced++
		w.mu.Unlock()
	}
}

// consumedRecord is one record read back.
type consumedRecord struct {
	offset int64
	key    string
	seq    int64
}

// readAll reads every partition of a topic from the beginning up to its end.
func readAll(t *testing.T, ctx context.Context, cl *client.Client, topic string, partitions int32) map[int32][]consumedRecord {
	t.Helper()
	out := map[int32][]consumedRecord{}
	ends := map[int32]int64{}
	for p := range partitions {
		ends[p] = latestOffset(t, ctx, cl, topic, p)
	}
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	require.NoError(t, k.AssignTopic(ctx, topic))
	done := func() bool {
		for p, end := range ends {
			if k.Position(client.TopicPartition{Topic: topic, Partition: p}) < end {
				return false
			}
		}
		return true
	}
	for !done() {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		recs, err := k.Poll(pctx)
		cancel()
		require.NoError(t, err, "reading back")
		for _, r := range recs {
			seq, err := strconv.ParseInt(string(r.Value), 10, 64)
			require.NoError(t, err)
			out[r.Partition] = append(out[r.Partition], consumedRecord{offset: r.Offset, key: string(r.Key), seq: seq})
		}
	}
	return out
}

// latestOffset returns a partition's high watermark from its leader.
func latestOffset(t *testing.T, ctx context.Context, cl *client.Client, topic string, p int32) int64 {
	t.Helper()
	var out int64
	require.Eventually(t, func() bool {
		off, err := cl.ListOffset(ctx, topic, p, client.OffsetLatest)
		out = off
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	return out
}

// checkHistory checks the acknowledgements against what was read back:
// every acknowledged record is at the offset it was acknowledged at, no
// offset holds two values, the first occurrences of each key keep produce
// order; duplicates (retries of acknowledged-but-unanswered requests) are
// counted.
func checkHistory(t *testing.T, acked []ack, read map[int32][]consumedRecord) (duplicates int) {
	t.Helper()
	at := map[int32]map[int64]consumedRecord{}
	seen := map[int64]int{}
	for p, recs := range read {
		at[p] = map[int64]consumedRecord{}
		lastFirst := map[string]int64{}
		for i, r := range recs {
			if i > 0 {
				require.Greater(t, r.offset, recs[i-1].offset, "partition %d offsets go back", p)
			}
			at[p][r.offset] = r
			seen[r.seq]++
			if seen[r.seq] == 1 {
				if prev, ok := lastFirst[r.key]; ok {
					require.Greater(t, r.seq, prev, "key %s: record %d first appears after %d", r.key, r.seq, prev)
				}
				lastFirst[r.key] = r.seq
			}
		}
	}
	for _, n := range seen {
		if n > 1 {
			duplicates += n - 1
		}
	}
	lost := 0
	for _, a := range acked {
		r, ok := at[a.part][a.offset]
		if !ok || r.seq != a.seq {
			lost++
			if lost < 10 {
				t.Errorf("acknowledged record %d (partition %d offset %d) is missing or another value sits at its offset (%+v)", a.seq, a.part, a.offset, r)
			}
		}
	}
	require.Zero(t, lost, "acknowledged records lost")
	return duplicates
}

// checkReplicasIdentical compares the bytes of every replica's log below
// the high watermark, read from the segment files in each node's data dir.
func checkReplicasIdentical(t *testing.T, ctx context.Context, c *devcluster.Cluster, cl *client.Client, topic string, partitions int32) {
	t.Helper()
	for p := range partitions {
		hw := latestOffset(t, ctx, cl, topic, p)
		var ref []byte
		var refNode string
		for _, node := range c.StorageNodes() {
			dir := filepath.Join(node.DataDir, "logs", fmt.Sprintf("%s-%d", topic, p))
			if _, err := os.Stat(dir); err != nil {
				continue // not a replica
			}
			b := committedBytes(t, dir, hw)
			if ref == nil {
				ref, refNode = b, node.Name
				continue
			}
			require.True(t, bytes.Equal(ref, b), "partition %d: %s and %s differ below the high watermark %d (%d vs %d bytes)",
				p, refNode, node.Name, hw, len(ref), len(b))
		}
		require.NotEmpty(t, ref, "partition %d has data", p)
	}
}

// committedBytes returns the batches of a replica directory that end below
// hw, in offset order.
func committedBytes(t *testing.T, dir string, hw int64) []byte {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	sort.Strings(segs)
	var out []byte
	for _, s := range segs {
		data, err := os.ReadFile(s)
		require.NoError(t, err)
		for it := record.Batches(data); it.Next(); {
			h := it.Header()
			if h.NextOffset() > hw {
				return out
			}
			out = append(out, it.Bytes()...)
		}
	}
	return out
}

// waitFullISR waits until every partition has all its replicas in sync.
func waitFullISR(t *testing.T, ctx context.Context, cl *client.Client, topic string) {
	t.Helper()
	require.Eventually(t, func() bool {
		d, err := cl.DescribeTopics(ctx, topic)
		if err != nil {
			return false
		}
		for _, p := range d.GetTopics()[0].GetPartitions() {
			if len(p.GetIsr()) != len(p.GetReplicas()) || p.GetLeaderId() < 0 {
				return false
			}
		}
		return true
	}, 90*time.Second, 200*time.Millisecond, "every replica back in sync")
}

type faultKind int

const (
	faultKill faultKind = iota
	faultPause
)

// runFailoverWorkload produces for duration while injecting faults into
// the leader of some partition every interval, then checks everything.
func runFailoverWorkload(t *testing.T, fault faultKind, duration, interval, downtime time.Duration, faults int, extraArgs []string) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: extraArgs})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), duration+5*time.Minute)
	defer cancel()
	const topic, partitions = "orders", int32(6)
	w, stopWorkload := startWorkload(t, ctx, cl, topic, partitions, 5*time.Minute)

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	t.Logf("fault seed %d", seed)
	start := time.Now()
	var stallMu sync.Mutex
	var stalls []time.Duration
	var restarts, measures sync.WaitGroup
	next := start
	for i := 0; i < faults && time.Since(start) < duration; i++ {
		next = next.Add(interval)
		time.Sleep(time.Until(next))
		target := int32(rng.IntN(int(partitions)))
		ls, _ := leaders(t, ctx, cl, topic)
		victimID := ls[target]
		victim := nodeByID(c, victimID)
		if victim == nil || !victim.Running() || victim.Paused() {
			continue
		}
		var led []int32
		for part, l := range ls {
			if l == victimID {
				led = append(led, int32(part))
			}
		}
		at := time.Now()
		if fault == faultKill {
			require.NoError(t, victim.Kill())
		} else {
			require.NoError(t, victim.Pause())
		}
		restarts.Go(func() {
			time.Sleep(downtime)
			if fault == faultKill {
				require.NoError(t, victim.Start())
			} else {
				require.NoError(t, victim.Resume())
			}
		})
		// The stall: until every partition the victim led acknowledged
		// again.
		measures.Go(func() {
			deadline := at.Add(2 * time.Minute)
			var stall time.Duration
			for _, part := range led {
				for time.Now().Before(deadline) {
					w.mu.Lock()
					last := w.lastAck[part]
					w.mu.Unlock()
					if last.After(at) {
						stall = max(stall, last.Sub(at))
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			stallMu.Lock()
			stalls = append(stalls, stall)
			stallMu.Unlock()
			t.Logf("fault at %v: %s node %d (led partitions %v); acknowledgements resumed after %v", at.Sub(start).Round(time.Millisecond),
				map[faultKind]string{faultKill: "SIGKILL", faultPause: "SIGSTOP"}[fault], victimID, led, stall.Round(time.Millisecond))
		})
	}
	for time.Since(start) < duration {
		time.Sleep(100 * time.Millisecond)
	}
	acked, failed := stopWorkload()
	elapsed := time.Since(start)
	restarts.Wait()
	measures.Wait()
	require.NoError(t, c.WaitHealthy(ctx, 60*time.Second))

	t.Logf("produced %d records in %v: %d acknowledged (%.0f records/s), %d failed", w.produced, elapsed.Round(time.Millisecond),
		len(acked), float64(len(acked))/elapsed.Seconds(), failed)
	t.Logf("longest stall per fault: %v (max %v)", roundAll(stalls), percentile(stalls, 1).Round(time.Millisecond))

	waitFullISR(t, ctx, cl, topic)
	read := readAll(t, ctx, cl, topic, partitions)
	total := 0
	for _, recs := range read {
		total += len(recs)
	}
	dups := checkHistory(t, acked, read)
	t.Logf("read back %d records: every acknowledged record present at its offset; %d duplicates from retries", total, dups)
	// The producer is idempotent (the default): retries across the faults
	// write nothing twice, nothing is lost, and each partition holds its
	// records in the order they were sent.
	require.Zero(t, dups, "duplicates")
	require.Zero(t, failed, "records not acknowledged")
	require.Equal(t, int(w.produced), total, "every produced record read back once")
	for p, recs := range read {
		for i := 1; i < len(recs); i++ {
			require.Greater(t, recs[i].seq, recs[i-1].seq, "partition %d: record %d after %d", p, recs[i].seq, recs[i-1].seq)
		}
	}
	t.Logf("0 duplicates, 0 lost, every partition in send order")
	checkReplicasIdentical(t, ctx, c, cl, topic, partitions)
	t.Logf("replicas byte-identical below the high watermark")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// Three storage nodes, RF=3, min.insync.replicas=2, acks=all: produce for
// 60 s while SIGKILLing the leader of some partition every 3 s (restarted 1 s
// later), then read everything back.
func TestReplicatedProduceSurvivesLeaderKills(t *testing.T) {
	runFailoverWorkload(t, faultKill, 60*time.Second, 3*time.Second, time.Second, 20, nil)
}

// The same with SIGSTOP: every 8 s a leader is paused for 5 s, past its
// session (3 s here), and comes
// back as a zombie; it must never acknowledge a write after losing
// leadership, or that write would be missing from what is read back.
func TestZombieLeaderNeverAcknowledges(t *testing.T) {
	runFailoverWorkload(t, faultPause, 50*time.Second, 8*time.Second, 5*time.Second, 6, fastSessions)
}

// replicaStates asks a node for its replicas.
func replicaStates(t *testing.T, ctx context.Context, cl *client.Client, addr string) []*replicationv1.ReplicaState {
	conn, err := cl.Conn(addr)
	require.NoError(t, err)
	resp, err := replicationv1.NewReplicationServiceClient(conn).DescribeReplicas(ctx, &replicationv1.DescribeReplicasRequest{})
	require.NoError(t, err)
	return resp.GetReplicas()
}

// oneRecord is a single plain record whose key names its origin.
func oneRecord(key string) *commonv1.Records {
	return &commonv1.Records{Records: []*commonv1.Record{{Key: []byte(key), Value: []byte("-1")}}}
}

// Replication can run in processes of its own: storage nodes without the
// replication role, and two replication workers sharing them. Produce with
// acks=all completes only through the workers, and the replicas end up
// identical.
func TestReplicationWorkersInTheirOwnProcesses(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, Workers: 2,
		StorageRoles: role.Set{role.StorageNode, role.GroupCoordinator, role.TransactionCoordinator}})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, partitions = "remote", int32(3)
	_, err := cl.CreateTopic(ctx, topic, partitions, 3, map[string]string{"min.insync.replicas": "3"})
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	var recs []*client.Record
	for i := range 20000 {
		recs = append(recs, &client.Record{Topic: topic, Partition: -1, Key: []byte(strconv.Itoa(i % 100)), Value: []byte(strconv.Itoa(i))})
	}
	res, err := p.ProduceSync(ctx, recs...)
	require.NoError(t, err, "acks=all with min.insync.replicas=3 needs both followers of every partition")
	require.NoError(t, p.Close(ctx))
	var acked []ack
	for i, r := range res {
		acked = append(acked, ack{key: string(recs[i].Key), seq: int64(i), part: r.Partition, offset: r.Offset})
	}
	waitFullISR(t, ctx, cl, topic)
	checkHistory(t, acked, readAll(t, ctx, cl, topic, partitions))
	checkReplicasIdentical(t, ctx, c, cl, topic, partitions)
}
