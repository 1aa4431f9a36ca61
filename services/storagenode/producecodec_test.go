package storagenode

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

func produceSeeds(t testing.TB) [][]byte {
	epoch := int32(7)
	msgs := []*storagev1.ProduceStreamRequest{
		{},
		{RequestId: 1},
		{RequestId: 2, Request: &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 1500,
			TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			Partitions: []*storagev1.ProducePartition{
				{Topic: "t", Partition: 3, CurrentLeaderEpoch: &epoch, Data: &storagev1.ProducePartition_Batches{Batches: bytes.Repeat([]byte{0xab}, 300)}},
				{Topic: "u", Data: &storagev1.ProducePartition_Batches{Batches: []byte{}}},
				{Topic: "v", Data: &storagev1.ProducePartition_Records{Records: &commonv1.Records{Records: []*commonv1.Record{{Key: []byte("k"), Value: []byte("v")}}}},
					Compression: commonv1.Compression_COMPRESSION_ZSTD, Producer: &storagev1.ProducerInfo{ProducerId: 9}},
			}}},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Both oneof members, in both orders, and a request field given twice
	// (the parts merge).
	a, b := out[2], out[1]
	out = append(out, append(append([]byte(nil), a...), a...), append(append([]byte(nil), b...), a...))
	return out
}

// The hand decoder must agree with the protobuf decoder on every input:
// the same message when that succeeds, an error when it fails.
func FuzzDecodeProduceStreamRequest(f *testing.F) {
	for _, s := range produceSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got storagev1.ProduceStreamRequest
		werr := proto.Unmarshal(b, &want)
		gerr := decodeProduceStreamRequest(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("protobuf: %v, hand decoder: %v", werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, &got) {
			t.Fatalf("decoded differently:\nprotobuf %v\nhand     %v", &want, &got)
		}
	})
}

// The batches point into the received bytes: no copy.
func TestDecodeProduceAliasesBatches(t *testing.T) {
	b := produceSeeds(t)[2]
	var m storagev1.ProduceStreamRequest
	if err := decodeProduceStreamRequest(b, &m); err != nil {
		t.Fatal(err)
	}
	got := m.GetRequest().GetPartitions()[0].GetBatches()
	if len(got) != 300 {
		t.Fatalf("batches: %d bytes, want 300", len(got))
	}
	i := bytes.Index(b, got)
	if i < 0 || &b[i] != &got[0] {
		t.Fatal("the batches were copied out of the received bytes")
	}
	if m.GetRequest().GetTraceContext()["traceparent"] == "" || m.GetRequestId() != 2 {
		t.Fatalf("other fields lost: %v", &m)
	}
}
