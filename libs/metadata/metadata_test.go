package metadata_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func part(topic string, p, leader, epoch int32) *commonv1.PartitionState {
	return &commonv1.PartitionState{Topic: topic, Partition: p, LeaderId: leader, LeaderEpoch: epoch, Replicas: []int32{1, 2}, Isr: []int32{1, 2}}
}

func snapshot() *controllerv1.MetadataSnapshot {
	return &controllerv1.MetadataSnapshot{
		Revision: 10, ClusterId: "c", ControllerId: 1,
		Controllers: []*controllerv1.ControllerMember{{NodeId: 1, Address: "127.0.0.1:1"}},
		Brokers: []*commonv1.Broker{
			{Id: 1, State: commonv1.BrokerState_BROKER_STATE_ALIVE, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "127.0.0.1", Port: 9100}}},
			{Id: 2, State: commonv1.BrokerState_BROKER_STATE_FENCED},
		},
		Topics: []*controllerv1.TopicMetadata{{Name: "a", TopicId: "id-a", Partitions: []*commonv1.PartitionState{part("a", 0, 1, 0), part("a", 1, 2, 0)}}},
	}
}

func TestImageApplyMergesPartitionsAndKeepsOldImage(t *testing.T) {
	img := metadata.FromSnapshot(snapshot())
	require.Equal(t, "127.0.0.1:9100", img.Address(1))
	require.True(t, img.Alive(1))
	require.False(t, img.Alive(2))

	next := img.Apply(&controllerv1.MetadataDelta{
		Revision:       11,
		UpsertedTopics: []*controllerv1.TopicMetadata{{Name: "a", TopicId: "id-a", Partitions: []*commonv1.PartitionState{part("a", 1, 1, 1)}}},
		DeletedTopics:  []string{"missing"},
		RemovedBrokers: []int32{2},
	})
	p0, _ := next.Partition("a", 0)
	p1, _ := next.Partition("a", 1)
	require.Equal(t, int32(1), p0.GetLeaderId(), "unchanged partition kept")
	require.Equal(t, int32(1), p1.GetLeaderEpoch(), "changed partition merged")
	_, ok := next.Brokers[2]
	require.False(t, ok)
	old1, _ := img.Partition("a", 1)
	require.Equal(t, int32(0), old1.GetLeaderEpoch(), "the old image is unchanged")
	require.Len(t, img.Brokers, 2)

	// A topic re-created with a new id replaces its partitions.
	re := next.Apply(&controllerv1.MetadataDelta{Revision: 12, UpsertedTopics: []*controllerv1.TopicMetadata{
		{Name: "a", TopicId: "id-a2", Partitions: []*commonv1.PartitionState{part("a", 0, 2, 0)}},
	}})
	require.Len(t, re.Topics["a"].Partitions, 1)
}

func TestCacheSince(t *testing.T) {
	c := metadata.NewCache()
	_, _, ok := c.Since(0)
	require.False(t, ok, "nothing loaded")
	c.Reset(metadata.FromSnapshot(snapshot()))
	c.Apply(&controllerv1.MetadataDelta{Revision: 12})
	c.Apply(&controllerv1.MetadataDelta{Revision: 15})
	c.Apply(&controllerv1.MetadataDelta{Revision: 14}) // stale: ignored
	ds, img, ok := c.Since(12)
	require.True(t, ok)
	require.Len(t, ds, 1)
	require.Equal(t, int64(15), img.Revision)
	_, _, ok = c.Since(9)
	require.False(t, ok, "before the snapshot: needs a snapshot")
	ds, _, ok = c.Since(10)
	require.True(t, ok)
	require.Len(t, ds, 2)
}

// fakeController serves WatchMetadata from a cache, as controllers do.
type fakeController struct {
	controllerv1.UnimplementedControllerServiceServer
	cache *metadata.Cache
}

func (f *fakeController) WatchMetadata(r *controllerv1.WatchMetadataRequest, s grpc.ServerStreamingServer[controllerv1.WatchMetadataResponse]) error {
	return metadata.Serve(s.Context(), f.cache, r.GetFromRevision(), s.Send)
}

func TestWatcherFollowsControllerAndServesMetadata(t *testing.T) {
	src := metadata.NewCache()
	src.Reset(metadata.FromSnapshot(snapshot()))
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 4 << 20, GracefulStopTimeout: time.Second}, grpcx.ServerOptions{Logger: log.Discard()})
	controllerv1.RegisterControllerServiceServer(srv.GRPC, &fakeController{cache: src})
	srv.SetServing(true, controllerv1.ControllerService_ServiceDesc.ServiceName)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(context.Background())

	conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{})
	require.NoError(t, err)
	defer conn.Close()
	dst := metadata.NewCache()
	// The first address refuses connections: the watcher moves on.
	dead := "127.0.0.1:1"
	deadConn, err := wire.Dial(dead, wire.ClientOptions{})
	require.NoError(t, err)
	defer deadConn.Close()
	w := metadata.NewWatcher(dst, []string{dead, lis.Addr().String()}, func(addr string) (*grpc.ClientConn, error) {
		if addr == dead {
			return deadConn, nil
		}
		return conn, nil
	}, 7, log.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Start(ctx))
	defer func() { require.NoError(t, w.Stop(context.Background())) }()
	require.Equal(t, int64(10), dst.Load().Revision)

	src.Apply(&controllerv1.MetadataDelta{Revision: 20, UpsertedTopics: []*controllerv1.TopicMetadata{{Name: "b", TopicId: "id-b",
		Partitions: []*commonv1.PartitionState{part("b", 0, 1, 3)}}}})
	img, err := dst.WaitFor(ctx, func(img *metadata.Image) bool { return img.Revision == 20 })
	require.NoError(t, err)
	p, ok := img.Partition("b", 0)
	require.True(t, ok)
	require.Equal(t, int32(3), p.GetLeaderEpoch())

	ms := metadata.NewServer(dst, 7, grpcx.NewValidators())
	resp, err := ms.GetMetadata(ctx, &metadatav1.GetMetadataRequest{Topics: []string{"b", "nope"}})
	require.NoError(t, err)
	require.Equal(t, int32(7), resp.GetAnsweredBy())
	require.Equal(t, "127.0.0.1:1", resp.GetControllerAddress())
	require.Len(t, resp.GetTopics(), 2)
	require.Nil(t, resp.GetTopics()[0].GetError())
	require.Equal(t, errs.UnknownTopicOrPartition, resp.GetTopics()[1].GetError().GetCode())
}
