package client

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/record"
)

// reuseChunks are n records of topic "m" in chunks of perChunk records,
// each with a 1 KiB value naming its offset and a header.
func reuseChunks(t *testing.T, n, perChunk int) []*storagev1.FetchResponse {
	t.Helper()
	var out []*storagev1.FetchResponse
	for base := 0; base < n; base += perChunk {
		b := record.NewBuilder(record.CodecNone)
		for o := base; o < base+perChunk; o++ {
			require.NoError(t, b.Append(&record.Record{Timestamp: 1, Value: reuseValue(int64(o)),
				Headers: []record.Header{{Key: fmt.Sprintf("h%d", o), Value: []byte("hv")}}}))
		}
		batch, err := b.Build()
		require.NoError(t, err)
		batch = bytes.Clone(batch)
		record.SetBaseOffset(batch, int64(base))
		out = append(out, &storagev1.FetchResponse{Topic: "m", Partition: 0, Batches: batch,
			HighWatermark: int64(n), NextOffset: int64(base + perChunk)})
	}
	return out
}

func reuseValue(o int64) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%08d", o)), 128) }

// consumeReuse reads the n records of reuseChunks, checking each record
// before the next Poll, and returns the bytes allocated per record and the
// header keys of the first Poll, kept past later ones.
func consumeReuse(t *testing.T, reuse bool, n int) (perRecord uint64, firstKeys []string, polls, puts int64) {
	f := &tailFake{seekFake: seekFake{placeFake: placeFake{leaders: []int32{1}}, t: t}, chunks: reuseChunks(t, n, 64)}
	c := bufconnClient(t, time.Minute, func(srv *grpc.Server) {
		metadatav1.RegisterMetadataServiceServer(srv, f)
		storagev1.RegisterStorageServiceServer(srv, f)
	})
	k := c.NewConsumer(ConsumerConfig{Reset: ResetEarliest, RecordsValidUntilNextPoll: reuse})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))
	var before, after runtime.MemStats
	next := int64(0)
	for next < int64(n) {
		if next == int64(n)/4 {
			runtime.ReadMemStats(&before) // pools warm
			puts = -chunkBufPuts.Load()
			polls = -1 // the Poll before this one returned records whose buffer this Poll recycles
		}
		recs, err := k.Poll(ctx)
		require.NoError(t, err)
		polls++
		for _, r := range recs {
			require.Equal(t, next, r.Offset)
			require.Equal(t, reuseValue(next), r.Value, "offset %d", next)
			require.Len(t, r.Headers, 1)
			require.Equal(t, fmt.Sprintf("h%d", next), r.Headers[0].Key)
			if firstKeys == nil || len(firstKeys) < 64 {
				firstKeys = append(firstKeys, r.Headers[0].Key)
			}
			next++
		}
	}
	runtime.ReadMemStats(&after)
	puts += chunkBufPuts.Load()
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n-n/4), firstKeys, polls, puts
}

// With RecordsValidUntilNextPoll the consumer gathers chunks into recycled
// buffers: every record is whole until the next Poll, header keys (strings)
// stay as they were after their buffer is reused, and the bytes allocated
// per record drop by about the record's size (the fresh copy of each
// chunk, which is what made a catch-up consumer's GC its largest cost).
func TestConsumerRecordsValidUntilNextPollReusesChunkBuffers(t *testing.T) {
	const n, perChunk = 8192, 64
	plain, _, _, plainPuts := consumeReuse(t, false, n)
	reused, keys, polls, puts := consumeReuse(t, true, n)
	t.Logf("bytes allocated per 1 KiB record (client and in-process server): %d fresh, %d reused", plain, reused)
	for i, k := range keys {
		require.Equal(t, fmt.Sprintf("h%d", i), k, "a header key changed after its chunk's buffer was reused")
	}
	require.Zero(t, plainPuts, "a consumer whose records outlive the next Poll recycled their memory")
	// Each Poll gives back the buffer of the records the one before
	// returned (how many of them the pools keep is the GC's business).
	require.GreaterOrEqual(t, puts, polls, "Poll did not recycle the previous records' buffers")
}

func TestChunkBufPool(t *testing.T) {
	for n, want := range map[int]int{1: 4 << 10, 5000: 8 << 10, 64 << 10: 64 << 10, 64<<10 + 1: 128 << 10,
		1<<20 + 40: 1<<20 + 64<<10, 8 << 20: 8 << 20, 64 << 20: 64 << 20} {
		b := getChunkBuf(n)
		require.Len(t, b, n)
		require.Equal(t, want, cap(b), "capacity for %d bytes", n)
	}
	putChunkBuf(make([]byte, 10, 5000)) // not a pooled capacity: dropped
	reused := false
	for range 100 {
		b := getChunkBuf(1 << 20)
		b[0] = 1
		putChunkBuf(b)
		if c := getChunkBuf(1000 << 10); &c[:1][0] == &b[:1][0] {
			reused = true
			require.Len(t, c, 1000<<10)
		}
	}
	require.True(t, reused, "a recycled buffer never came back")
}
