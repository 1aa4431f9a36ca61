package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// Transactions through the Kafka listener with real Kafka clients, on one
// cluster: a controller and one storage node that coordinates groups and
// transactions.
func TestKafkaTransactions(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, topic := range []string{"ktxn-kgo", "ktxn-zombie", "ktxn-sarama"} {
		_, err := cl.CreateTopic(ctx, topic, 3, 1, nil)
		require.NoError(t, err)
	}

	t.Run("FranzGoCommitAndAbort", func(t *testing.T) { ktxnFranzGoCommitAndAbort(t, ctx, c) })
	t.Run("FranzGoZombieIsFenced", func(t *testing.T) { ktxnFranzGoZombie(t, ctx, c) })
	t.Run("SaramaCommitAndAbort", func(t *testing.T) { ktxnSaramaCommitAndAbort(t, ctx, c) })
}

// ktxnClient is a kgo client of the cluster's Kafka listeners.
func ktxnClient(t *testing.T, c *devcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBootstrap()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// ktxnRead reads topic from the start with the given isolation until want
// records came and then nothing more for a second, and returns the values.
func ktxnRead(t *testing.T, ctx context.Context, c *devcluster.Cluster, topic string, iso kgo.IsolationLevel, want int) []string {
	t.Helper()
	cl := ktxnClient(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	var out []string
	for {
		wait := 20 * time.Second
		if len(out) >= want {
			wait = time.Second // the quiet period that shows nothing more comes
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				require.NoError(t, err, "fetching %s-%d", topic, p)
			}
		})
		if fetches.NumRecords() == 0 {
			require.GreaterOrEqual(t, len(out), want, "%s: records read so far: %v", topic, out)
			return out
		}
		fetches.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
}

func ktxnValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// ktxnProduce produces values to topic (spread over its partitions) in the
// client's open transaction.
func ktxnProduce(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, values []string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// A franz-go transactional producer commits, aborts and commits again; a
// read_committed consumer sees the committed records only, a
// read_uncommitted one all of them. kadm describes and lists the
// transactional id.
func ktxnFranzGoCommitAndAbort(t *testing.T, ctx context.Context, c *devcluster.Cluster) {
	const topic = "ktxn-kgo"
	p := ktxnClient(t, c, kgo.TransactionalID("ktxn-kgo-producer"), kgo.TransactionTimeout(20*time.Second), kgo.DefaultProduceTopic(topic))
	var committed []string
	for i, commit := range []bool{true, false, true} {
		values := ktxnValues(fmt.Sprintf("txn%d", i), 50)
		require.NoError(t, p.BeginTransaction())
		ktxnProduce(t, ctx, p, topic, values)
		require.NoError(t, p.EndTransaction(ctx, kgo.TransactionEndTry(commit)), "transaction %d", i)
		if commit {
			committed = append(committed, values...)
		}
	}

	got := ktxnRead(t, ctx, c, topic, kgo.ReadCommitted(), len(committed))
	require.ElementsMatch(t, committed, got, "read_committed sees the committed transactions only")
	all := ktxnRead(t, ctx, c, topic, kgo.ReadUncommitted(), 150)
	require.Len(t, all, 150, "read_uncommitted sees the aborted records too")

	adm := kadm.NewClient(ktxnClient(t, c))
	described, err := adm.DescribeTransactions(ctx, "ktxn-kgo-producer")
	require.NoError(t, err)
	d, ok := described["ktxn-kgo-producer"]
	require.True(t, ok, "described: %v", described)
	require.NoError(t, d.Err)
	require.Equal(t, "CompleteCommit", d.State)
	require.Equal(t, int32(20_000), d.TimeoutMillis)
	listed, err := adm.ListTransactions(ctx, nil, []string{"CompleteCommit"})
	require.NoError(t, err)
	require.Contains(t, listed.TransactionalIDs(), "ktxn-kgo-producer")
	require.Equal(t, d.ProducerID, listed["ktxn-kgo-producer"].ProducerID)
}

// Two franz-go producers with one transactional id: the second one's
// InitProducerId fences the first and aborts its open transaction; the
// first one's commit fails fenced and its records are never visible to
// read_committed readers, the second one commits.
func ktxnFranzGoZombie(t *testing.T, ctx context.Context, c *devcluster.Cluster) {
	const topic = "ktxn-zombie"
	zombie := ktxnClient(t, c, kgo.TransactionalID("ktxn-zombie"), kgo.DefaultProduceTopic(topic))
	require.NoError(t, zombie.BeginTransaction())
	ktxnProduce(t, ctx, zombie, topic, ktxnValues("zombie", 20))

	successor := ktxnClient(t, c, kgo.TransactionalID("ktxn-zombie"), kgo.DefaultProduceTopic(topic))
	require.NoError(t, successor.BeginTransaction())
	ktxnProduce(t, ctx, successor, topic, ktxnValues("successor", 20))

	// kadm sees the successor's open transaction and its partitions.
	described, err := kadm.NewClient(ktxnClient(t, c)).DescribeTransactions(ctx, "ktxn-zombie")
	require.NoError(t, err)
	d := described["ktxn-zombie"]
	require.NoError(t, d.Err)
	require.Equal(t, "Ongoing", d.State)
	require.NotEmpty(t, d.Topics[topic], "the open transaction's partitions")
	require.Positive(t, d.StartTimestamp)

	err = zombie.EndTransaction(ctx, kgo.TryCommit)
	require.Error(t, err, "the fenced producer's commit")
	require.True(t, errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch), "fenced: %v", err)
	require.NoError(t, successor.EndTransaction(ctx, kgo.TryCommit))

	got := ktxnRead(t, ctx, c, topic, kgo.ReadCommitted(), 20)
	require.ElementsMatch(t, ktxnValues("successor", 20), got)
}

// An IBM/sarama transactional producer commits and aborts; read_committed
// readers see the committed transactions only.
func ktxnSaramaCommitAndAbort(t *testing.T, ctx context.Context, c *devcluster.Cluster) {
	const topic = "ktxn-sarama"
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "ktxn-sarama"
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = "ktxn-sarama-producer"
	cfg.Producer.Transaction.Timeout = 10 * time.Second
	cfg.Net.MaxOpenRequests = 1
	cfg.Metadata.AllowAutoTopicCreation = false
	p, err := sarama.NewSyncProducer(c.KafkaBootstrap(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	var committed []string
	for i, commit := range []bool{true, false, true, false} {
		require.NoError(t, p.BeginTxn())
		values := ktxnValues(fmt.Sprintf("sarama%d", i), 30)
		var msgs []*sarama.ProducerMessage
		for _, v := range values {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(v), Value: sarama.StringEncoder(v)})
		}
		require.NoError(t, p.SendMessages(msgs), "transaction %d", i)
		if commit {
			require.NoError(t, p.CommitTxn(), "transaction %d", i)
			committed = append(committed, values...)
		} else {
			require.NoError(t, p.AbortTxn(), "transaction %d", i)
		}
	}
	got := ktxnRead(t, ctx, c, topic, kgo.ReadCommitted(), len(committed))
	require.ElementsMatch(t, committed, got)
}

// kafkaCopier runs one kafkacopier process, restarting it when it exits
// on its own (a failed transaction) until stopped.
type kafkaCopier struct {
	t       *testing.T
	args    []string
	journal string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

func startKafkaCopier(t *testing.T, c *devcluster.Cluster, dir, tid string) *kafkaCopier {
	w := &kafkaCopier{t: t, journal: filepath.Join(dir, tid+".jsonl")}
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
	w.args = []string{"--bootstrap", strings.Join(c.KafkaBootstrap(), ","), "--group", "ktxn-copy", "--in", "ktxn-copy-in",
		"--out-topic", "ktxn-copy-out", "--transactional-id", tid, "--out", w.journal, "--max-poll-records", "300"}
	w.start()
	return w
}

func (w *kafkaCopier) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	cmd := exec.Command(kafkaCopierProgram.get(w.t), w.args...)
	stderr, err := os.OpenFile(w.journal+".stderr", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(w.t, err)
	cmd.Stderr = stderr
	require.NoError(w.t, cmd.Start())
	_ = stderr.Close() // the child holds its own descriptor
	w.cmd, w.exited = cmd, make(chan struct{})
	exited := w.exited
	go func() {
		_ = cmd.Wait() // the exit code decides
		w.mu.Lock()
		restart := !w.stopped && cmd.ProcessState.ExitCode() == 2
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

// kill SIGKILLs the copier and starts it again.
func (w *kafkaCopier) kill() {
	w.mu.Lock()
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL) // it may have exited already
	<-exited
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if !stopped {
		w.start()
	}
}

func (w *kafkaCopier) stop() {
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

// A franz-go GroupTransactSession copy job (read_committed input, output
// and input offsets committed in one transaction) runs as its own process
// and is SIGKILLed twice mid-run; restarted with the same transactional id
// it fences its predecessor's open transaction. At the end a
// read_committed reader of the output sees every input record exactly
// once.
func TestKafkaTransactSessionCopySurvivesKills(t *testing.T) {
	sideBySide(t)
	const n = 20_000
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, topic := range []string{"ktxn-copy-in", "ktxn-copy-out"} {
		_, err := cl.CreateTopic(ctx, topic, 4, 1, nil)
		require.NoError(t, err)
	}
	if err := ktxnSecondTransactionOffsets(t, ctx, c, "ktxn-copy-in"); err != nil {
		// Every Kafka client below EndTxn v5 (franz-go without KIP-890
		// part 2, sarama, librdkafka) runs its transactions at one epoch;
		// a copy job commits offsets in each. Remove this skip once the
		// group coordinator takes them (it must verify the offsets
		// partition is in the producer's ongoing transaction, as Kafka
		// does, instead of refusing every epoch a marker already ended).
		t.Skipf("the group coordinator refuses offsets of a second transaction at the same producer epoch (%v); the copy job cannot run", err)
	}
	in := ktxnClient(t, c, kgo.DefaultProduceTopic("ktxn-copy-in"))
	var recs []*kgo.Record
	for i := range n {
		v := []byte(strconv.Itoa(i))
		recs = append(recs, &kgo.Record{Key: v, Value: v})
	}
	require.NoError(t, in.ProduceSync(ctx, recs...).FirstErr())

	w := startKafkaCopier(t, c, t.TempDir(), "ktxn-copier")
	defer w.stop()
	out := ktxnClient(t, c, kgo.ConsumeTopics("ktxn-copy-out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]int{}
	total := 0
	kills := 0
	for len(seen) < n {
		require.NoError(t, ctx.Err(), "copied %d of %d (%d kills); journal %s", len(seen), n, kills, w.journal)
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fetches := out.PollFetches(pctx)
		pcancel()
		fetches.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			total++
		})
		// Kill the copier twice, at about a quarter and at about half
		// of the copy, likely inside a transaction.
		if (kills == 0 && len(seen) >= n/4) || (kills == 1 && len(seen) >= n/2) {
			w.kill()
			kills++
			t.Logf("copier SIGKILLed at %d copied records", len(seen))
		}
	}
	w.stop()
	// Nothing more may come: the whole input was copied once.
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fetches := out.PollFetches(pctx)
		pcancel()
		if fetches.NumRecords() == 0 {
			break
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			total++
		})
	}
	require.Equal(t, 2, kills)
	var dups []string
	for v, k := range seen {
		if k != 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", v, k))
		}
	}
	require.Empty(t, dups, "values copied more than once under read_committed")
	require.Len(t, seen, n)
	require.Equal(t, n, total)
	counts := journalCounts(t, w.journal)
	t.Logf("copier journal: %v", counts)
	require.GreaterOrEqual(t, counts["start"], 3)
}

// ktxnSecondTransactionOffsets runs two transactions of one producer, as a
// Kafka client below EndTxn v5 does (same producer epoch), each committing
// an offset of topic's partition 0 for a group, and returns the error of
// the offset commit that failed, if any.
func ktxnSecondTransactionOffsets(t *testing.T, ctx context.Context, c *devcluster.Cluster, topic string) error {
	t.Helper()
	// Kafka 3.9's versions: EndTxn v4, without KIP-890 part 2.
	cl := ktxnClient(t, c, kgo.MaxVersions(kversion.V3_9_0()))
	tid, group := "ktxn-probe", "ktxn-probe"
	// The group's coordinator first: Sluice creates the offsets topic on
	// a group's first FindCoordinator, and AddOffsetsToTxn needs it.
	require.Eventually(t, func() bool {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey, fc.CoordinatorKeys = group, []string{group}
		resp, err := fc.RequestWith(ctx, cl)
		if err != nil {
			return false
		}
		if len(resp.Coordinators) > 0 {
			return resp.Coordinators[0].ErrorCode == 0
		}
		return resp.ErrorCode == 0
	}, 20*time.Second, 100*time.Millisecond, "the group's coordinator")
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &tid, 10_000
	ir, err := init.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	for i := range 2 {
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = tid, ir.ProducerID, ir.ProducerEpoch, group
		ar, err := add.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(ar.ErrorCode), "AddOffsetsToTxn of transaction %d", i)

		commit := kmsg.NewPtrTxnOffsetCommitRequest()
		commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch, commit.Generation = tid, group, ir.ProducerID, ir.ProducerEpoch, -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, int64(i)
		rt.Partitions = append(rt.Partitions, rp)
		commit.Topics = append(commit.Topics, rt)
		cr, err := commit.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Len(t, cr.Topics, 1)
		require.Len(t, cr.Topics[0].Partitions, 1)
		offsetErr := kerr.ErrorForCode(cr.Topics[0].Partitions[0].ErrorCode)

		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = tid, ir.ProducerID, ir.ProducerEpoch, offsetErr == nil
		er, err := end.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(er.ErrorCode), "EndTxn of transaction %d", i)
		require.Equal(t, int16(4), er.Version)
		if offsetErr != nil {
			return fmt.Errorf("transaction %d: %w", i, offsetErr)
		}
	}
	return nil
}
