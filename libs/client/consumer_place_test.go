package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// placeFake serves metadata for topic "m", whose partition i is led by
// node leaders[i] (1 at node1:1, 2 at node2:2), and the storage service of
// every node it is dialled as. It counts ListOffsets requests and keeps
// fetch streams open, noting which partitions each asked for.
type placeFake struct {
	metadatav1.UnimplementedMetadataServiceServer
	storagev1.UnimplementedStorageServiceServer

	leaders  []int32
	listings atomic.Int32

	mu        sync.Mutex
	isolation []commonv1.IsolationLevel
	specs     []storagev1.OffsetSpec
	fetching  map[TopicPartition]int64 // partition -> fetch offset of a stream open now
}

func (f *placeFake) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{ControllerId: 1, ControllerAddress: "node1:1"}
	for id := int32(1); id <= 2; id++ {
		resp.Brokers = append(resp.Brokers, &commonv1.Broker{Id: id, Roles: []string{"storage-node"}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
			Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: fmt.Sprintf("node%d", id), Port: id}}})
	}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		if name != "m" {
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		for i, l := range f.leaders {
			if name == "m" {
				ti.Partitions = append(ti.Partitions, &commonv1.PartitionState{Topic: name, Partition: int32(i), LeaderId: l, LeaderEpoch: 1, Replicas: []int32{l}, Isr: []int32{l}})
			}
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

// ListOffsets answers 100 + the partition's index.
func (f *placeFake) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	f.listings.Add(1)
	f.mu.Lock()
	f.isolation = append(f.isolation, req.GetIsolationLevel())
	for _, p := range req.GetPartitions() {
		f.specs = append(f.specs, p.GetSpec())
	}
	f.mu.Unlock()
	resp := &storagev1.ListOffsetsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 100 + int64(p.GetPartition())})
	}
	return resp, nil
}

// Fetch keeps the stream open, sending nothing, until the client ends it.
func (f *placeFake) Fetch(req *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	f.mu.Lock()
	for _, p := range req.GetPartitions() {
		f.fetching[TopicPartition{p.GetTopic(), p.GetPartition()}] = p.GetFetchOffset()
	}
	f.mu.Unlock()
	<-stream.Context().Done()
	f.mu.Lock()
	for _, p := range req.GetPartitions() {
		// A stream that replaced this one may have noted its own offset.
		if tp := (TopicPartition{p.GetTopic(), p.GetPartition()}); f.fetching[tp] == p.GetFetchOffset() {
			delete(f.fetching, tp)
		}
	}
	f.mu.Unlock()
	return nil
}

// fetchingNow returns the partitions on open fetch streams with their
// fetch offsets.
func (f *placeFake) fetchingNow() map[TopicPartition]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[TopicPartition]int64, len(f.fetching))
	for tp, off := range f.fetching {
		out[tp] = off
	}
	return out
}

// startPlaceFake serves f in process as node1:1; a dial of node2:2 hangs
// until the test ends, as one to a node cut from the network. No request
// deadline runs out during a test.
func startPlaceFake(t *testing.T, f *placeFake) *Client {
	t.Helper()
	f.fetching = map[TopicPartition]int64{}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, f)
	storagev1.RegisterStorageServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	release := make(chan struct{})
	c, err := New(Config{Bootstrap: []string{"node1:1"}, RequestTimeout: time.Hour, BootstrapTimeout: time.Hour, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if strings.HasPrefix(addr, "node2") {
				<-release
				return nil, errors.New("node2 is cut off")
			}
			return lis.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		close(release)
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})
	return c
}

// The partitions a leader leads that have no position are resolved with
// one ListOffsets request to it, not one each, with the consumer's reset
// policy and isolation level.
func TestConsumerResolvesALeadersPartitionsInOneRequest(t *testing.T) {
	f := &placeFake{leaders: []int32{1, 1, 1, 1, 1, 1}}
	c := startPlaceFake(t, f)
	k := c.NewConsumer(ConsumerConfig{Reset: ResetEarliest, ReadCommitted: true})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))
	require.Eventually(t, func() bool { return len(f.fetchingNow()) == len(f.leaders) }, 20*time.Second, 5*time.Millisecond)
	for i := range f.leaders {
		tp := TopicPartition{"m", int32(i)}
		require.Equal(t, 100+int64(i), k.Position(tp))
		require.Equal(t, 100+int64(i), f.fetchingNow()[tp], "fetched from the resolved offset")
	}
	require.EqualValues(t, 1, f.listings.Load(), "ListOffsets requests for six partitions of one leader")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []commonv1.IsolationLevel{commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED}, f.isolation)
	for _, s := range f.specs {
		require.Equal(t, storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, s)
	}
}

// While one leader cannot be reached (its dial hangs), the partitions led
// elsewhere are resolved and fetched: the consumer does not wait for the
// unreachable leader's partitions one after another before it reads
// anything.
func TestConsumerReadsHealthyLeadersWhileAnotherHangs(t *testing.T) {
	f := &placeFake{leaders: []int32{2, 1, 2, 1, 2, 1}}
	c := startPlaceFake(t, f)
	k := c.NewConsumer(ConsumerConfig{})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))
	want := map[TopicPartition]int64{{"m", 1}: 101, {"m", 3}: 103, {"m", 5}: 105}
	require.Eventually(t, func() bool { return len(f.fetchingNow()) == len(want) }, 20*time.Second, 5*time.Millisecond,
		"node1's partitions are not fetched while node2 hangs")
	require.Equal(t, want, f.fetchingNow())
	for _, p := range []int32{0, 2, 4} {
		require.EqualValues(t, -1, k.Position(TopicPartition{"m", p}), "node2 never answered")
	}
	require.EqualValues(t, 1, f.listings.Load())
}

// While one leader's starting offsets are being looked up (its dial
// hangs), the consumer goes on serving the others: a Seek on a partition
// of a healthy leader moves its stream at once.
func TestConsumerSeeksWhileAnotherLeaderHangs(t *testing.T) {
	f := &placeFake{leaders: []int32{2, 1}}
	c := startPlaceFake(t, f)
	k := c.NewConsumer(ConsumerConfig{})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))
	tp := TopicPartition{"m", 1}
	require.Eventually(t, func() bool { return f.fetchingNow()[tp] == 101 }, 20*time.Second, 5*time.Millisecond)
	k.Seek(tp, 7)
	require.Eventually(t, func() bool { return f.fetchingNow()[tp] == 7 }, 20*time.Second, 5*time.Millisecond,
		"the partition is fetched from the Seek's offset while node2 hangs")
	require.EqualValues(t, -1, k.Position(TopicPartition{"m", 0}), "node2 never answered")
}

// With auto.offset.reset none a partition without a position fails with
// OFFSET_OUT_OF_RANGE and no leader is asked for an offset.
func TestConsumerResetNoneAsksNoLeader(t *testing.T) {
	f := &placeFake{leaders: []int32{1, 1}}
	c := startPlaceFake(t, f)
	k := c.NewConsumer(ConsumerConfig{Reset: ResetNone})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, "m"))
	_, err := k.Poll(ctx)
	require.True(t, errs.Is(err, errs.OffsetOutOfRange), "got %v", err)
	require.ErrorContains(t, err, "auto.offset.reset is none; Seek first")
	require.Zero(t, f.listings.Load())
}
