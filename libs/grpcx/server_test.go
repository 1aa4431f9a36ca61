package grpcx_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/telemetry"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// storage is a StorageService whose Produce panics and whose Fetch streams one
// chunk; everything else is the generated Unimplemented.
type storage struct {
	storagev1.UnimplementedStorageServiceServer
}

func (storage) Produce(context.Context, *storagev1.ProduceRequest) (*storagev1.ProduceResponse, error) {
	panic("boom")
}

func (storage) ListOffsets(context.Context, *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	return &storagev1.ListOffsetsResponse{}, nil
}

func startServer(t *testing.T) (*grpcx.Server, storagev1.StorageServiceClient, *grpc.ClientConn) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: 1}, "test")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 4 << 20, GracefulStopTimeout: time.Second},
		grpcx.ServerOptions{Logger: log.Discard(), Telemetry: tel, RoleOf: func(string) string { return "storage-node" }})
	storagev1.RegisterStorageServiceServer(srv.GRPC, storage{})
	grpcx.Register(srv.Validators, func(r *storagev1.ListOffsetsRequest) error {
		for i, p := range r.GetPartitions() {
			if p.GetSpec() == storagev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED {
				return errs.Invalid(errs.InvalidRequest, fmt.Sprintf("partitions[%d].spec", i), "must be set to EARLIEST, LATEST, TIMESTAMP or MAX_TIMESTAMP")
			}
		}
		return nil
	})
	srv.SetServing(true, storagev1.StorageService_ServiceDesc.ServiceName)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{Telemetry: tel.Client("client")})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		srv.Stop(context.Background())
		require.NoError(t, <-served)
	})
	return srv, storagev1.NewStorageServiceClient(conn), conn
}

func TestPanicBecomesInternalError(t *testing.T) {
	_, client, _ := startServer(t)
	_, err := client.Produce(context.Background(), &storagev1.ProduceRequest{})
	require.Equal(t, codes.Internal, status.Code(err))
	require.Equal(t, errs.UnknownServerError, errs.CodeOf(err))
	// The server survives and answers the next call.
	_, err = client.ListOffsets(context.Background(), &storagev1.ListOffsetsRequest{})
	require.NoError(t, err)
}

func TestValidationFailsWithFieldViolation(t *testing.T) {
	_, client, _ := startServer(t)
	_, err := client.ListOffsets(context.Background(), &storagev1.ListOffsetsRequest{
		Partitions: []*storagev1.ListOffsetsPartition{{Topic: "t"}},
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	e := errs.From(err)
	require.Equal(t, errs.InvalidRequest, e.Code)
	require.Len(t, e.Violations, 1)
	require.Equal(t, "partitions[0].spec", e.Violations[0].GetField())
	require.Contains(t, e.Message, "EARLIEST")
}

func TestUnimplementedHasActionableMessage(t *testing.T) {
	_, client, _ := startServer(t)
	_, err := client.DeleteRecords(context.Background(), &storagev1.DeleteRecordsRequest{})
	require.Equal(t, codes.Unimplemented, status.Code(err))
	require.Equal(t, errs.Unimplemented, errs.CodeOf(err))
	require.Contains(t, err.Error(), "sluice.storage.v1.StorageService/DeleteRecords")
}

// A service that has not been marked serving yet refuses calls with a
// retriable NODE_NOT_READY instead of reaching a role that has not started.
func TestCallsWaitForReadiness(t *testing.T) {
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 4 << 20, GracefulStopTimeout: time.Second},
		grpcx.ServerOptions{Logger: log.Discard()})
	storagev1.RegisterStorageServiceServer(srv.GRPC, storage{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(context.Background())
	conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{})
	require.NoError(t, err)
	defer conn.Close()
	client := storagev1.NewStorageServiceClient(conn)

	_, err = client.ListOffsets(context.Background(), &storagev1.ListOffsetsRequest{})
	require.Equal(t, errs.NodeNotReady, errs.CodeOf(err))
	require.True(t, errs.IsRetriable(err))

	srv.SetServing(true, storagev1.StorageService_ServiceDesc.ServiceName)
	_, err = client.ListOffsets(context.Background(), &storagev1.ListOffsetsRequest{})
	require.NoError(t, err)
	// Going NOT_SERVING while stopping changes health only.
	srv.SetServing(false, storagev1.StorageService_ServiceDesc.ServiceName)
	_, err = client.ListOffsets(context.Background(), &storagev1.ListOffsetsRequest{})
	require.NoError(t, err)
}

func TestHealthAndReflection(t *testing.T) {
	srv, _, conn := startServer(t)
	ctx := context.Background()
	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, resp.GetStatus())
	srv.SetServing(true, "")
	resp, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())

	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}))
	msg, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range msg.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.ElementsMatch(t, []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection", storagev1.StorageService_ServiceDesc.ServiceName}, names)
	require.NoError(t, stream.CloseSend())
}
