package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// txnAdminNode is one in-process node of a fake cluster: metadata naming
// every node (each a transaction coordinator) and topic "t" with one
// partition led by node 1, the partition leader's producer state and
// marker writes, and a transaction coordinator's listing.
type txnAdminNode struct {
	id      int32
	cluster *txnAdminCluster
	meta    txnAdminMeta
	storage txnAdminStorage
	coord   txnAdminCoord
}

type txnAdminMeta struct {
	metadatav1.UnimplementedMetadataServiceServer
	n *txnAdminNode
}

func (m *txnAdminMeta) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{}
	for _, n := range m.n.cluster.nodes {
		resp.Brokers = append(resp.Brokers, &commonv1.Broker{Id: n.id, Roles: []string{"storage-node", roleTransactionCoordinator},
			State: commonv1.BrokerState_BROKER_STATE_ALIVE, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: fakeHost(n.id), Port: 1}}})
	}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		switch name {
		case "t":
			ti.Partitions = []*commonv1.PartitionState{{Topic: name, Partition: 0, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}
		case "u":
			// Partition i is led by node i+1.
			for i, n := range m.n.cluster.nodes {
				ti.Partitions = append(ti.Partitions, &commonv1.PartitionState{Topic: name, Partition: int32(i), LeaderId: n.id, Replicas: []int32{n.id}, Isr: []int32{n.id}})
			}
		default:
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

// txnAdminStorage answers DescribeProducers with the scripted producer
// states, one per call (the last one repeated), and records the markers
// it is asked to write, answering each with the next scripted error.
type txnAdminStorage struct {
	storagev1.UnimplementedStorageServiceServer

	id        int32
	mu        sync.Mutex
	states    [][]*storagev1.ProducerState
	lso       int64
	describes []*storagev1.DescribeProducersRequest
	markers   []*storagev1.TxnMarker
	markerErr []error
}

func (s *txnAdminStorage) DescribeProducers(_ context.Context, req *storagev1.DescribeProducersRequest) (*storagev1.DescribeProducersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.describes = append(s.describes, req)
	var producers []*storagev1.ProducerState
	if len(s.states) > 0 {
		producers = s.states[0]
		if len(s.states) > 1 {
			s.states = s.states[1:]
		}
	}
	out := &storagev1.DescribeProducersResponse{}
	for _, tp := range req.GetPartitions() {
		out.Results = append(out.Results, &storagev1.DescribeProducersResult{Partition: tp, NodeId: s.id, Producers: producers, LastStableOffset: s.lso})
	}
	return out, nil
}

func (s *txnAdminStorage) WriteTxnMarkers(_ context.Context, req *storagev1.WriteTxnMarkersRequest) (*storagev1.WriteTxnMarkersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markers = append(s.markers, req.GetMarkers()...)
	var err error
	if len(s.markerErr) > 0 {
		err, s.markerErr = s.markerErr[0], s.markerErr[1:]
	}
	m := req.GetMarkers()[0]
	return &storagev1.WriteTxnMarkersResponse{Results: []*storagev1.TxnMarkerResult{{
		ProducerId: m.GetProducerId(), Partition: m.GetPartitions()[0], Error: errs.ItemError(err),
	}}}, nil
}

// txnAdminCoord lists its transactions, or answers with err.
type txnAdminCoord struct {
	txnv1.UnimplementedTransactionCoordinatorServiceServer

	mu   sync.Mutex
	list []*txnv1.TransactionListing
	err  error
	reqs []*txnv1.ListTransactionsRequest
}

func (c *txnAdminCoord) ListTransactions(_ context.Context, req *txnv1.ListTransactionsRequest) (*txnv1.ListTransactionsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
	if c.err != nil {
		return nil, c.err
	}
	return &txnv1.ListTransactionsResponse{Transactions: c.list}, nil
}

type txnAdminCluster struct {
	nodes []*txnAdminNode
}

func startTxnAdminCluster(t *testing.T, n int) (*txnAdminCluster, *Client) {
	t.Helper()
	fc := &txnAdminCluster{}
	lis := map[string]*bufconn.Listener{}
	var wg sync.WaitGroup
	var servers []*grpc.Server
	for i := 1; i <= n; i++ {
		node := &txnAdminNode{id: int32(i), cluster: fc}
		node.meta.n = node
		node.storage.id = node.id
		fc.nodes = append(fc.nodes, node)
		l := bufconn.Listen(1 << 20)
		lis[fakeAddr(node.id)] = l
		srv := grpc.NewServer()
		metadatav1.RegisterMetadataServiceServer(srv, &node.meta)
		storagev1.RegisterStorageServiceServer(srv, &node.storage)
		txnv1.RegisterTransactionCoordinatorServiceServer(srv, &node.coord)
		servers = append(servers, srv)
		wg.Go(func() { _ = srv.Serve(l) })
	}
	c, err := New(Config{Bootstrap: []string{fakeAddr(1)}, RequestTimeout: 3 * time.Second, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			l, ok := lis[addr]
			if !ok {
				return nil, errors.New("no such node: " + addr)
			}
			return l.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		for _, s := range servers {
			s.Stop()
		}
		wg.Wait()
	})
	return fc, c
}

// The abort of a hanging transaction writes one ABORT marker to the
// partition's leader with the producer's epoch and coordinator epoch as
// the leader shows them, and refuses, naming what the leader showed, when
// there is nothing to abort.
func TestAbortHangingTransaction(t *testing.T) {
	ctx := context.Background()
	open := &storagev1.ProducerState{ProducerId: 7, ProducerEpoch: 3, LastSequence: 9, CoordinatorEpoch: 5, CurrentTxnStartOffset: 40}
	closed := &storagev1.ProducerState{ProducerId: 7, ProducerEpoch: 3, LastSequence: 9, CoordinatorEpoch: 5, CurrentTxnStartOffset: -1}
	other := &storagev1.ProducerState{ProducerId: 8, ProducerEpoch: 0, LastSequence: 2, CurrentTxnStartOffset: -1}

	t.Run("writes the marker", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		st := &fc.nodes[0].storage
		st.states = [][]*storagev1.ProducerState{{other, open}}
		got, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.NoError(t, err)
		require.True(t, proto.Equal(open, got))
		require.Len(t, st.markers, 1)
		require.True(t, proto.Equal(&storagev1.TxnMarker{ProducerId: 7, ProducerEpoch: 3, Committed: false, CoordinatorEpoch: 5,
			Partitions: []*commonv1.TopicPartition{{Topic: "t", Partition: 0}}}, st.markers[0]), "%v", st.markers[0])
	})

	t.Run("unknown producer", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		fc.nodes[0].storage.states = [][]*storagev1.ProducerState{{other}}
		_, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.True(t, errs.Is(err, errs.UnknownProducerID), "%v", err)
		require.ErrorContains(t, err, "t-0: producer 7 is not among the partition's active producers (its leader, node 1, lists producers 8)")
		require.Empty(t, fc.nodes[0].storage.markers)
	})

	t.Run("no open transaction", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		fc.nodes[0].storage.states = [][]*storagev1.ProducerState{{closed}}
		fc.nodes[0].storage.lso = 120
		_, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.True(t, errs.Is(err, errs.InvalidTxnState), "%v", err)
		require.ErrorContains(t, err, "t-0: producer 7 has no open transaction on the partition (its leader, node 1, shows epoch 3, last sequence 9, no transaction start offset; last stable offset 120)")
		require.Empty(t, fc.nodes[0].storage.markers)
	})

	t.Run("marker refused", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		st := &fc.nodes[0].storage
		st.states = [][]*storagev1.ProducerState{{open}}
		st.markerErr = []error{errs.New(errs.TransactionCoordinatorFenced, "t-0: marker from coordinator epoch 5, older than 6")}
		_, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.True(t, errs.Is(err, errs.TransactionCoordinatorFenced), "%v", err)
		require.ErrorContains(t, err, "marker from coordinator epoch 5, older than 6", "the server's message")
		require.Len(t, st.markers, 1)
	})

	t.Run("retried after a failure that wrote the marker", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		st := &fc.nodes[0].storage
		// The first marker is appended but not acknowledged in time; the
		// second look shows the transaction closed.
		st.states = [][]*storagev1.ProducerState{{open}, {closed}}
		st.markerErr = []error{errs.New(errs.NotEnoughReplicasAfterAppend, "ISR shrank")}
		got, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.NoError(t, err)
		require.Equal(t, int64(40), got.GetCurrentTxnStartOffset())
		require.Len(t, st.markers, 1, "no second marker once the transaction is closed")
	})

	t.Run("retried while the marker is refused retriably", func(t *testing.T) {
		fc, c := startTxnAdminCluster(t, 1)
		st := &fc.nodes[0].storage
		st.states = [][]*storagev1.ProducerState{{open}}
		st.markerErr = []error{errs.New(errs.NotEnoughReplicas, "ISR too small"), nil}
		_, err := c.AbortHangingTransaction(ctx, "t", 0, 7)
		require.NoError(t, err)
		require.Len(t, st.markers, 2)
	})

	t.Run("unknown partition", func(t *testing.T) {
		_, c := startTxnAdminCluster(t, 1)
		_, err := c.AbortHangingTransaction(ctx, "t", 3, 7)
		require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "%v", err)
		_, err = c.AbortHangingTransaction(ctx, "nope", 0, 7)
		require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "%v", err)
	})
}

// Every transaction coordinator is asked with the filters; the answers
// are merged by id, and a coordinator that fails is named while the
// others' transactions are still returned.
func TestListTransactionsAsksEveryCoordinator(t *testing.T) {
	fc, c := startTxnAdminCluster(t, 3)
	ongoing := txnv1.TransactionState_TRANSACTION_STATE_ONGOING
	fc.nodes[0].coord.list = []*txnv1.TransactionListing{{TransactionalId: "b", ProducerId: 2, State: ongoing}}
	fc.nodes[1].coord.list = []*txnv1.TransactionListing{{TransactionalId: "a", ProducerId: 1, State: ongoing},
		{TransactionalId: "b", ProducerId: 2, State: txnv1.TransactionState_TRANSACTION_STATE_DEAD}}
	f := TxnFilters{States: []txnv1.TransactionState{ongoing}, ProducerIDs: []int64{1, 2}, MinDuration: 1500 * time.Millisecond}
	got, err := c.ListTransactions(context.Background(), f)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].GetTransactionalId())
	require.Equal(t, "b", got[1].GetTransactionalId())
	require.Equal(t, ongoing, got[1].GetState(), "the owner's entry, not the Dead one")
	for _, n := range fc.nodes {
		require.Len(t, n.coord.reqs, 1)
		require.True(t, proto.Equal(&txnv1.ListTransactionsRequest{StateFilters: f.States, ProducerIdFilters: []int64{1, 2}, DurationFilterMs: 1500}, n.coord.reqs[0]))
	}

	fc.nodes[2].coord.err = errs.New(errs.ClusterAuthorizationFailed, "not allowed")
	got, err = c.ListTransactions(context.Background(), TxnFilters{})
	require.Len(t, got, 2)
	require.True(t, errs.Is(err, errs.ClusterAuthorizationFailed), "%v", err)
	require.ErrorContains(t, err, "listing transactions at node3:1")

	_, err = c.ListTransactions(context.Background(), TxnFilters{MinDuration: -time.Second})
	require.True(t, errs.Is(err, errs.InvalidRequest), "%v", err)
}

// Many partitions are described with one request per leader; a partition
// or topic metadata says does not exist fails at once, named.
func TestDescribeProducersOf(t *testing.T) {
	fc, c := startTxnAdminCluster(t, 2)
	fc.nodes[0].storage.states = [][]*storagev1.ProducerState{{{ProducerId: 1, LastSequence: 4, CurrentTxnStartOffset: -1}}}
	fc.nodes[1].storage.states = [][]*storagev1.ProducerState{{{ProducerId: 2, LastSequence: 9, CurrentTxnStartOffset: 3}}}
	t0, u0, u1 := TopicPartition{"t", 0}, TopicPartition{"u", 0}, TopicPartition{"u", 1}
	got, err := c.DescribeProducersOf(context.Background(), t0, u0, u1, TopicPartition{"u", 5}, TopicPartition{"nope", 0})
	require.Len(t, got, 3)
	require.Equal(t, int32(4), got[t0].GetProducers()[0].GetLastSequence())
	require.Equal(t, int32(4), got[u0].GetProducers()[0].GetLastSequence())
	require.Equal(t, int64(3), got[u1].GetProducers()[0].GetCurrentTxnStartOffset())
	require.Len(t, fc.nodes[0].storage.describes, 1, "t-0 and u-0 in one request to their leader")
	require.Len(t, fc.nodes[0].storage.describes[0].GetPartitions(), 2)
	require.Len(t, fc.nodes[1].storage.describes, 1)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "%v", err)
	require.ErrorContains(t, err, "nope-0: UNKNOWN_TOPIC_OR_PARTITION")
	require.ErrorContains(t, err, "u-5: UNKNOWN_TOPIC_OR_PARTITION: topic \"u\" has 2 partitions; partition 5 does not exist")
}

// A chosen replica answers from its own copy; a node without a replica of
// the partition is refused before any call.
func TestDescribeProducersOn(t *testing.T) {
	fc, c := startTxnAdminCluster(t, 2)
	fc.nodes[1].storage.states = [][]*storagev1.ProducerState{{{ProducerId: 2, LastSequence: 9, CurrentTxnStartOffset: -1}}}
	res, err := c.DescribeProducersOn(context.Background(), "u", 1, 2)
	require.NoError(t, err)
	require.Equal(t, int32(2), res.GetNodeId())
	require.Equal(t, int64(2), res.GetProducers()[0].GetProducerId())
	require.True(t, fc.nodes[1].storage.describes[0].GetAnyReplica())
	_, err = c.DescribeProducersOn(context.Background(), "u", 1, 1)
	require.True(t, errs.Is(err, errs.InvalidRequest), "%v", err)
	require.ErrorContains(t, err, "node 1 holds no replica of u-1 (its replicas are on nodes [2])")
	require.Empty(t, fc.nodes[0].storage.describes)
	_, err = c.DescribeProducersOn(context.Background(), "u", 7, 1)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "%v", err)
}

func TestMergeTxnListings(t *testing.T) {
	l := func(id string, s txnv1.TransactionState) *txnv1.TransactionListing {
		return &txnv1.TransactionListing{TransactionalId: id, State: s}
	}
	dead, ongoing := txnv1.TransactionState_TRANSACTION_STATE_DEAD, txnv1.TransactionState_TRANSACTION_STATE_ONGOING
	got := mergeTxnListings([]*txnv1.TransactionListing{l("z", ongoing), l("m", dead)}, nil, []*txnv1.TransactionListing{l("m", ongoing), l("a", dead)})
	var ids []string
	for _, g := range got {
		ids = append(ids, g.GetTransactionalId())
	}
	require.Equal(t, []string{"a", "m", "z"}, ids)
	require.Equal(t, ongoing, got[1].GetState())
}
