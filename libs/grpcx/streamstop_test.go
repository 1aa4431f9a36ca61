package grpcx_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
)

// streamer answers each ProduceStream request on a goroutine of its own,
// request 2 only once release is closed (an acks=all append waiting for
// its followers), and keeps every Fetch open until its context ends.
type streamer struct {
	storagev1.UnimplementedStorageServiceServer
	release   chan struct{}
	received2 chan struct{} // closed when request 2 is accepted
	finishing chan struct{} // closed when the server asks the stream to finish
}

func (s *streamer) ProduceStream(stream grpc.BidiStreamingServer[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]) error {
	var answering sync.WaitGroup
	var sendMu sync.Mutex
	// Asked while waiting for a request, or told by Recv.
	finish := sync.OnceFunc(func() {
		close(s.finishing)
		answering.Wait()
	})
	grpcx.OnStop(stream.Context(), finish)
	for {
		req, err := stream.Recv()
		if grpcx.IsStopping(err) {
			finish()
			return err
		}
		if err != nil {
			answering.Wait()
			return err
		}
		if req.GetRequestId() == 2 {
			close(s.received2)
		}
		answering.Go(func() {
			if req.GetRequestId() == 2 {
				<-s.release
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			_ = stream.Send(&storagev1.ProduceStreamResponse{RequestId: req.GetRequestId(), Response: &storagev1.ProduceResponse{}}) // the test reads what arrives
		})
	}
}

func (s *streamer) Fetch(_ *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	if err := stream.Send(&storagev1.FetchResponse{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// A stopping server ends open streams instead of waiting out its graceful
// timeout: a ProduceStream after answering the request it accepted, a
// Fetch at once, both with a retriable BROKER_NOT_AVAILABLE; new streams
// are refused the same way.
func TestStopEndsStreamsAfterAnswering(t *testing.T) {
	const graceful = time.Minute
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 4 << 20, GracefulStopTimeout: graceful},
		grpcx.ServerOptions{Logger: log.Discard()})
	impl := &streamer{release: make(chan struct{}), received2: make(chan struct{}), finishing: make(chan struct{})}
	storagev1.RegisterStorageServiceServer(srv.GRPC, impl)
	srv.SetServing(true, storagev1.StorageService_ServiceDesc.ServiceName)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{})
	require.NoError(t, err)
	defer conn.Close()
	client := storagev1.NewStorageServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), graceful)
	defer cancel()

	fetch, err := client.Fetch(ctx, &storagev1.FetchRequest{})
	require.NoError(t, err)
	_, err = fetch.Recv()
	require.NoError(t, err)
	ps, err := client.ProduceStream(ctx)
	require.NoError(t, err)
	for id := uint64(1); id <= 2; id++ {
		require.NoError(t, ps.Send(&storagev1.ProduceStreamRequest{RequestId: id, Request: &storagev1.ProduceRequest{}}))
	}
	resp, err := ps.Recv()
	require.NoError(t, err)
	require.Equal(t, uint64(1), resp.GetRequestId())
	<-impl.received2

	start := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() {
		srv.Stop(context.Background())
		stopped <- time.Since(start)
	}()
	// The Fetch ends at once.
	_, err = fetch.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, errs.BrokerNotAvailable, errs.CodeOf(err))
	require.True(t, errs.IsRetriable(err))
	// The ProduceStream waits for its answer to request 2.
	<-impl.finishing
	select {
	case <-stopped:
		t.Fatal("the server stopped before the accepted request was answered")
	default:
	}
	late, err := client.ProduceStream(ctx)
	if err == nil {
		_, err = late.Recv() // the refusal arrives as the stream's status
	}
	require.Equal(t, errs.BrokerNotAvailable, errs.CodeOf(err), "%v", err)
	close(impl.release)
	resp, err = ps.Recv()
	require.NoError(t, err)
	require.Equal(t, uint64(2), resp.GetRequestId())
	_, err = ps.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, errs.BrokerNotAvailable, errs.CodeOf(err))

	took := <-stopped
	require.NoError(t, <-served)
	// Far below the graceful timeout, which an open stream used to take.
	require.Less(t, took, graceful/2)
	t.Logf("stopped in %v", took)
}
