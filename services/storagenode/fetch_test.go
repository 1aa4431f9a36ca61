package storagenode

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage"
)

func testBatch(t *testing.T, base int64, values ...string) []byte {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	for _, v := range values {
		require.NoError(t, b.AppendKV(1, []byte("k"), []byte(v)))
	}
	out, err := b.Build()
	require.NoError(t, err)
	out = bytes.Clone(out)
	record.SetBaseOffset(out, base)
	return out
}

// A plain-records fetch returns the records before a batch it cannot
// decode and reports the batch's offset and error, instead of skipping the
// batch and the rest of the chunk silently.
func TestDecodeRecordsStopsAtUndecodableBatch(t *testing.T) {
	bad := testBatch(t, 5, "x", "y", "z")
	binary.BigEndian.PutUint32(bad[57:], 4) // record count above the records present
	binary.BigEndian.PutUint32(bad[23:], 3) // last offset delta
	record.UpdateCRC(bad)
	chunk := bytes.Join([][]byte{testBatch(t, 0, "a", "b", "c"), testBatch(t, 3, "d", "e"), bad, testBatch(t, 9, "after")}, nil)

	recs, at, err := decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: chunk}}}, 1, nil)
	require.Error(t, err)
	require.Equal(t, errs.InvalidRecord, errs.CodeOf(err))
	require.EqualValues(t, 5, at)
	var offsets []int64
	for _, r := range recs.GetRecords() {
		offsets = append(offsets, r.GetOffset())
	}
	require.Equal(t, []int64{1, 2, 3, 4}, offsets, "records before the bad batch, none of it")

	recs, at, err = decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: bad}}}, 6, nil)
	require.Error(t, err)
	require.EqualValues(t, 5, at, "the offset of the batch holding the fetch offset")
	require.Empty(t, recs.GetRecords())
}

// txnBatch is a transactional batch of producer pid at base.
func txnBatch(t *testing.T, pid, base int64, values ...string) []byte {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(pid, 0, 0)
	b.SetTransactional(true)
	for _, v := range values {
		require.NoError(t, b.AppendKV(1, []byte("k"), []byte(v)))
	}
	out, err := b.Build()
	require.NoError(t, err)
	out = bytes.Clone(out)
	record.SetBaseOffset(out, base)
	return out
}

// A read_committed plain-records fetch drops the batches of aborted
// transactions and the markers, and keeps committed and plain batches and
// other producers' batches in the same range.
func TestDecodeRecordsDropsAbortedTransactions(t *testing.T) {
	marker := record.AppendEndTxnMarker(nil, 5, 0, record.ControlAbort, 0, 1)
	record.SetBaseOffset(marker, 4)
	chunk := bytes.Join([][]byte{
		txnBatch(t, 5, 0, "aborted1", "aborted2"), // 0-1
		txnBatch(t, 6, 2, "committed"),            // 2
		testBatch(t, 3, "plain"),                  // 3
		marker,                                    // 4
		txnBatch(t, 5, 5, "next txn"),             // 5: after the abort
	}, nil)
	aborted := []storage.AbortedTxn{{ProducerID: 5, FirstOffset: 0, LastOffset: 4}}
	recs, _, err := decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: chunk}}}, 0, aborted)
	require.NoError(t, err)
	var values []string
	for _, r := range recs.GetRecords() {
		values = append(values, string(r.GetValue()))
	}
	require.Equal(t, []string{"committed", "plain", "next txn"}, values)

	recs, _, err = decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: chunk}}}, 0, nil)
	require.NoError(t, err)
	require.Len(t, recs.GetRecords(), 5, "read_uncommitted sees the aborted records, never the marker")
}

// A fetch with min_bytes on a partition with nothing new answers at its
// max_wait_ms with what there is; it once waited for data or the end of the
// call's context, whatever max_wait_ms said.
func TestFetchMinBytesAnswersAtMaxWait(t *testing.T) {
	r, alice, _, _ := authzNode(t)
	ctx, cancel := context.WithTimeout(alice, 5*time.Second)
	defer cancel()
	s := &fetchStream{ctx: ctx}
	err := r.Fetch(&storagev1.FetchRequest{Partitions: []*storagev1.FetchPartition{{Topic: "t", Partition: 0}},
		MaxWaitMs: 50, MinBytes: 1}, s)
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "the fetch returned only when its context ended, not at max_wait_ms")
	require.Empty(t, s.sent)
}
