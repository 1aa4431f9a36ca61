package storagenode

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
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
	// Batches with a valid header and CRC whose records do not decode.
	for _, bad := range badBatchSeeds(t) {
		m, err := proto.Marshal(&storagev1.ProduceStreamRequest{RequestId: 3, Request: &storagev1.ProduceRequest{
			Partitions: []*storagev1.ProducePartition{{Topic: "t", Data: &storagev1.ProducePartition_Batches{Batches: bad}}}}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// badBatchSeeds are batches a leader must refuse although their header and
// CRC are valid: random bytes as records (uncompressed and zstd), and a
// record count above the records present.
func badBatchSeeds(t testing.TB) [][]byte {
	random := make([]byte, 200)
	for i := range random {
		random[i] = byte(i*131 + 7)
	}
	var out [][]byte
	for _, c := range []record.Codec{record.CodecNone, record.CodecZstd} {
		payload, err := record.Compress(nil, random, c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, withHeader(c, 5, payload))
	}
	bl := record.NewBuilder(record.CodecNone)
	for range 2 {
		if err := bl.AppendKV(1, []byte("key"), []byte("a value of some length")); err != nil {
			t.Fatal(err)
		}
	}
	two, err := bl.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append(out, withHeader(record.CodecNone, 3, two[record.BatchHeaderSize:]))
}

func withHeader(c record.Codec, count int32, payload []byte) []byte {
	b := append(make([]byte, record.BatchHeaderSize), payload...)
	record.PutBatchHeader(b, &record.BatchHeader{BatchLength: int32(len(b) - record.LogOverhead), PartitionLeaderEpoch: -1,
		Magic: record.Magic, Attributes: record.Attributes(c), LastOffsetDelta: count - 1, ProducerID: -1, ProducerEpoch: -1,
		BaseSequence: -1, RecordCount: count})
	record.UpdateCRC(b)
	return b
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
		// What the leader does next with the batches: validate them,
		// records included. Any input gets a typed error or passes.
		for _, p := range got.GetRequest().GetPartitions() {
			if _, err := record.Validate(p.GetBatches(), record.ValidateOptions{Origin: record.FromClient}); err != nil {
				switch errs.CodeOf(err) {
				case errs.CorruptMessage, errs.MessageTooLarge, errs.InvalidRecord, errs.UnsupportedCompressionType:
				default:
					t.Fatalf("untyped validation error %v", err)
				}
			}
		}
	})
}

// Every bad-batch seed (valid header and CRC, records that do not decode)
// is refused as INVALID_RECORD after decoding.
func TestBadBatchSeedsAreRefused(t *testing.T) {
	for i, b := range badBatchSeeds(t) {
		_, err := record.Validate(b, record.ValidateOptions{Origin: record.FromClient})
		if errs.CodeOf(err) != errs.InvalidRecord {
			t.Fatalf("seed %d: %v, want INVALID_RECORD", i, err)
		}
	}
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
