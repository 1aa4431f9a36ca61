package integration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/verify"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// verify.Run against a one-process cluster (what `make run` starts) finds
// no anomaly, exercises every kind of operation, and writes its report;
// `sluice verify --check-only` re-checks the saved history with the same
// verdict, and a history with an aborted read planted in it fails with exit
// status 1.
func TestVerifyAgainstCluster(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true})
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	rep, err := verify.Run(ctx, verify.Config{Bootstrap: c.Bootstrap(), Duration: 12 * time.Second, Seed: 1, Rate: 300,
		Out: out, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err, logs.String())
	require.True(t, rep.Valid(), "%s\n%s", rep.Summary(), logs.String())

	for _, kind := range []string{verify.OpProducePlain, verify.OpProduceIdempotent, verify.OpTxn, verify.OpInit,
		verify.OpPoll, verify.OpGroupCommit, verify.OpOffsetFetch} {
		require.Positive(t, rep.Ops[kind].OK, "no %s ended OK:\n%s", kind, rep.Summary())
	}
	require.Positive(t, rep.Result.Aborted, "some transactions abort on purpose")
	require.Len(t, rep.Result.Copies, 1)
	require.Positive(t, rep.Result.Copies[0].Copied, "the read-process-write copy copied records")
	require.Zero(t, rep.Result.Copies[0].Missing)
	for _, f := range []string{rep.Files.Summary, rep.Files.Result, rep.Files.History, rep.Files.Timeline} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.NotZero(t, st.Size(), f)
	}
	sum, err := os.ReadFile(rep.Files.Summary)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(sum), "VALID\n"), string(sum))

	// Re-check the saved history with the CLI.
	code, stdout := runVerifyCLI(t, "--check-only", rep.Files.History)
	require.Equal(t, 0, code, stdout)
	require.True(t, strings.HasPrefix(stdout, "VALID\n"), stdout)

	// Plant a read_committed read of an aborted transaction's value.
	f, err := os.Open(rep.Files.History)
	require.NoError(t, err)
	h, err := check.ReadHistory(f)
	f.Close()
	require.NoError(t, err)
	// An aborted transaction with an acknowledged send if the run has one,
	// else any aborted transaction's send, read at an offset past every
	// partition's end (1 in 5 transactions aborts, but a short run does not
	// always see an abort's produce acknowledged).
	var planted bool
	aborted := func(txn check.Txn, acked bool) bool {
		return txn.TransactionalID != "" && !txn.Commit && len(txn.Sends) > 0 && (txn.Sends[0].Acked || !acked)
	}
	for _, txn := range h.Txns {
		if aborted(txn, true) {
			s := txn.Sends[0]
			h.Polls = append(h.Polls, check.Poll{Process: 9999, Start: txn.End + 1, End: txn.End + 2, Isolation: check.ReadCommitted,
				Seeks: []check.Position{{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset}},
				Reads: []check.Read{{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Key: s.Key, Value: s.Value}}})
			planted = true
			break
		}
	}
	for i := 0; !planted && i < len(h.Txns); i++ {
		if txn := h.Txns[i]; aborted(txn, false) {
			s := txn.Sends[0]
			s.Offset = 1 << 40
			h.Polls = append(h.Polls, check.Poll{Process: 9999, Start: txn.End + 1, End: txn.End + 2, Isolation: check.ReadCommitted,
				Seeks: []check.Position{{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset}},
				Reads: []check.Read{{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Key: s.Key, Value: s.Value}}})
			planted = true
		}
	}
	require.True(t, planted, "the run has an aborted transaction with a send")
	bad := filepath.Join(t.TempDir(), "history.json")
	w, err := os.Create(bad)
	require.NoError(t, err)
	require.NoError(t, h.Write(w))
	require.NoError(t, w.Close())
	code, stdout = runVerifyCLI(t, "--check-only", bad)
	require.Equal(t, 1, code, stdout)
	require.Regexp(t, `^INVALID: \d+ anomal(y|ies) \(.*aborted-read.*\)\n`, stdout)

	// Usage errors exit with 2.
	code, _ = runVerifyCLI(t, "--check-only", filepath.Join(t.TempDir(), "missing.json"))
	require.Equal(t, 2, code)
	code, _ = runVerifyCLI(t, "--producers", "plain=x")
	require.Equal(t, 2, code)
	code, _ = runVerifyCLI(t, "--no-such-flag")
	require.Equal(t, 2, code)
}

// runVerifyCLI runs `sluice verify` with args and returns its exit status
// and standard output.
func runVerifyCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"verify"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String() + errOut.String()
	}
	require.NoError(t, err, errOut.String())
	return 0, out.String()
}
