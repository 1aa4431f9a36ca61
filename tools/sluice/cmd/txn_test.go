package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestParseTxnStates(t *testing.T) {
	got, err := parseTxnStates([]string{"ongoing", "PREPARE_COMMIT", "complete-abort", "PrepareEpochFence"})
	require.NoError(t, err)
	require.Equal(t, []txnv1.TransactionState{txnv1.TransactionState_TRANSACTION_STATE_ONGOING, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT,
		txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_EPOCH_FENCE}, got)
	_, err = parseTxnStates([]string{"open"})
	require.ErrorContains(t, err, `--state "open": want one of Empty, Ongoing, PrepareCommit`)
	require.Equal(t, "PrepareAbort", txnStateName(txnv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT))
}

var (
	tp0   = &commonv1.TopicPartition{Topic: "t", Partition: 0}
	tp1   = &commonv1.TopicPartition{Topic: "t", Partition: 1}
	ongo  = txnv1.TransactionState_TRANSACTION_STATE_ONGOING
	prepC = txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT
)

func desc(id string, pid int64, epoch int32, state txnv1.TransactionState, tps ...*commonv1.TopicPartition) *txnv1.TransactionDescription {
	return &txnv1.TransactionDescription{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, State: state, Partitions: tps, StartTimeMs: -1}
}

// A transaction open on a partition is run by a coordinator only if the
// coordinator's transaction is the producer's, includes the partition and
// is at the partition's epoch (or ending, with the epoch bumped).
func TestTxnOwner(t *testing.T) {
	p := &storagev1.ProducerState{ProducerId: 7, ProducerEpoch: 3, CurrentTxnStartOffset: 10}
	for _, tc := range []struct {
		name  string
		descs []*txnv1.TransactionDescription
		owner string
	}{
		{"ongoing with the partition", []*txnv1.TransactionDescription{desc("x", 7, 3, ongo, tp1, tp0)}, "x"},
		{"no coordinator lists it", nil, ""},
		{"another producer id", []*txnv1.TransactionDescription{desc("x", 8, 3, ongo, tp0)}, ""},
		{"without the partition", []*txnv1.TransactionDescription{desc("x", 7, 3, ongo, tp1)}, ""},
		{"a later transaction of the producer", []*txnv1.TransactionDescription{desc("x", 7, 4, ongo, tp0)}, ""},
		{"ending, epoch bumped", []*txnv1.TransactionDescription{desc("x", 7, 4, prepC, tp0)}, "x"},
		{"ended", []*txnv1.TransactionDescription{desc("x", 7, 4, txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT, tp0)}, ""},
		{"description failed", []*txnv1.TransactionDescription{{TransactionalId: "x", ProducerId: 7, ProducerEpoch: 3, State: ongo,
			Partitions: []*commonv1.TopicPartition{tp0}, Error: errs.New(errs.NotCoordinator, "moved").Proto()}}, ""},
	} {
		got := txnOwner(tc.descs, tp0, p)
		require.Equal(t, tc.owner, got.GetTransactionalId(), tc.name)
	}
}

func TestClassifyOpen(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	fresh := &storagev1.ProducerState{ProducerId: 1, ProducerEpoch: 0, CurrentTxnStartOffset: 5, LastTimestampMs: now.UnixMilli() - 1000}
	old := &storagev1.ProducerState{ProducerId: 2, ProducerEpoch: 1, CoordinatorEpoch: 4, CurrentTxnStartOffset: 9, LastTimestampMs: now.UnixMilli() - 120_000}
	orphan := &storagev1.ProducerState{ProducerId: 3, ProducerEpoch: 0, CurrentTxnStartOffset: 2, LastTimestampMs: now.UnixMilli() - 500}
	open := []openTxn{{tp1, fresh}, {tp0, old}, {tp1, orphan}}
	descs := []*txnv1.TransactionDescription{desc("a", 1, 0, ongo, tp1), desc("b", 2, 1, ongo, tp0)}

	rows := classifyOpen(open, descs, time.Minute, now)
	require.Equal(t, []hangingRow{
		{Topic: "t", Partition: 0, ProducerID: 2, ProducerEpoch: 1, CoordinatorEpoch: 4, StartOffset: 9, LastTimestampMs: old.LastTimestampMs,
			DurationMs: 120_000, TransactionalID: "b", Reason: "long-running"},
		{Topic: "t", Partition: 1, ProducerID: 3, StartOffset: 2, LastTimestampMs: orphan.LastTimestampMs, DurationMs: 500, Reason: "hanging"},
	}, rows, "the fresh transaction its coordinator runs is left out")

	require.Len(t, classifyOpen(open, descs, 0, now), 3, "threshold 0 reports every open transaction")
	require.Len(t, classifyOpen(open, nil, time.Hour, now), 3, "no coordinator runs any")
}

// Mistakes in the transaction commands' arguments are reported before the
// cluster is contacted: the bootstrap address has nobody listening.
func TestTxnCommandFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"txn", "abort"}, "say which transaction to abort"},
		{[]string{"txn", "abort", "a", "b"}, "say which transaction to abort"},
		{[]string{"txn", "abort", "x", "--topic", "t", "--partition", "0", "--producer-id", "1"}, "not both"},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0"}, "--topic, --partition and --producer-id together"},
		{[]string{"txn", "abort", "--producer-id", "4"}, "--topic, --partition and --producer-id together"},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "-1", "--producer-id", "1"}, "must not be negative"},
		{[]string{"txn", "abort", "x", "--force"}, "--force applies to an abort by --topic"},
		{[]string{"txn", "list", "--state", "open"}, "--state"},
		{[]string{"txn", "list", "--min-duration", "-1s"}, "must not be negative"},
		{[]string{"txn", "list", "--producer-id", "x"}, "invalid argument"},
		{[]string{"txn", "describe"}, "requires at least 1 arg"},
		{[]string{"txn", "find-hanging", "--topic", "t:x"}, "not a partition number"},
		{[]string{"txn", "find-hanging", "--threshold", "-5m"}, "must not be negative"},
		{[]string{"producers", "describe", "t"}, "accepts 2 arg"},
		{[]string{"producers", "describe", "t", "x"}, `partition "x": want a partition number`},
		{[]string{"producers", "describe", "t", "0", "--node", "2", "--any-replica"}, "give one of them"},
	} {
		root, _ := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"--bootstrap", "127.0.0.1:1", "--request-timeout", "100ms"}, tc.args...))
		err := root.Execute()
		require.ErrorContains(t, err, tc.want, strings.Join(tc.args, " "))
	}
}

func TestPrintTxnRows(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	d := desc("pay-1", 42, 5, ongo, tp0, tp1)
	d.TransactionTimeoutMs, d.StartTimeMs = 60_000, now.UnixMilli()-90_000
	rows := []txnJSON{
		txnRow("pay-1", 42, ongo, d, now),
		txnRow("idle", 43, txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT, desc("idle", 43, 2, txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT), now),
		txnRow("gone", 44, ongo, &txnv1.TransactionDescription{TransactionalId: "gone", Error: errs.New(errs.NotCoordinator, "moved").Proto()}, now),
	}
	var b bytes.Buffer
	g := &globals{output: "text"}
	require.NoError(t, printTxnRows(g, &b, rows, false))
	out := b.String()
	require.Regexp(t, `TRANSACTIONAL-ID\s+PRODUCER-ID\s+STATE\s+AGE\s+PARTITIONS`, out)
	require.Regexp(t, `pay-1\s+42\s+Ongoing\s+1m30s\s+t-0,t-1\n`, out)
	require.Regexp(t, `idle\s+43\s+CompleteCommit\s+-\s+-\n`, out)
	require.Regexp(t, `gone\s+44\s+Ongoing\s+-\s+-\n`, out, "a failed description keeps the listing's view")

	b.Reset()
	require.NoError(t, printTxnRows(g, &b, rows[:1], true))
	require.Regexp(t, `pay-1\s+42\s+5\s+Ongoing\s+1m0s\s+2027-01-15T07:58:30.000Z\s+1m30s\s+t-0,t-1`, b.String())

	b.Reset()
	g.output = "json"
	require.NoError(t, printTxnRows(g, &b, rows, false))
	require.Contains(t, b.String(), `"transactionalId": "pay-1"`)
	require.Contains(t, b.String(), `"durationMs": 90000`)
	require.Contains(t, b.String(), `"error": "NOT_COORDINATOR: moved"`)
}
