package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// seekFake serves topic "m", whose one partition holds offsets 0-9. The
// first fetch stream is answered with first; later ones get the records
// from their fetch offset on.
type seekFake struct {
	placeFake
	t       *testing.T
	first   *storagev1.FetchResponse
	fetches atomic.Int32
}

// ListOffsets answers 0 (auto.offset.reset earliest).
func (f *seekFake) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	resp := &storagev1.ListOffsetsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 0})
	}
	return resp, nil
}

func (f *seekFake) Fetch(req *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	for _, p := range req.GetPartitions() {
		if f.fetches.Add(1) == 1 {
			if err := stream.Send(f.first); err != nil {
				return err
			}
			continue
		}
		var values []string
		for o := p.GetFetchOffset(); o < 10; o++ {
			values = append(values, "v")
		}
		chunk := txnTestBatch(f.t, -1, p.GetFetchOffset(), false, values...)
		if err := stream.Send(&storagev1.FetchResponse{Topic: "m", Partition: 0, Batches: chunk, HighWatermark: 10, NextOffset: 10}); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// seekOnAnswer calls seek when a fetch stream has received an error or a
// diverging epoch, before the consumer sees it: the answer arrives just
// as the user seeks.
type seekOnAnswer struct {
	grpc.ClientStream
	seek func()
}

func (s seekOnAnswer) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*storagev1.FetchResponse); ok && err == nil && (r.GetError() != nil || r.GetDivergingEpoch() != nil) {
		s.seek()
	}
	return err
}

// A fetch stream placed before a Seek that answers after it with
// OFFSET_OUT_OF_RANGE (under auto.offset.reset=earliest) or with a
// diverging epoch must not move the position the Seek set: the stream
// belongs to a replaced generation. The Seek comes between the answer's
// arrival and its handling; the run loop replaces the stream only after
// the stream has handled it (it waits for the stream to end).
func TestConsumerStaleStreamKeepsSeekPosition(t *testing.T) {
	for name, first := range map[string]*storagev1.FetchResponse{
		"offset out of range": {Topic: "m", Partition: 0, Error: errs.New(errs.OffsetOutOfRange, "m-0: offset 0 is outside the log").Proto()},
		"diverging epoch":     {Topic: "m", Partition: 0, DivergingEpoch: &storagev1.EpochEndOffset{Epoch: 0, EndOffset: 2}},
	} {
		t.Run(name, func(t *testing.T) { testStaleStreamKeepsSeekPosition(t, first) })
	}
}

func testStaleStreamKeepsSeekPosition(t *testing.T, first *storagev1.FetchResponse) {
	f := &seekFake{placeFake: placeFake{leaders: []int32{1}}, t: t, first: first}
	tp := TopicPartition{"m", 0}
	var consumer atomic.Pointer[Consumer]
	var once sync.Once
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, f)
	storagev1.RegisterStorageServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	c, err := New(Config{Bootstrap: []string{"node1:1"}, RequestTimeout: time.Hour, BootstrapTimeout: time.Hour, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return seekOnAnswer{ClientStream: s, seek: func() { once.Do(func() { consumer.Load().Seek(tp, 5) }) }}, nil
		}),
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})

	k := c.NewConsumer(ConsumerConfig{Reset: ResetEarliest})
	defer k.Close()
	consumer.Store(k)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))

	var got []int64
	for len(got) == 0 || got[len(got)-1] < 9 {
		recs, err := k.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			got = append(got, r.Offset)
		}
	}
	require.Equal(t, []int64{5, 6, 7, 8, 9}, got, "records after Seek(5)")
	require.EqualValues(t, 10, k.Position(tp))
}
