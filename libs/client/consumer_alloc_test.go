package client

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

// tailFake serves topic "m" as a tailing consumer sees it: one response
// per record, each holding one batch of one record.
type tailFake struct {
	seekFake
	chunks []*storagev1.FetchResponse
}

func (f *tailFake) Fetch(_ *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	for _, c := range f.chunks {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// A consumer tailing a log receives a record or two per response; what it
// allocates per record must stay near the record's own size. It allocated
// a block of 256 records (~35 KB) for every response, and at 10k records/s
// the consumer's garbage collections set the end-to-end p99.
func TestTailingConsumerAllocatesPerRecordNotPerBlock(t *testing.T) {
	const n = 2000
	f := &tailFake{seekFake: seekFake{placeFake: placeFake{leaders: []int32{1}}, t: t}}
	value := strings.Repeat("v", 1024)
	for o := int64(0); o < n; o++ {
		f.chunks = append(f.chunks, &storagev1.FetchResponse{Topic: "m", Partition: 0,
			Batches: txnTestBatch(t, -1, o, false, value), HighWatermark: o + 1, NextOffset: o + 1})
	}
	c := bufconnClient(t, time.Minute, func(srv *grpc.Server) {
		metadatav1.RegisterMetadataServiceServer(srv, f)
		storagev1.RegisterStorageServiceServer(srv, f)
	})
	k := c.NewConsumer(ConsumerConfig{Reset: ResetEarliest})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, k.AssignTopic(ctx, "m"))
	got := 0
	for got < n {
		recs, err := k.Poll(ctx)
		require.NoError(t, err)
		got += len(recs)
	}
	runtime.ReadMemStats(&after)
	perRecord := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per 1 KiB record (client and in-process server)", perRecord)
	require.Less(t, perRecord, uint64(16<<10), "a tailing consumer allocates far more than its records")
}
