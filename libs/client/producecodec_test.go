package client

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

// The hand encoding must decode, with the generated code, to exactly the
// request it was made from.
func checkProduceEncoding(t *testing.T, id uint64, req *storagev1.ProduceRequest) {
	t.Helper()
	want := &storagev1.ProduceStreamRequest{RequestId: id, Request: proto.Clone(req).(*storagev1.ProduceRequest)}
	enc, err := encodeProduceStream(id, req)
	require.NoError(t, err)
	got := &storagev1.ProduceStreamRequest{}
	require.NoError(t, proto.Unmarshal(bytes.Join(enc, nil), got))
	require.True(t, proto.Equal(want, got), "decoded %v, want %v", got, want)
	require.True(t, proto.Equal(want.Request, req), "encoding changed the request")
	// The batches are referenced, not copied.
	for _, p := range req.GetPartitions() {
		b := p.GetBatches()
		if len(b) == 0 {
			continue
		}
		found := false
		for _, piece := range enc {
			if len(piece) > 0 && &piece[0] == &b[0] {
				found = true
			}
		}
		require.True(t, found, "batches of %s-%d were copied", p.GetTopic(), p.GetPartition())
	}
}

func TestEncodeProduceStream(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300_000)
	epoch := int32(7)
	cases := map[string]*storagev1.ProduceRequest{
		"empty": {},
		"one partition": {Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 30000, Partitions: []*storagev1.ProducePartition{
			{Topic: "t", Partition: 3, CurrentLeaderEpoch: &epoch, Data: &storagev1.ProducePartition_Batches{Batches: big}},
		}},
		"several, traced, mixed": {Acks: storagev1.Acks_ACKS_LEADER, TransactionalId: "tx", TraceContext: map[string]string{"traceparent": "00-abc-def-01"},
			Partitions: []*storagev1.ProducePartition{
				{Topic: "a", Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: []byte{1, 2, 3}}},
				{Topic: "b", Partition: 1, Data: &storagev1.ProducePartition_Batches{Batches: []byte{}}},
				{Topic: "c", Partition: 2},
				{Topic: "d", Partition: 3, Data: &storagev1.ProducePartition_Records{Records: &commonv1.Records{}}},
				{Topic: "e", Partition: 4, Compression: commonv1.Compression_COMPRESSION_ZSTD, Data: &storagev1.ProducePartition_Batches{Batches: big[:1000]}},
			}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			for _, id := range []uint64{0, 1, 1 << 40} {
				checkProduceEncoding(t, id, req)
			}
		})
	}
}

func FuzzEncodeProduceStream(f *testing.F) {
	f.Add(uint64(1), []byte("topic"), int32(0), []byte("batch"), uint8(2), "ctx")
	f.Fuzz(func(t *testing.T, id uint64, topic []byte, partition int32, batch []byte, n uint8, trace string) {
		req := &storagev1.ProduceRequest{Acks: storagev1.Acks(n % 3), TraceContext: map[string]string{"k": trace}}
		for i := range int(n % 5) {
			p := &storagev1.ProducePartition{Topic: string(topic), Partition: partition + int32(i)}
			if i%2 == 0 {
				p.Data = &storagev1.ProducePartition_Batches{Batches: batch[:len(batch)*i/4]}
			}
			req.Partitions = append(req.Partitions, p)
		}
		if _, err := proto.Marshal(req); err != nil {
			_, err := encodeProduceStream(id, req) // invalid UTF-8: both refuse
			require.Error(t, err)
			return
		}
		checkProduceEncoding(t, id, req)
	})
}
