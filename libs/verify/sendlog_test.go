package verify

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/verify/check"
)

func idemSend(value string, offset int64) check.Txn {
	return check.Txn{Process: 1, Commit: true, Idempotent: true, Outcome: check.OK, Epoch: -1,
		Sends: []check.Send{{Topic: "t", Partition: 0, Key: "k", Value: value, Acked: true, Offset: offset}}}
}

// TestSendLogRecordsInSendOrder: an idempotent producer's first batch is
// answered with a retriable error although the leader appended it at 10,
// the second batch is acknowledged at 11, and the retry of the first is
// answered with its original offset 10. Its callbacks run in the order 11,
// 10. The history must keep send order, which the checker finds monotonic;
// recorded in callback order it would report a nonmonotonic send.
func TestSendLogRecordsInSendOrder(t *testing.T) {
	rec := &check.Recorder{}
	l := &sendLog{record: func(tx check.Txn) { rec.Txn(tx) }}
	first, second, third := l.add(), l.add(), l.add()
	l.done(second, idemSend("1-2", 11))
	require.Empty(t, rec.History().Txns, "held until the earlier send has its outcome")
	l.done(first, idemSend("1-1", 10))
	l.done(third, idemSend("1-3", 12))
	h := rec.History()
	var got []string
	for _, tx := range h.Txns {
		got = append(got, tx.Sends[0].Value)
	}
	require.Equal(t, []string{"1-1", "1-2", "1-3"}, got)
	res, err := check.Check(h, check.Options{})
	require.NoError(t, err)
	require.True(t, res.Valid(), "%v", res.Anomalies)

	// The same outcomes in callback order: the checker's complaint of the
	// failed run.
	res, err = check.Check(check.History{Txns: []check.Txn{idemSend("1-2", 11), idemSend("1-1", 10), idemSend("1-3", 12)}},
		check.Options{})
	require.NoError(t, err)
	require.Equal(t, map[check.Kind]int{check.NonMonotonicSend: 1}, res.Counts())
}

// TestSendLogFlushAll: outcomes held behind a send whose callback never
// came are recorded at the end, and a callback after that is recorded
// when it comes.
func TestSendLogFlushAll(t *testing.T) {
	rec := &check.Recorder{}
	l := &sendLog{record: func(tx check.Txn) { rec.Txn(tx) }}
	first, second := l.add(), l.add()
	l.done(second, idemSend("1-2", 11))
	require.Empty(t, rec.History().Txns)
	l.flushAll()
	require.Len(t, rec.History().Txns, 1)
	l.done(first, idemSend("1-1", 10))
	require.Len(t, rec.History().Txns, 2)
	third := l.add()
	l.done(third, idemSend("1-3", 12))
	require.Len(t, rec.History().Txns, 3)
}
