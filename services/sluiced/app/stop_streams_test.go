package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/testutil"
	"github.com/sluice-io/sluice/services/sluiced/app"
)

// A node with an open ProduceStream and a following Fetch stops at once
// instead of waiting out its graceful-stop timeout for the clients to end
// them: the streams end with a retriable status after every request the
// node accepted is answered.
func TestStopEndsOpenStreams(t *testing.T) {
	const graceful = time.Minute
	cfg, addr := serverConfig(t, "--log.level=warn", "--grpc.graceful-stop-timeout="+graceful.String())
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, cfg, &syncBuffer{}) }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*graceful)
	defer cancel()
	cl, err := client.New(client.Config{Bootstrap: []string{addr}})
	require.NoError(t, err)
	defer cl.Close()
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		_, err := cl.CreateTopic(ctx, "stopping", 1, 1, nil)
		return err
	})
	conn, err := wire.Dial(addr, wire.ClientOptions{})
	require.NoError(t, err)
	defer conn.Close()
	storage := storagev1.NewStorageServiceClient(conn)
	produce := func(ps storagev1.StorageService_ProduceStreamClient, id uint64) error {
		return ps.Send(&storagev1.ProduceStreamRequest{RequestId: id, Request: &storagev1.ProduceRequest{
			Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10_000,
			Partitions: []*storagev1.ProducePartition{{Topic: "stopping", Partition: 0, Data: &storagev1.ProducePartition_Records{
				Records: &commonv1.Records{Records: []*commonv1.Record{{Value: []byte("v")}}}}}},
		}})
	}
	var ps storagev1.StorageService_ProduceStreamClient
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		var err error
		if ps, err = storage.ProduceStream(ctx); err != nil {
			return err
		}
		if err := produce(ps, 1); err != nil {
			return err
		}
		resp, err := ps.Recv()
		if err != nil {
			return err
		}
		if e := errs.FromProto(resp.GetResponse().GetResults()[0].GetError()); e != nil {
			return e
		}
		return nil
	})
	fetch, err := storage.Fetch(ctx, &storagev1.FetchRequest{Follow: true, MaxWaitMs: 500,
		Partitions: []*storagev1.FetchPartition{{Topic: "stopping", Partition: 0}}})
	require.NoError(t, err)
	_, err = fetch.Recv()
	require.NoError(t, err)

	// The stream stays open, as a producer's does between records.
	start := time.Now()
	stop()
	var took time.Duration
	select {
	case err := <-done:
		took = time.Since(start)
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the node did not stop")
	}
	t.Logf("stopped in %v", took)
	require.Less(t, took, graceful/2, "the stop waited for the open streams")

	_, err = ps.Recv()
	require.Error(t, err)
	require.True(t, errs.IsRetriable(err), "%v", err)
	for {
		if _, err = fetch.Recv(); err != nil {
			break
		}
	}
	require.True(t, errs.IsRetriable(err), "%v", err)
}
