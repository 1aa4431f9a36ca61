package client

import (
	"context"
	"errors"
	"io"
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

// fakeNode is an in-process node that is controller, metadata server and
// storage node at once. Its metadata knows topic "t" (one partition, led
// by itself) and the topics created through it, each only after lag more
// metadata calls have asked about it (as a storage node's image follows
// the controller's a moment behind); its produce stream answers what the
// test chooses.
type fakeNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	controllerv1.UnimplementedControllerServiceServer
	storagev1.UnimplementedStorageServiceServer

	// notReady metadata answers come first, as from a starting node.
	notReady atomic.Int32
	// produceErr answers every produced partition when set.
	produceErr *errs.Error
	metaCalls  atomic.Int32
	fetchCalls atomic.Int32

	lag      int32
	mu       sync.Mutex
	created  map[string]bool
	asked    atomic.Int32 // metadata calls naming a created topic
	listings atomic.Int32
}

// Fetch ends every stream at once without a word.
func (f *fakeNode) Fetch(*storagev1.FetchRequest, grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	f.fetchCalls.Add(1)
	return nil
}

func (f *fakeNode) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	f.metaCalls.Add(1)
	if f.notReady.Add(-1) >= 0 {
		return nil, errs.New(errs.NodeNotReady, "sluice.metadata.v1.MetadataService on this node is starting")
	}
	resp := &metadatav1.GetMetadataResponse{ControllerId: 1, ControllerAddress: "node1:1", Brokers: []*commonv1.Broker{{
		Id: 1, Roles: []string{"controller", "storage-node"}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "node1", Port: 1}},
	}}}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		f.mu.Lock()
		created := f.created[name]
		f.mu.Unlock()
		if name == "t" || created && f.asked.Add(1) > f.lag {
			ti.Partitions = []*commonv1.PartitionState{{Topic: name, Partition: 0, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}
		} else {
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

func (f *fakeNode) CreateTopics(_ context.Context, req *controllerv1.CreateTopicsRequest) (*controllerv1.CreateTopicsResponse, error) {
	resp := &controllerv1.CreateTopicsResponse{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range req.GetTopics() {
		if !req.GetValidateOnly() {
			if f.created == nil {
				f.created = map[string]bool{}
			}
			f.created[s.GetName()] = true
		}
		resp.Results = append(resp.Results, &controllerv1.CreateTopicResult{Name: s.GetName()})
	}
	return resp, nil
}

func (f *fakeNode) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	f.listings.Add(1)
	resp := &storagev1.ListOffsetsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 0})
	}
	return resp, nil
}

func (f *fakeNode) ProduceStream(stream grpc.BidiStreamingServer[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]) error {
	var base int64
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := &storagev1.ProduceResponse{}
		for _, p := range req.GetRequest().GetPartitions() {
			res := &storagev1.ProducePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), BaseOffset: base}
			if f.produceErr != nil {
				res.Error, res.BaseOffset = f.produceErr.Proto(), -1
			}
			base++
			out.Results = append(out.Results, res)
		}
		if err := stream.Send(&storagev1.ProduceStreamResponse{RequestId: req.GetRequestId(), Response: out}); err != nil {
			return err
		}
	}
}

// startFake serves f in process; every address the client dials reaches
// it.
func startFake(t *testing.T, f *fakeNode, cfg Config) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, f)
	controllerv1.RegisterControllerServiceServer(srv, f)
	storagev1.RegisterStorageServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	cfg.Bootstrap = []string{"node1:1"}
	cfg.DialOptions = []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})
	return c
}

// A record that runs out of delivery time reports the error that kept it
// from being delivered, not only the timeout (as Kafka's producer does).
func TestProducerTimeoutNamesLastError(t *testing.T) {
	f := &fakeNode{produceErr: errs.New(errs.StorageError, "t-0: no space left on device")}
	c := startFake(t, f, Config{})
	// The fake serves no producer ids: these tests are about retries of
	// produce requests themselves.
	p := c.NewProducer(ProducerConfig{DeliveryTimeout: 500 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond, DisableIdempotence: true})
	defer func() { _ = p.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")})
	require.Error(t, err)
	require.True(t, errs.Is(res[0].Err, errs.RequestTimedOut), "got %v", res[0].Err)
	require.ErrorContains(t, res[0].Err, "last error: KAFKA_STORAGE_ERROR: t-0: no space left on device")
}

// A producer whose first metadata calls meet a node that is still starting
// (NODE_NOT_READY, retriable) retries them instead of failing Produce.
func TestProducerRetriesNodeNotReady(t *testing.T) {
	f := &fakeNode{}
	f.notReady.Store(3)
	c := startFake(t, f, Config{})
	p := c.NewProducer(ProducerConfig{DeliveryTimeout: 10 * time.Second, DisableIdempotence: true})
	defer func() { _ = p.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")})
	require.NoError(t, err)
	require.Equal(t, int64(0), res[0].Offset)
	require.GreaterOrEqual(t, f.metaCalls.Load(), int32(4))
}

// A topic metadata says does not exist fails Produce at once, retried or
// not.
func TestProducerUnknownTopicFailsAtOnce(t *testing.T) {
	f := &fakeNode{}
	c := startFake(t, f, Config{})
	p := c.NewProducer(ProducerConfig{DeliveryTimeout: time.Minute})
	defer func() { _ = p.Close(context.Background()) }()
	err := p.Produce(context.Background(), &Record{Topic: "nope", Partition: 0}, nil)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
	require.Equal(t, int32(1), f.metaCalls.Load())
}

// A consumer assigned a partition the topic does not have says so from
// Poll instead of waiting for it forever.
func TestConsumerUnknownPartitionSurfaces(t *testing.T) {
	c := startFake(t, &fakeNode{}, Config{})
	k := c.NewConsumer(ConsumerConfig{})
	defer k.Close()
	k.Assign(TopicPartition{"t", 7})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := k.Poll(ctx)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
	require.ErrorContains(t, err, `topic "t" has 1 partitions; partition 7 does not exist`)
}

// Produce waits for metadata at most MaxBlock (max.block.ms), then says
// why it could not get it.
func TestProduceMaxBlockNamesLastError(t *testing.T) {
	f := &fakeNode{}
	f.notReady.Store(1 << 30)
	c := startFake(t, f, Config{})
	p := c.NewProducer(ProducerConfig{MaxBlock: 300 * time.Millisecond})
	defer func() { _ = p.Close(context.Background()) }()
	err := p.Produce(context.Background(), &Record{Topic: "t", Partition: 0}, nil)
	require.True(t, errs.Is(err, errs.RequestTimedOut), "got %v", err)
	require.ErrorContains(t, err, "NODE_NOT_READY")
	require.Greater(t, f.metaCalls.Load(), int32(1), "retried before giving up")
}

// A leader that ends fetch streams without a word is retried with backoff,
// and Poll says so once APITimeout has passed, instead of the consumer
// reopening streams in a tight loop forever.
func TestConsumerBacksOffStreamsEndedByLeader(t *testing.T) {
	f := &fakeNode{}
	c := startFake(t, f, Config{})
	k := c.NewConsumer(ConsumerConfig{APITimeout: 500 * time.Millisecond})
	defer k.Close()
	tp := TopicPartition{"t", 0}
	k.Assign(tp)
	k.Seek(tp, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := k.Poll(ctx)
	require.True(t, errs.Is(err, errs.RequestTimedOut), "got %v", err)
	require.ErrorContains(t, err, "ended the fetch stream")
	require.Less(t, f.fetchCalls.Load(), int32(50), "streams reopened without backoff")
}

// A partition back on a stream is not waiting for a retry, whatever its
// retry state says: the run loop must not wake for it (it woke about every
// millisecond while the stream lived).
func TestNextRetryIgnoresPlacedPartitions(t *testing.T) {
	now := time.Now()
	a, b := TopicPartition{Topic: "t", Partition: 0}, TopicPartition{Topic: "t", Partition: 1}
	retry := map[TopicPartition]*retryState{
		a: {retryAt: now.Add(-time.Second)},
		b: {retryAt: now.Add(300 * time.Millisecond)},
	}
	d, ok := nextRetry(retry, map[TopicPartition]bool{a: true}, now)
	require.True(t, ok)
	require.Equal(t, 300*time.Millisecond, d)
	_, ok = nextRetry(retry, map[TopicPartition]bool{a: true, b: true}, now)
	require.False(t, ok, "nothing waits when every partition is placed")
}

// A topic whose cache entry a concurrent refresh removed (it learned the
// topic was deleted) is answered with that refresh's error: reading the
// entry unchecked dereferenced nil.
func TestCountOfTopicRemovedMeanwhile(t *testing.T) {
	m := newMetaCache(nil)
	m.absent["gone"] = errs.New(errs.UnknownTopicOrPartition, `topic "gone" does not exist`)
	_, err := m.countLocked("gone")
	require.Equal(t, errs.UnknownTopicOrPartition, errs.CodeOf(err))
	require.Contains(t, err.Error(), "does not exist")
	_, err = m.countLocked("never-seen")
	require.Equal(t, errs.UnknownTopicOrPartition, errs.CodeOf(err))
	m.topics["t"] = &topicMeta{partitions: make([]partMeta, 3)}
	n, err := m.countLocked("t")
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}
