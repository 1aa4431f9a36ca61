package client

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/record"
)

func TestDecodeFetchResponseMatchesProto(t *testing.T) {
	want := &storagev1.FetchResponse{
		Topic: "t", Partition: 7, HighWatermark: 1 << 40, LastStableOffset: 99, LogStartOffset: 3, NextOffset: 42,
		Error:               &edpb.Error{Code: 6, Message: "x"},
		AbortedTransactions: []*storagev1.AbortedTransaction{{ProducerId: 1, FirstOffset: 2}},
		DivergingEpoch:      &storagev1.EpochEndOffset{Epoch: 4, EndOffset: 5},
		Batches:             []byte("batch bytes"),
	}
	b, err := proto.Marshal(want)
	require.NoError(t, err)
	var got storagev1.FetchResponse
	require.NoError(t, decodeFetchResponse(b, &got))
	require.True(t, proto.Equal(want, &got), "%v", &got)
	// The batches alias the message buffer: no copy.
	require.Equal(t, &b[len(b)-len(got.Batches)], &got.Batches[0])
	require.Error(t, decodeFetchResponse([]byte{0xff}, &got))
}

// testBatches builds n batches of records of recSize value bytes, about
// batchBytes each; every third batch is compressed with codec (none:
// uncompressed only).
func testBatches(t testing.TB, n, batchBytes, recSize int, codec record.Codec) []byte {
	var out []byte
	value := make([]byte, recSize)
	for i := range value {
		value[i] = byte('A' + i%26)
	}
	for i := range n {
		c := record.CodecNone
		if i%3 == 2 {
			c = codec
		}
		b := record.NewBuilder(c)
		for j := 0; b.Size() < batchBytes; j++ {
			value[0] = byte(j)
			require.NoError(t, b.Append(&record.Record{Timestamp: 1_700_000_000_000 + int64(j), Key: fmt.Appendf(nil, "k%d", j), Value: value,
				Headers: []record.Header{{Key: "h", Value: []byte{byte(i)}}}}))
		}
		batch, err := b.Build()
		require.NoError(t, err)
		out = append(out, batch...)
	}
	record.AssignOffsets(out, 1000, 2)
	return out
}

// splitAt cuts b at the given ascending positions.
func splitAt(b []byte, cuts ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		out = append(out, b[prev:c])
		prev = c
	}
	return append(out, b[prev:])
}

// fetchSplits returns ways to cut data: at every position (every
// len/128th for large data), into single bytes (small data), into 16 KiB
// frames, and at random places.
func fetchSplits(data []byte) [][][]byte {
	var splits [][][]byte
	step := 1
	if len(data) > 1024 {
		step = len(data)/128 + 1
	}
	for i := 0; i <= len(data); i += step {
		splits = append(splits, splitAt(data, i))
	}
	if len(data) <= 1<<16 {
		ones := make([][]byte, 0, len(data))
		for i := range data {
			ones = append(ones, data[i:i+1])
		}
		splits = append(splits, ones)
	}
	var frames []int
	for i := 16 << 10; i < len(data); i += 16 << 10 {
		frames = append(frames, i)
	}
	splits = append(splits, splitAt(data, frames...))
	rng := rand.New(rand.NewPCG(uint64(len(data)), 2))
	for range 8 {
		var cuts []int
		for i := rng.IntN(64); i < len(data); i += 1 + rng.IntN(4096) {
			cuts = append(cuts, i)
		}
		splits = append(splits, splitAt(data, cuts...))
	}
	return splits
}

type fetchRead struct {
	recs []record.Record
	err  string
	at   int64
}

func iterate(it *record.Iterator) fetchRead {
	var r fetchRead
	for it.Next() {
		rec := it.Record()
		c := record.Record{Offset: rec.Offset, Timestamp: rec.Timestamp, Key: bytes.Clone(rec.Key), Value: bytes.Clone(rec.Value)}
		for _, h := range rec.Headers {
			c.Headers = append(c.Headers, record.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		r.recs = append(r.recs, c)
	}
	if err := it.Err(); err != nil {
		r.err = err.Error()
	}
	r.at = it.ErrOffset()
	return r
}

// requireSplitDecodeMatches checks that decoding data in pieces, cut in
// every way fetchSplits gives, decodes what decoding it whole does: the
// same fields or the same error, and the same records or the same batch
// error from the batches.
func requireSplitDecodeMatches(t *testing.T, data []byte) {
	t.Helper()
	var want storagev1.FetchResponse
	wantErr := decodeFetchResponse(data, &want)
	var wantRead fetchRead
	it := record.Iterator{DecompressLimit: 1 << 20} // a decompression bomb per cut would stall the fuzzer
	if wantErr == nil {
		it.Reset(want.GetBatches())
		wantRead = iterate(&it)
	}
	var got storagev1.FetchResponse
	var scratch []byte
	for _, pieces := range fetchSplits(data) {
		n := len(pieces)
		batches, err := decodeFetchPieces(pieces, &got, &scratch, nil)
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error(), "%d pieces", n)
			continue
		}
		require.NoError(t, err, "%d pieces", n)
		require.Nil(t, got.Batches)
		require.True(t, bytes.Equal(want.GetBatches(), bytes.Join(batches, nil)), "%d pieces", n)
		got.Batches = want.Batches
		require.True(t, proto.Equal(&want, &got), "%d pieces: %v", n, &got)
		it.ResetPieces(batches)
		require.Equal(t, wantRead, iterate(&it), "%d pieces", n)
	}
}

// TestDecodeFetchPiecesMatchesWhole decodes responses cut into pieces at
// arbitrary places, as grpc-go hands a message over in frame buffers, and
// checks every field and record against decoding the gathered message.
func TestDecodeFetchPiecesMatchesWhole(t *testing.T) {
	for _, codec := range []record.Codec{record.CodecNone, record.CodecSnappy, record.CodecZstd} {
		batches := testBatches(t, 7, 20<<10, 1024, codec)
		for i, m := range []*storagev1.FetchResponse{
			{Topic: "topic", Partition: 3, HighWatermark: 1 << 33, NextOffset: 99, Batches: batches,
				AbortedTransactions: []*storagev1.AbortedTransaction{{ProducerId: 5, FirstOffset: 1001}}},
			{Batches: batches[:len(batches)/2], Topic: "cut mid-batch"},
			{Batches: testBatches(t, 2, 4<<10, 100, codec), LastStableOffset: 12},
		} {
			data, err := proto.Marshal(m)
			require.NoError(t, err)
			requireSplitDecodeMatches(t, data)
			if i > 0 {
				continue
			}
			// A damaged byte gives the same error in pieces.
			for j := 0; j < len(data); j += len(data)/8 + 1 {
				bad := bytes.Clone(data)
				bad[j] ^= 0x21
				requireSplitDecodeMatches(t, bad)
			}
		}
	}
	for _, seed := range fetchFuzzSeeds(t) {
		requireSplitDecodeMatches(t, seed)
	}
}

// countingPool keeps the buffers returned to it.
type countingPool struct {
	put  int
	back []*[]byte
}

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(b *[]byte)     { p.put++; p.back = append(p.back, b) }

// poolBuffers cuts data into pooled buffers of size bytes.
func poolBuffers(data []byte, size int, pool mem.BufferPool) mem.BufferSlice {
	var out mem.BufferSlice
	for len(data) > 0 {
		b := bytes.Clone(data[:min(size, len(data))])
		out = append(out, mem.NewBuffer(&b, pool))
		data = data[len(b):]
	}
	return out
}

// TestFetchChunkHoldsBuffers checks the buffers' lifetime: after grpc-go
// frees the message, a decoded chunk still holds its buffers until
// release, which returns them to the pool; records detached before stay
// intact when the buffers are reused.
func TestFetchChunkHoldsBuffers(t *testing.T) {
	data, err := proto.Marshal(&storagev1.FetchResponse{Topic: "t", Batches: testBatches(t, 2, 40<<10, 1024, record.CodecNone)})
	require.NoError(t, err)
	pool := &countingPool{}
	msg := poolBuffers(data, 16<<10, pool)
	var c fetchChunk
	require.NoError(t, chunkCodec.Unmarshal(msg, &c))
	msg.Free() // as grpc-go does once Unmarshal returns
	require.Zero(t, pool.put, "buffers the batches point into went back to the pool")
	var it record.Iterator
	it.ResetPieces(c.batches)
	var recs []*ConsumedRecord
	var want [][]byte
	for it.Next() {
		r := it.Record()
		recs = append(recs, &ConsumedRecord{Key: r.Key, Value: r.Value})
		want = append(want, bytes.Clone(r.Key), bytes.Clone(r.Value))
	}
	require.NoError(t, it.Err())
	require.Greater(t, len(recs), 60)
	detach(recs, nil)
	c.release()
	require.Equal(t, len(msg), pool.put)
	require.Empty(t, c.held)
	for _, b := range pool.back {
		clear(*b) // the pool hands the buffers out again
	}
	for i, r := range recs {
		require.Equal(t, want[2*i], r.Key)
		require.Equal(t, want[2*i+1], r.Value)
	}
	// A message without batches holds nothing.
	pool = &countingPool{}
	data, err = proto.Marshal(&storagev1.FetchResponse{Topic: "t", Error: &edpb.Error{Code: 6, Message: string(make([]byte, 40<<10))}})
	require.NoError(t, err)
	msg = poolBuffers(data, 16<<10, pool)
	c = fetchChunk{}
	require.NoError(t, chunkCodec.Unmarshal(msg, &c))
	msg.Free()
	require.Equal(t, len(msg), pool.put)
	require.EqualValues(t, 6, c.resp.GetError().GetCode())
}

func fetchFuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, m := range []*storagev1.FetchResponse{
		{Topic: "t", Batches: []byte{1, 2, 3}, Error: &edpb.Error{Code: 1}},
		{Topic: "t", Partition: 1, NextOffset: 5, Batches: testBatches(t, 3, 300, 40, record.CodecSnappy)},
		{Batches: testBatches(t, 1, 600, 100, record.CodecNone), DivergingEpoch: &storagev1.EpochEndOffset{Epoch: 2, EndOffset: 3}},
	} {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		seeds = append(seeds, b)
	}
	return append(seeds, []byte{})
}

// FuzzDecodeFetchResponse decodes arbitrary bytes whole and cut into
// pieces at every position: both must agree, and what decodes must
// round-trip through the standard codec.
func FuzzDecodeFetchResponse(f *testing.F) {
	for _, s := range fetchFuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		requireSplitDecodeMatches(t, data)
		var m storagev1.FetchResponse
		if decodeFetchResponse(data, &m) != nil {
			return
		}
		again, err := proto.Marshal(&m)
		require.NoError(t, err)
		var m2 storagev1.FetchResponse
		require.NoError(t, proto.Unmarshal(again, &m2))
		require.True(t, proto.Equal(&m, &m2))
	})
}

// TestDetach checks that detached records keep their keys and values
// (nil stays nil, empty stays empty) and no longer share memory with the
// buffer they were read from.
func TestDetach(t *testing.T) {
	buf := []byte("key1value1value2")
	recs := []*ConsumedRecord{{Key: buf[:4], Value: buf[4:10]}, {Key: nil, Value: buf[10:]}, {Key: buf[:0], Value: nil}}
	detach(recs, nil)
	clear(buf)
	require.Equal(t, []byte("key1"), recs[0].Key)
	require.Equal(t, []byte("value1"), recs[0].Value)
	require.Nil(t, recs[1].Key)
	require.Equal(t, []byte("value2"), recs[1].Value)
	require.NotNil(t, recs[2].Key)
	require.Empty(t, recs[2].Key)
	require.Nil(t, recs[2].Value)
	// Appending to one record's value must not overwrite the next key.
	recs[0].Key = append(recs[0].Key, 'x')
	require.Equal(t, []byte("value1"), recs[0].Value)
}
