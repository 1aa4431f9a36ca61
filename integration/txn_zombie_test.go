package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
)

// waitJournal waits until a copier's journal has a line of kind.
func waitJournal(t *testing.T, w *copier, kind string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return journalCounts(t, w.journal)[kind] > 0 }, within, 50*time.Millisecond,
		"no %q line in %s", kind, w.journal)
}

// eosTopics creates the copier's input (filled with n numbered records)
// and output topics.
func eosTopics(t *testing.T, ctx context.Context, cl *client.Client, n int) {
	for _, topic := range []string{"eos-in", "eos-out"} {
		_, err := cl.CreateTopic(ctx, topic, 6, 3, map[string]string{"min.insync.replicas": "2"})
		require.NoError(t, err)
	}
	produceNumbered(t, ctx, cl, "eos-in", n)
}

// requireExactlyOnce checks that read_committed readers of the output see
// each of the n inputs once, and returns how many aborted records
// read_uncommitted readers see.
func requireExactlyOnce(t *testing.T, cl *client.Client, n int) int {
	t.Helper()
	committed, total := countCopies(t, cl, "eos-out", true)
	require.Len(t, committed, n)
	require.Equal(t, n, total, "an input was copied twice")
	_, all := countCopies(t, cl, "eos-out", false)
	return all - total
}

// Zombie fencing: a copier SIGSTOPped with a transaction open (its offsets
// sent, its commit not) stays stopped past its transaction timeout and its
// group session while a replacement with the same transactional id takes
// over and copies everything. Resumed, the zombie's commit fails with
// PRODUCER_FENCED (it exits with status 3) and nothing it wrote becomes
// visible to read_committed readers.
func TestZombieCopierIsFenced(t *testing.T) {
	sideBySide(t)
	const n = 3000
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eosTopics(t, ctx, cl, n)
	dir := t.TempDir()

	zombie := startCopier(t, c, dir, "zombie", "--transaction-timeout", "3s", "--pause-before-commit", "8s", "--fetch-bytes", "4096")
	defer zombie.stop()
	waitJournal(t, zombie, "prepared", time.Minute)
	zombie.signal(syscall.SIGSTOP)
	t.Log("zombie stopped with a transaction open")

	// Past the transaction timeout the coordinator aborts the transaction
	// and bumps the epoch (waited for below); the group drops the member
	// past its session timeout while the replacement joins. The replacement
	// fences whatever is left by InitTransactions.
	descs, err := cl.DescribeTransactions(ctx, "zombie")
	require.NoError(t, err)
	if st := descs[0].GetState(); st == txnv1.TransactionState_TRANSACTION_STATE_ONGOING {
		zombieEpoch := descs[0].GetProducerEpoch()
		require.Eventually(t, func() bool {
			descs, err := cl.DescribeTransactions(ctx, "zombie")
			return err == nil && descs[0].GetState() == txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT &&
				descs[0].GetProducerEpoch() > zombieEpoch
		}, 30*time.Second, 100*time.Millisecond, "the coordinator did not abort the timed-out transaction")
	} else {
		// A slow machine: the timeout passed before the first look.
		require.Contains(t, []txnv1.TransactionState{txnv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT,
			txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT}, st, "the zombie's transaction is neither open nor aborted")
	}
	fresh := startCopierAs(t, c, dir, "replacement", "zombie")
	defer fresh.stop()
	require.Eventually(t, func() bool {
		counts, _ := countCopies(t, cl, "eos-out", true)
		return len(counts) == n
	}, 3*time.Minute, time.Second, "the replacement did not copy every input")

	zombie.signal(syscall.SIGCONT)
	select {
	case <-zombie.exitedCh():
	case <-time.After(time.Minute):
		t.Fatal("the resumed zombie did not exit")
	}
	require.Equal(t, 3, zombie.exitCodeNow(), "the zombie must fail as fenced")
	require.Positive(t, journalCounts(t, zombie.journal)["fenced"])
	fresh.stop()
	aborted := requireExactlyOnce(t, cl, n)
	require.Positive(t, aborted, "the zombie's records are in the log, aborted")
	t.Logf("ZOMBIE: inputs=%d aborted_records=%d", n, aborted)
}

// exitedCh returns the channel closed when the current process exits.
func (w *copier) exitedCh() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exited
}

// openTxnStarts returns, per output partition, the start offset of the
// open transaction the leader knows of (-1 if none), and the partitions'
// last stable offsets and high watermarks.
func openTxnStarts(t *testing.T, ctx context.Context, cl *client.Client) (open int, lagging int) {
	t.Helper()
	for p := range int32(6) {
		res, err := cl.DescribeProducers(ctx, "eos-out", p, false)
		require.NoError(t, err)
		for _, ps := range res.GetProducers() {
			if ps.GetCurrentTxnStartOffset() >= 0 {
				open++
			}
		}
		hw, err := cl.ListOffset(ctx, "eos-out", p, client.OffsetLatest)
		require.NoError(t, err)
		if res.GetLastStableOffset() < hw {
			lagging++
		}
	}
	return open, lagging
}

// A hanging transaction: a copier dies (SIGKILL) with a transaction open on
// the output partitions, holding their last stable offset back. Its
// transaction timeout aborts it and the LSO catches up with the high
// watermark; with a long timeout, `sluice txn abort` ends one on demand.
func TestHangingTransactionIsAborted(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eosTopics(t, ctx, cl, 3000)
	dir := t.TempDir()

	for _, tc := range []struct {
		name    string
		timeout string
		abort   bool
	}{
		{"timeout", "4s", false},
		{"sluice-txn-abort", "10m", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startCopier(t, c, dir, "hang-"+tc.name, "--transaction-timeout", tc.timeout, "--pause-before-commit", "10m", "--fetch-bytes", "4096")
			waitJournal(t, w, "prepared", time.Minute)
			w.mu.Lock()
			w.stopped = true // no restart
			w.mu.Unlock()
			w.signal(syscall.SIGKILL)
			<-w.exitedCh()
			open, lagging := openTxnStarts(t, ctx, cl)
			require.Positive(t, open, "the dead copier's transaction is open on the output")
			require.Positive(t, lagging, "the open transaction holds the last stable offset back")
			start := time.Now()
			if tc.abort {
				out, err := exec.Command(cluster.CLI(t), "--bootstrap", strings.Join(c.Bootstrap(), ","), "txn", "abort", "hang-"+tc.name).CombinedOutput()
				require.NoError(t, err, "%s", out)
				t.Logf("sluice txn abort: %s", strings.TrimSpace(string(out)))
			}
			require.Eventually(t, func() bool {
				open, lagging := openTxnStarts(t, ctx, cl)
				return open == 0 && lagging == 0
			}, 30*time.Second, 200*time.Millisecond, "the hanging transaction was not aborted")
			t.Logf("HANGING: %s: aborted and LSO caught up %v after the copier died", tc.name, time.Since(start).Round(10*time.Millisecond))
		})
	}
	_ = os.RemoveAll(dir)
}
