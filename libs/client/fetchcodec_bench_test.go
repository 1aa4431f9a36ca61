package client

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/record"
)

// BenchmarkFetchDecode decodes a 1 MiB fetch chunk of 256 KiB batches as
// the consumer receives it, in 16 KiB frame buffers, and reads every
// record: "pieces" decodes in the buffers (fetchChunk) and copies the keys
// and values out (detach), "gather" copies the message into one buffer
// first, as the consumer did before.
func BenchmarkFetchDecode(b *testing.B) {
	for _, size := range []int{100, 1024} {
		data, err := proto.Marshal(&storagev1.FetchResponse{Topic: "bench", NextOffset: 1,
			Batches: testBatches(b, 4, 256<<10, size, record.CodecNone)})
		require.NoError(b, err)
		var msg mem.BufferSlice
		for _, p := range splitAt(data, frameCuts(len(data), 16<<10)...) {
			msg = append(msg, mem.SliceBuffer(p))
		}
		b.Run(fmt.Sprintf("record=%dB/pieces", size), func(b *testing.B) {
			var c fetchChunk
			var it record.Iterator
			var recs []*ConsumedRecord
			var block []ConsumedRecord
			var parts [][]byte
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := chunkCodec.Unmarshal(msg, &c); err != nil {
					b.Fatal(err)
				}
				it.ResetPieces(c.batches)
				recs, block = recs[:0], block[:0]
				for it.Next() {
					r := it.Record()
					block = append(block, ConsumedRecord{Offset: r.Offset, Key: r.Key, Value: r.Value})
				}
				if it.Err() != nil {
					b.Fatal(it.Err())
				}
				for i := range block {
					recs = append(recs, &block[i])
				}
				parts = detach(recs, parts)
				c.release()
			}
		})
		b.Run(fmt.Sprintf("record=%dB/gather", size), func(b *testing.B) {
			var m storagev1.FetchResponse
			var it record.Iterator
			var block []ConsumedRecord
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := chunkCodec.Unmarshal(msg, &m); err != nil {
					b.Fatal(err)
				}
				it.Reset(m.GetBatches())
				block = block[:0]
				for it.Next() {
					r := it.Record()
					block = append(block, ConsumedRecord{Offset: r.Offset, Key: r.Key, Value: r.Value})
				}
				if it.Err() != nil {
					b.Fatal(it.Err())
				}
			}
		})
	}
}

func frameCuts(n, frame int) []int {
	var cuts []int
	for i := frame; i < n; i += frame {
		cuts = append(cuts, i)
	}
	return cuts
}
