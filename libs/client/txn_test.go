package client

import (
	"context"
	"errors"
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
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// fakeTxnNode serves metadata, FindCoordinator and InitProducerId with
// scripted answers.
type fakeTxnNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	groupv1.UnimplementedGroupCoordinatorServiceServer
	txnv1.UnimplementedTransactionCoordinatorServiceServer

	id int32
	// find answers FindCoordinator for a transaction key.
	find func(key string) *groupv1.Coordinator
	// init answers InitProducerId.
	init func(n int32, req *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error)

	findCalls, initCalls atomic.Int32
	mu                   sync.Mutex
	keyTypes             []groupv1.CoordinatorKeyType
}

func (f *fakeTxnNode) GetMetadata(context.Context, *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	return &metadatav1.GetMetadataResponse{Brokers: []*commonv1.Broker{{
		Id: 1, Roles: []string{roleGroupCoordinator, "transaction-coordinator"}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: fakeHost(1), Port: 1}},
	}}}, nil
}

func (f *fakeTxnNode) FindCoordinator(_ context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	f.findCalls.Add(1)
	f.mu.Lock()
	f.keyTypes = append(f.keyTypes, req.GetKeyType())
	f.mu.Unlock()
	co := f.find(req.GetKeys()[0])
	co.Key = req.GetKeys()[0]
	return &groupv1.FindCoordinatorResponse{Coordinators: []*groupv1.Coordinator{co}}, nil
}

func (f *fakeTxnNode) InitProducerId(_ context.Context, req *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
	return f.init(f.initCalls.Add(1), req)
}

func (f *fakeTxnNode) nodeID() int32 { return f.id }

// txnNodeServer is a fake node: fakeTxnNode, or a type that embeds it and
// answers some calls its own way.
type txnNodeServer interface {
	metadatav1.MetadataServiceServer
	groupv1.GroupCoordinatorServiceServer
	txnv1.TransactionCoordinatorServiceServer
	nodeID() int32
}

// startTxnNodes serves n fake nodes (node1:1, node2:1, ...) in process.
func startTxnNodes(t *testing.T, nodes ...txnNodeServer) *Client {
	t.Helper()
	lis := map[string]*bufconn.Listener{}
	var wg sync.WaitGroup
	var servers []*grpc.Server
	for _, n := range nodes {
		l := bufconn.Listen(1 << 20)
		lis[fakeAddr(n.nodeID())] = l
		srv := grpc.NewServer()
		metadatav1.RegisterMetadataServiceServer(srv, n)
		groupv1.RegisterGroupCoordinatorServiceServer(srv, n)
		txnv1.RegisterTransactionCoordinatorServiceServer(srv, n)
		servers = append(servers, srv)
		wg.Go(func() { _ = srv.Serve(l) })
	}
	c, err := New(Config{
		Bootstrap: []string{fakeAddr(1)}, RequestTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				l, ok := lis[addr]
				if !ok {
					return nil, errors.New("no such node: " + addr)
				}
				return l.DialContext(ctx)
			}),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		for _, s := range servers {
			s.Stop()
		}
		wg.Wait()
	})
	return c
}

// InitProducerID finds the transactional id's coordinator with a
// TRANSACTION lookup, follows NOT_COORDINATOR, and retries
// CONCURRENT_TRANSACTIONS and COORDINATOR_LOAD_IN_PROGRESS on the same
// coordinator until it answers.
func TestInitProducerIDRetriesOnTheCoordinator(t *testing.T) {
	n1 := &fakeTxnNode{id: 1}
	n2 := &fakeTxnNode{id: 2}
	n1.find = func(string) *groupv1.Coordinator { return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)} }
	n1.init = func(int32, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
		e := errs.New(errs.NotCoordinator, "moved").WithCoordinator(&edpb.CoordinatorHint{Key: "tx", NodeId: 2, Address: fakeAddr(2)})
		return &txnv1.InitProducerIdResponse{Error: e.Proto()}, nil
	}
	var got *txnv1.InitProducerIdRequest
	n2.init = func(n int32, req *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
		switch n {
		case 1:
			return &txnv1.InitProducerIdResponse{Error: errs.New(errs.ConcurrentTransactions, "completing the previous transaction").Proto()}, nil
		case 2:
			return nil, errs.New(errs.CoordinatorLoadInProgress, "replaying __transaction_state-3")
		}
		got = req
		return &txnv1.InitProducerIdResponse{ProducerId: 4001, ProducerEpoch: 3}, nil
	}
	c := startTxnNodes(t, n1, n2)
	id, epoch, err := c.InitProducerID(context.Background(), "tx", 90*time.Second, 4001, 2)
	require.NoError(t, err)
	require.Equal(t, int64(4001), id)
	require.Equal(t, int16(3), epoch)
	require.EqualValues(t, 3, n2.initCalls.Load())
	require.EqualValues(t, 1, n1.findCalls.Load(), "the hint and the waits spare lookups")
	require.Equal(t, []groupv1.CoordinatorKeyType{groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION}, n1.keyTypes)
	require.Equal(t, "tx", got.GetTransactionalId())
	require.Equal(t, int32(90000), got.GetTransactionTimeoutMs())
	require.Equal(t, int64(4001), got.GetProducerId())
	require.Equal(t, int32(2), got.GetProducerEpoch())
	_, ok := c.groups.get("tx")
	require.False(t, ok, "transactional ids are cached apart from groups")
}

// A final error is returned at once, as the coordinator phrased it; a
// negative timeout is refused without a call.
func TestInitProducerIDReturnsFinalErrors(t *testing.T) {
	n1 := &fakeTxnNode{id: 1}
	n1.find = func(string) *groupv1.Coordinator { return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)} }
	n1.init = func(int32, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
		return &txnv1.InitProducerIdResponse{Error: errs.New(errs.InvalidTransactionTimeout, "above the maximum").Proto()}, nil
	}
	c := startTxnNodes(t, n1)
	_, _, err := c.InitProducerID(context.Background(), "", time.Hour, -1, -1)
	require.Equal(t, errs.InvalidTransactionTimeout, errs.CodeOf(err))
	require.EqualValues(t, 1, n1.initCalls.Load())

	_, _, err = c.InitProducerID(context.Background(), "", -time.Second, -1, -1)
	require.Equal(t, errs.InvalidTransactionTimeout, errs.CodeOf(err))
	require.EqualValues(t, 1, n1.initCalls.Load())
}
