package record

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// readAll iterates it to the end and returns its records (copied) and
// error, with the offset it reports.
type readResult struct {
	recs  []Record
	bases []int64
	err   string
	errAt int64
}

func readAll(it *Iterator) readResult {
	var r readResult
	for it.Next() {
		rec := it.Record()
		c := Record{Offset: rec.Offset, Timestamp: rec.Timestamp, Key: bytes.Clone(rec.Key), Value: bytes.Clone(rec.Value)}
		for _, h := range rec.Headers {
			c.Headers = append(c.Headers, Header{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		r.recs = append(r.recs, c)
		r.bases = append(r.bases, it.Batch().BaseOffset)
	}
	if err := it.Err(); err != nil {
		r.err = err.Error()
	}
	r.errAt = it.ErrOffset()
	return r
}

// SplitAt cuts b at the given ascending positions.
func splitAt(b []byte, cuts ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		out = append(out, b[prev:c])
		prev = c
	}
	return append(out, b[prev:])
}

// requirePiecesMatch checks that reading data in every given split gives
// what reading it whole gives.
func requirePiecesMatch(t *testing.T, data []byte, limit int) {
	t.Helper()
	whole := Iterator{DecompressLimit: limit}
	whole.Reset(data)
	want := readAll(&whole)
	var splits [][][]byte
	step := 1
	if len(data) > 1024 {
		step = len(data)/256 + 1 // large inputs: about 256 places, plus the rest
	}
	for i := 0; i <= len(data); i += step {
		splits = append(splits, splitAt(data, i))
	}
	ones := make([][]byte, 0, len(data))
	for i := range data {
		ones = append(ones, data[i:i+1])
	}
	if len(data) <= 1<<16 {
		splits = append(splits, ones)
	}
	rng := rand.New(rand.NewPCG(uint64(len(data)), 1))
	for range 8 {
		var cuts []int
		for i := 0; i < len(data); i += 1 + rng.IntN(64) {
			cuts = append(cuts, i)
		}
		splits = append(splits, splitAt(data, cuts...))
	}
	it := Iterator{DecompressLimit: limit}
	for _, pieces := range splits {
		it.ResetPieces(pieces)
		got := readAll(&it)
		require.Equal(t, want, got, "split into %d pieces", len(pieces))
	}
}

func TestIteratorPiecesMatchesWhole(t *testing.T) {
	for _, seed := range fuzzSeeds() {
		requirePiecesMatch(t, seed, DefaultDecompressLimit)
	}
	// Several batches of each codec back to back, records of every size
	// around a 16 KiB piece.
	var buf []byte
	for i, c := range allCodecs {
		b := NewBuilder(c)
		for j, r := range testRecords(40, uint64(i)) {
			r.Value = bytes.Repeat([]byte{byte(j)}, j*97)
			require.NoError(t, b.Append(&r))
		}
		batch, err := b.Build()
		require.NoError(t, err)
		buf = append(buf, batch...)
	}
	AssignOffsets(buf, 7, 3)
	requirePiecesMatch(t, buf, DefaultDecompressLimit)
	// A flipped byte anywhere gives the same error either way.
	for i := 0; i < len(buf); i += len(buf)/40 + 1 {
		bad := bytes.Clone(buf)
		bad[i] ^= 0x5a
		requirePiecesMatch(t, bad, DefaultDecompressLimit)
	}
}

// TestIteratorPiecesRecordsOutliveIteration checks that records of
// uncompressed batches read across pieces stay intact after the iterator
// moves on, until the next ResetPieces: they point into the pieces, or
// into copies not reused before.
func TestIteratorPiecesRecordsOutliveIteration(t *testing.T) {
	b := NewBuilder(CodecNone)
	for j, r := range testRecords(200, 9) {
		r.Value = bytes.Repeat([]byte{byte(j)}, 300)
		require.NoError(t, b.Append(&r))
	}
	batch, err := b.Build()
	require.NoError(t, err)
	var cuts []int
	for i := 100; i < len(batch); i += 1000 {
		cuts = append(cuts, i)
	}
	var it Iterator
	it.ResetPieces(splitAt(batch, cuts...))
	var kept [][]byte
	for it.Next() {
		kept = append(kept, it.Record().Value)
	}
	require.NoError(t, it.Err())
	it.Reset(nil)
	require.Len(t, kept, 200)
	for j, v := range kept {
		require.Equal(t, bytes.Repeat([]byte{byte(j)}, 300), v, "record %d", j)
	}
}

// FuzzIteratorPieces checks that reading batches in pieces, cut at every
// position, agrees with reading them whole.
func FuzzIteratorPieces(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		requirePiecesMatch(t, data, 1<<20)
	})
}
