package replication

import (
	"bytes"
	"testing"

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
