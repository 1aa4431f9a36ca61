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

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// laggingNode is one node that is controller, metadata server and storage
// node at once, whose metadata learns a created topic only after lag more
// metadata calls have asked about it (as a storage node's image follows the
// controller's a moment behind).
type laggingNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	controllerv1.UnimplementedControllerServiceServer
	storagev1.UnimplementedStorageServiceServer

	lag      int32
	mu       sync.Mutex
	created  map[string]bool
	asked    atomic.Int32 // metadata calls naming a created topic
	listings atomic.Int32
}

func (n *laggingNode) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{ControllerId: 1, ControllerAddress: "node:1", Brokers: []*commonv1.Broker{{
		Id: 1, Roles: []string{"controller", "storage-node"}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "node", Port: 1}},
	}}}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		n.mu.Lock()
		created := n.created[name]
		n.mu.Unlock()
		if created && n.asked.Add(1) > n.lag {
			ti.Partitions = []*commonv1.PartitionState{{Topic: name, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}
		} else {
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

func (n *laggingNode) CreateTopics(_ context.Context, req *controllerv1.CreateTopicsRequest) (*controllerv1.CreateTopicsResponse, error) {
	resp := &controllerv1.CreateTopicsResponse{}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range req.GetTopics() {
		if !req.GetValidateOnly() {
			n.created[s.GetName()] = true
		}
		resp.Results = append(resp.Results, &controllerv1.CreateTopicResult{Name: s.GetName()})
	}
	return resp, nil
}

func (n *laggingNode) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	n.listings.Add(1)
	resp := &storagev1.ListOffsetsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 0})
	}
	return resp, nil
}

func startLaggingNode(t *testing.T, lag int32) (*laggingNode, *Client) {
	t.Helper()
	n := &laggingNode{lag: lag, created: map[string]bool{}}
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, n)
	controllerv1.RegisterControllerServiceServer(srv, n)
	storagev1.RegisterStorageServiceServer(srv, n)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	c, err := New(Config{Bootstrap: []string{"node:1"}, RequestTimeout: 10 * time.Second, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})
	return n, c
}

// Right after this client created a topic, a node whose metadata has not
// caught up answers UNKNOWN_TOPIC_OR_PARTITION: ListOffsets retries that
// until the topic shows up. A topic nobody created still fails at once.
func TestListOffsetsRetriesUnknownTopicRightAfterCreate(t *testing.T) {
	n, c := startLaggingNode(t, 3)
	ctx := context.Background()

	start := time.Now()
	_, err := c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"never", 0})
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
	require.Less(t, time.Since(start), 5*time.Second, "an absent topic nobody created fails at once, not at the timeout")

	_, err = c.CreateTopic(ctx, "fresh", 1, 1, nil)
	require.NoError(t, err)
	got, err := c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"fresh", 0})
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]int64{{"fresh", 0}: 0}, got)
	require.EqualValues(t, 4, n.asked.Load(), "three unknown-topic answers, then the topic")
	require.EqualValues(t, 1, n.listings.Load())
}

// A producer sending to a topic its client has just created waits for the
// lagging node's metadata instead of failing the record.
func TestProducerWaitsForATopicJustCreated(t *testing.T) {
	_, c := startLaggingNode(t, 3)
	ctx := context.Background()
	_, err := c.CreateTopic(ctx, "fresh", 1, 1, nil)
	require.NoError(t, err)
	p := c.NewProducer(ProducerConfig{})
	defer func() { _ = p.Close(ctx) }()
	n, err := p.md.partitionsWait(ctx, "fresh", 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	_, err = p.md.partitionsWait(ctx, "never", 10*time.Second)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
}
