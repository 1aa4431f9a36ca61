package replication

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

func decodeChunk(b []byte, m *replicationv1.FollowerFetchResponse) error {
	return wire.UnmarshalAliasing(b, m, batchesField, func(v []byte) { m.Batches = v })
}

// The aliasing decoder must agree with the protobuf decoder on every
// input: the same message when that succeeds, an error when it fails.
func FuzzDecodeFollowerChunk(f *testing.F) {
	for _, m := range []*replicationv1.FollowerFetchResponse{
		{},
		{Topic: "t", Partition: 2, LeaderEpoch: 4, HighWatermark: 99, LogStartOffset: 3, BaseOffset: 7,
			TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			Batches:      bytes.Repeat([]byte{1, 2, 3}, 100)},
		{Topic: "t", Error: &edpb.Error{Code: 6, Message: "not the leader"}},
		{Topic: "t", DivergingEpoch: &replicationv1.DivergingEpoch{Epoch: 3, EndOffset: 40}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(append([]byte(nil), b...), b...)) // fields repeated: the last wins, messages merge
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got replicationv1.FollowerFetchResponse
		werr := proto.Unmarshal(b, &want)
		gerr := decodeChunk(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("protobuf: %v, aliasing decoder: %v", werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, &got) {
			t.Fatalf("decoded differently:\nprotobuf %v\naliasing %v", &want, &got)
		}
		if gerr == nil && len(got.Batches) > 0 {
			i := bytes.Index(b, got.Batches)
			if i < 0 {
				t.Fatal("batches not found in the input")
			}
		}
	})
}

func TestChunkBatchesPointIntoTheBuffer(t *testing.T) {
	b, err := proto.Marshal(&replicationv1.FollowerFetchResponse{Topic: "t", Batches: bytes.Repeat([]byte{9}, 500)})
	if err != nil {
		t.Fatal(err)
	}
	var m replicationv1.FollowerFetchResponse
	if err := decodeChunk(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Batches) != 500 || &b[len(b)-500] != &m.Batches[0] {
		t.Fatal("the batches were copied")
	}
}

// sliceOf cuts b into buffers of the given sizes (the last takes the rest),
// as gRPC hands over a message received in several HTTP/2 frames.
func sliceOf(b []byte, sizes ...int) mem.BufferSlice {
	var out mem.BufferSlice
	for _, n := range sizes {
		n = min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	if len(b) > 0 {
		out = append(out, mem.SliceBuffer(b))
	}
	return out
}

// A chunk in several buffers is decoded with its batches left in those
// buffers, cut where the buffers are cut, and every other field as the
// protobuf decoder reads them; a message whose batches are not its last
// field is decoded from one gathered copy.
func TestChunkDecodesInTheReceivedBuffers(t *testing.T) {
	body := make([]byte, 50_000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	want := &replicationv1.FollowerFetchResponse{Topic: "orders", Partition: 3, LeaderEpoch: 2, HighWatermark: 900, LogStartOffset: 5,
		BaseOffset: 880, TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Batches: body}
	enc, err := proto.Marshal(want)
	require.NoError(t, err)
	codec := newChunkCodec()
	for _, sizes := range [][]int{{len(enc)}, {16 << 10, 16 << 10, 16 << 10}, {3, 40, 1000}, {len(enc) - len(body) + 1, 9}} {
		data := sliceOf(enc, sizes...)
		var in chunkIn
		require.NoError(t, codec.Unmarshal(data, &in))
		got := proto.Clone(&in.msg).(*replicationv1.FollowerFetchResponse)
		got.Batches = bytes.Join(in.pieces, nil)
		require.True(t, proto.Equal(want, got), "sizes %v: decoded %v", sizes, got)
		// Each piece lies inside a received buffer: nothing was copied.
		for _, p := range in.pieces {
			inside := false
			for _, b := range data {
				d := b.ReadOnlyData()
				if len(d) > 0 && &d[len(d)-1] == &p[len(p)-1] {
					inside = true
				}
			}
			require.True(t, inside, "sizes %v: a piece of the batches was copied", sizes)
		}
		in.Release()
		require.Empty(t, in.pieces)
	}

	// Batches before another field: decoded from a gathered copy.
	trailing := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), enc...), 8, protowire.VarintType), 881)
	var in chunkIn
	require.NoError(t, codec.Unmarshal(sliceOf(trailing, 100, 100), &in))
	require.Equal(t, int64(881), in.msg.GetBaseOffset())
	require.Equal(t, body, bytes.Join(in.pieces, nil))
	in.Release()

	// No batches (a high-watermark update or an error).
	hw, err := proto.Marshal(&replicationv1.FollowerFetchResponse{Topic: "orders", HighWatermark: 950, BaseOffset: -1})
	require.NoError(t, err)
	require.NoError(t, codec.Unmarshal(sliceOf(hw, 2), &in))
	require.Equal(t, int64(950), in.msg.GetHighWatermark())
	require.Empty(t, in.pieces)
	in.Release()

	// A malformed message fails as it does with the protobuf decoder.
	require.Error(t, codec.Unmarshal(sliceOf(enc[:len(enc)-len(body)-1], 5), &in))
	in.Release()
}
