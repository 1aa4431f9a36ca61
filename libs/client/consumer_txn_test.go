package client

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/record"
)

func txnTestBatch(t *testing.T, pid, base int64, txn bool, values ...string) []byte {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	if pid >= 0 {
		b.SetProducer(pid, 0, 0)
	}
	b.SetTransactional(txn)
	for _, v := range values {
		require.NoError(t, b.AppendKV(1, nil, []byte(v)))
	}
	out, err := b.Build()
	require.NoError(t, err)
	out = bytes.Clone(out)
	record.SetBaseOffset(out, base)
	return out
}

func txnTestMarker(pid, base int64, t record.ControlType) []byte {
	m := record.AppendEndTxnMarker(nil, pid, 0, t, 0, 1)
	record.SetBaseOffset(m, base)
	return m
}

// filterChunk runs a read_committed chunk through the consumer's filter.
func filterChunk(t *testing.T, chunk []byte, aborted []*storagev1.AbortedTransaction) []string {
	t.Helper()
	f := newAbortFilter(aborted)
	var it record.Iterator
	it.Reset(chunk)
	var out []string
	for it.Next() {
		b, r := it.Batch(), it.Record()
		if b.Attributes.Control() {
			f.marker(b, r)
			continue
		}
		if !f.drops(b) {
			out = append(out, string(r.Value))
		}
	}
	require.NoError(t, it.Err())
	return out
}

// The consumer drops exactly the records of aborted transactions: a
// producer's batches from its aborted transaction's first offset to its
// ABORT marker, not its later transaction, not other producers' interleaved
// batches, not plain records; and a transaction that began before the chunk
// is dropped too.
func TestReadCommittedDropsAbortedTransactions(t *testing.T) {
	chunk := bytes.Join([][]byte{
		txnTestBatch(t, 1, 10, true, "p1-aborted-a"),    // 10
		txnTestBatch(t, 2, 11, true, "p2-committed"),    // 11
		txnTestBatch(t, -1, 12, false, "plain"),         // 12
		txnTestBatch(t, 1, 13, true, "p1-aborted-b"),    // 13
		txnTestBatch(t, 3, 14, true, "p3-aborted-cont"), // 14: its transaction began at 5
		txnTestMarker(1, 15, record.ControlAbort),       // 15
		txnTestMarker(2, 16, record.ControlCommit),      // 16
		txnTestMarker(3, 17, record.ControlAbort),       // 17
		txnTestBatch(t, 1, 18, true, "p1-next-txn"),     // 18
		txnTestBatch(t, 3, 19, true, "p3-next-txn"),     // 19
	}, nil)
	aborted := []*storagev1.AbortedTransaction{{ProducerId: 1, FirstOffset: 10}, {ProducerId: 3, FirstOffset: 5}}
	require.Equal(t, []string{"p2-committed", "plain", "p1-next-txn", "p3-next-txn"}, filterChunk(t, chunk, aborted))
	require.Len(t, filterChunk(t, chunk, nil), 7, "without aborted transactions every data record is read")
}

// A chunk that starts at a producer's ABORT marker (the leader stopped the
// previous chunk at the last stable offset, inside the aborted
// transaction) lists that transaction among its aborted ones, though none
// of its batches is in the chunk: the marker must end it, so the
// producer's next transaction is read. Kafka's consumer consumes the
// aborted list up to every batch, control batches included. Found by
// sluice-chaos seed 2043: a committed transaction skipped by read_committed
// consumers after a leader and coordinator failover.
func TestReadCommittedChunkStartingAtTheAbortMarker(t *testing.T) {
	chunk := bytes.Join([][]byte{
		txnTestMarker(1, 850, record.ControlAbort),      // 850: ends the transaction begun at 841
		txnTestMarker(1, 851, record.ControlAbort),      // 851: the new coordinator's copy
		txnTestBatch(t, 1, 852, true, "p1-committed"),   // 852
		txnTestMarker(1, 853, record.ControlCommit),     // 853
		txnTestBatch(t, 1, 854, true, "p1-aborted-too"), // 854
		txnTestMarker(1, 855, record.ControlAbort),      // 855
	}, nil)
	aborted := []*storagev1.AbortedTransaction{{ProducerId: 1, FirstOffset: 841}, {ProducerId: 1, FirstOffset: 854}}
	require.Equal(t, []string{"p1-committed"}, filterChunk(t, chunk, aborted))
}
