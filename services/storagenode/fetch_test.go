package storagenode

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

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

	recs, at, err := decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: chunk}}}, 1)
	require.Error(t, err)
	require.Equal(t, errs.InvalidRecord, errs.CodeOf(err))
	require.EqualValues(t, 5, at)
	var offsets []int64
	for _, r := range recs.GetRecords() {
		offsets = append(offsets, r.GetOffset())
	}
	require.Equal(t, []int64{1, 2, 3, 4}, offsets, "records before the bad batch, none of it")

	recs, at, err = decodeRecords(&storage.ReadResult{Chunks: []storage.Chunk{{Data: bad}}}, 6)
	require.Error(t, err)
	require.EqualValues(t, 5, at, "the offset of the batch holding the fetch offset")
	require.Empty(t, recs.GetRecords())
}
