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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestNextCoordStep(t *testing.T) {
	cur := coordinator{id: 1, addr: "n1:1"}
	other := &edpb.CoordinatorHint{Key: "g", NodeId: 2, Address: "n2:1"}
	self := &edpb.CoordinatorHint{Key: "g", NodeId: 1, Address: "n1:1"}
	for _, tc := range []struct {
		name   string
		err    error
		hinted bool
		want   coordStep
		next   coordinator
	}{
		{"hint to another node is followed", errs.New(errs.NotCoordinator, "moved").WithCoordinator(other), false, stepFollowHint, coordinator{2, "n2:1"}},
		{"hint as a gRPC status is followed", status.Convert(errs.New(errs.NotCoordinator, "moved").WithCoordinator(other)).Err(), false, stepFollowHint, coordinator{2, "n2:1"}},
		{"second hint in a row backs off", errs.New(errs.NotCoordinator, "moved").WithCoordinator(other), true, stepRefind, coordinator{}},
		{"hint naming the same node backs off", errs.New(errs.NotCoordinator, "moved").WithCoordinator(self), false, stepRefind, coordinator{}},
		{"no hint", errs.New(errs.NotCoordinator, "moved"), false, stepRefind, coordinator{}},
		{"hint without address", errs.New(errs.NotCoordinator, "moved").WithCoordinator(&edpb.CoordinatorHint{NodeId: 2}), false, stepRefind, coordinator{}},
		{"coordinator not available", errs.New(errs.CoordinatorNotAvailable, "electing"), false, stepRefind, coordinator{}},
		{"load in progress keeps the node", errs.New(errs.CoordinatorLoadInProgress, "replaying"), false, stepWait, coordinator{}},
		{"refused connection", status.Error(codes.Unavailable, "connection refused"), false, stepRefind, coordinator{}},
		{"node not ready", errs.New(errs.NodeNotReady, "starting"), false, stepRefind, coordinator{}},
		{"request timed out", errs.New(errs.RequestTimedOut, "offsets write timed out"), false, stepRefind, coordinator{}},
		{"non-empty group is final", errs.New(errs.NonEmptyGroup, "group g has 2 members"), false, stepReturn, coordinator{}},
		{"bad argument as status is final", errs.New(errs.InvalidGroupID, "empty group id").GRPCStatus().Err(), false, stepReturn, coordinator{}},
		{"method not served is final", status.Error(codes.Unimplemented, "method OffsetDelete not implemented"), false, stepReturn, coordinator{}},
		{"retriable but not about the coordinator is final", errs.New(errs.UnknownTopicOrPartition, "no topic t"), false, stepReturn, coordinator{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, next := nextCoordStep(tc.err, cur, tc.hinted)
			require.Equal(t, tc.want, step)
			require.Equal(t, tc.next, next)
		})
	}
}

func TestCoordinatorGaveUp(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	server := errs.New(errs.CoordinatorNotAvailable, "the offsets topic has no leader")
	transport := errs.New(errs.NodeUnreachable, "n1:1 did not answer within 2s")

	err := coordinatorGaveUp(expired, "g", server, transport)
	require.Same(t, server, err, "the server's last answer, not the transport failure after it")

	err = coordinatorGaveUp(expired, "g", nil, transport)
	require.Equal(t, errs.RequestTimedOut, errs.CodeOf(err))
	require.ErrorContains(t, err, "n1:1 did not answer")

	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	err = coordinatorGaveUp(canceled, "g", server, server)
	require.ErrorIs(t, err, context.Canceled)
}

// fakeGroupNode serves metadata (every node has the group-coordinator
// role) and the group API, with the answers the test chooses.
type fakeGroupNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	groupv1.UnimplementedGroupCoordinatorServiceServer
	storagev1.UnimplementedStorageServiceServer

	id      int32
	cluster *fakeGroupCluster
	// find answers FindCoordinator; nil answers "node 1".
	find func() (*groupv1.Coordinator, error)
	// describe answers DescribeGroups.
	describe func() (*groupv1.DescribeGroupsResponse, error)
	// list answers ListGroups.
	list func(*groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error)
	// commit answers OffsetCommit.
	commit func(*groupv1.OffsetCommitRequest) (*groupv1.OffsetCommitResponse, error)
	// listOffsets answers ListOffsets.
	listOffsets func(*storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error)

	findCalls, describeCalls atomic.Int32
	// noRole leaves the group-coordinator role out of this node's metadata
	// entry, and its group API unserved.
	noRole atomic.Bool
	// silent makes connections to the node hang: it accepts them and never
	// answers, as a paused process does.
	silent atomic.Bool
}

func (f *fakeGroupNode) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{}
	// Topic "t" has one partition per node, partition i led by node i+1.
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		if name != "t" {
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		for i, n := range f.cluster.nodes {
			if name == "t" {
				ti.Partitions = append(ti.Partitions, &commonv1.PartitionState{Topic: name, Partition: int32(i), LeaderId: n.id})
			}
		}
		resp.Topics = append(resp.Topics, ti)
	}
	for _, n := range f.cluster.nodes {
		roles := []string{"storage-node", roleGroupCoordinator}
		if n.noRole.Load() {
			roles = roles[:1]
		}
		resp.Brokers = append(resp.Brokers, &commonv1.Broker{
			Id: n.id, Roles: roles, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
			Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: fakeHost(n.id), Port: 1}},
		})
	}
	return resp, nil
}

func (f *fakeGroupNode) FindCoordinator(_ context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	if f.noRole.Load() {
		return nil, status.Error(codes.Unimplemented, "unknown service sluice.group.v1.GroupCoordinatorService")
	}
	f.findCalls.Add(1)
	co := &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)}
	if f.find != nil {
		var err error
		if co, err = f.find(); err != nil {
			return nil, err
		}
	}
	co.Key = req.GetKeys()[0]
	return &groupv1.FindCoordinatorResponse{Coordinators: []*groupv1.Coordinator{co}}, nil
}

func (f *fakeGroupNode) DescribeGroups(context.Context, *groupv1.DescribeGroupsRequest) (*groupv1.DescribeGroupsResponse, error) {
	f.describeCalls.Add(1)
	return f.describe()
}

func (f *fakeGroupNode) ListGroups(_ context.Context, req *groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
	return f.list(req)
}

func (f *fakeGroupNode) OffsetCommit(_ context.Context, req *groupv1.OffsetCommitRequest) (*groupv1.OffsetCommitResponse, error) {
	return f.commit(req)
}

func (f *fakeGroupNode) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	return f.listOffsets(req)
}

func fakeHost(id int32) string { return "node" + string(rune('0'+id)) }
func fakeAddr(id int32) string { return fakeHost(id) + ":1" }

// fakeGroupCluster is a few fakeGroupNodes in process, each reached at its
// own address.
type fakeGroupCluster struct {
	nodes []*fakeGroupNode
	lis   map[string]*bufconn.Listener

	mu sync.Mutex
	// hung are the server ends of connections to silent nodes, closed
	// when the test ends.
	hung []net.Conn
}

func startGroupCluster(t *testing.T, n int, cfg Config) (*fakeGroupCluster, *Client) {
	t.Helper()
	fc := &fakeGroupCluster{lis: map[string]*bufconn.Listener{}}
	var wg sync.WaitGroup
	var servers []*grpc.Server
	for i := 1; i <= n; i++ {
		node := &fakeGroupNode{id: int32(i), cluster: fc}
		fc.nodes = append(fc.nodes, node)
		lis := bufconn.Listen(1 << 20)
		fc.lis[fakeAddr(node.id)] = lis
		srv := grpc.NewServer()
		metadatav1.RegisterMetadataServiceServer(srv, node)
		groupv1.RegisterGroupCoordinatorServiceServer(srv, node)
		storagev1.RegisterStorageServiceServer(srv, node)
		servers = append(servers, srv)
		wg.Go(func() { _ = srv.Serve(lis) })
	}
	cfg.Bootstrap = []string{fakeAddr(1)}
	cfg.DialOptions = []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			lis, ok := fc.lis[addr]
			if !ok {
				return nil, errors.New("no such node: " + addr)
			}
			for _, n := range fc.nodes {
				if fakeAddr(n.id) == addr && n.silent.Load() {
					client, server := net.Pipe()
					fc.mu.Lock()
					fc.hung = append(fc.hung, server)
					fc.mu.Unlock()
					return client, nil
				}
			}
			return lis.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		fc.mu.Lock()
		for _, h := range fc.hung {
			_ = h.Close()
		}
		fc.mu.Unlock()
		for _, s := range servers {
			s.Stop()
		}
		wg.Wait()
	})
	return fc, c
}

// describeGroup is a group call as the admin API makes it.
func describeGroup(ctx context.Context, c *Client, group string) error {
	return c.onGroupCoordinator(ctx, group, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		resp, err := gc.DescribeGroups(ctx, &groupv1.DescribeGroupsRequest{GroupIds: []string{group}})
		if err != nil {
			return nil, err
		}
		return resp.GetGroups()[0].GetError(), nil
	})
}

func okDescription() (*groupv1.DescribeGroupsResponse, error) {
	return &groupv1.DescribeGroupsResponse{Groups: []*groupv1.GroupDescription{{GroupId: "g", State: "Empty"}}}, nil
}

// NOT_COORDINATOR with a hint goes straight to the hinted node, which is
// remembered for the next call.
func TestGroupCallFollowsCoordinatorHint(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: 5 * time.Second})
	n1, n2 := fc.nodes[0], fc.nodes[1]
	n1.describe = func() (*groupv1.DescribeGroupsResponse, error) {
		e := errs.New(errs.NotCoordinator, "group g is coordinated by node 2").
			WithCoordinator(&edpb.CoordinatorHint{Key: "g", NodeId: 2, Address: fakeAddr(2)})
		return &groupv1.DescribeGroupsResponse{Groups: []*groupv1.GroupDescription{{GroupId: "g", Error: e.Proto()}}}, nil
	}
	n2.describe = okDescription
	require.NoError(t, describeGroup(context.Background(), c, "g"))
	require.NoError(t, describeGroup(context.Background(), c, "g"))
	require.EqualValues(t, 1, n1.describeCalls.Load())
	require.EqualValues(t, 2, n2.describeCalls.Load())
	require.EqualValues(t, 1, n1.findCalls.Load()+n2.findCalls.Load(), "the hint spared a lookup")
	co, ok := c.groups.get("g")
	require.True(t, ok)
	require.Equal(t, coordinator{2, fakeAddr(2)}, co)
}

// A coordinator that is replaying its log is asked again until it answers.
func TestGroupCallWaitsForLoad(t *testing.T) {
	fc, c := startGroupCluster(t, 1, Config{RequestTimeout: 5 * time.Second})
	n1 := fc.nodes[0]
	n1.describe = func() (*groupv1.DescribeGroupsResponse, error) {
		if n1.describeCalls.Load() <= 2 {
			return nil, errs.New(errs.CoordinatorLoadInProgress, "replaying __consumer_offsets-3")
		}
		return okDescription()
	}
	require.NoError(t, describeGroup(context.Background(), c, "g"))
	require.EqualValues(t, 3, n1.describeCalls.Load())
	require.EqualValues(t, 1, n1.findCalls.Load(), "loading keeps the coordinator")
}

// While no coordinator is known, lookups are retried until the request
// timeout, and then the server's last answer is returned.
func TestGroupCallReturnsLastServerAnswer(t *testing.T) {
	fc, c := startGroupCluster(t, 1, Config{RequestTimeout: 400 * time.Millisecond})
	n1 := fc.nodes[0]
	n1.find = func() (*groupv1.Coordinator, error) {
		return &groupv1.Coordinator{Error: errs.New(errs.CoordinatorNotAvailable, "__consumer_offsets-7 has no leader").Proto()}, nil
	}
	err := describeGroup(context.Background(), c, "g")
	require.Equal(t, errs.CoordinatorNotAvailable, errs.CodeOf(err), "got %v", err)
	require.ErrorContains(t, err, "__consumer_offsets-7 has no leader")
	require.Greater(t, n1.findCalls.Load(), int32(1), "retried before giving up")
	require.Zero(t, n1.describeCalls.Load())

	_, _, err = c.FindCoordinator(context.Background(), "g")
	require.Equal(t, errs.CoordinatorNotAvailable, errs.CodeOf(err), "got %v", err)
}

// A non-retriable answer is returned at once with the server's message.
func TestGroupCallNonRetriableAtOnce(t *testing.T) {
	fc, c := startGroupCluster(t, 1, Config{RequestTimeout: 10 * time.Second})
	n1 := fc.nodes[0]
	n1.describe = func() (*groupv1.DescribeGroupsResponse, error) {
		return nil, errs.New(errs.InvalidGroupID, "group id must not be empty")
	}
	start := time.Now()
	err := describeGroup(context.Background(), c, "g")
	require.Equal(t, errs.InvalidGroupID, errs.CodeOf(err), "got %v", err)
	require.ErrorContains(t, err, "group id must not be empty")
	require.EqualValues(t, 1, n1.describeCalls.Load())
	require.Less(t, time.Since(start), 5*time.Second)
}

// A coordinator that moved without a hint, or whose node went away, is
// looked up again.
func TestGroupCallRefindsCoordinator(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: 5 * time.Second})
	n1, n2 := fc.nodes[0], fc.nodes[1]
	n1.find = func() (*groupv1.Coordinator, error) {
		if n1.findCalls.Load() == 1 {
			return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)}, nil
		}
		return &groupv1.Coordinator{NodeId: 2, Address: fakeAddr(2)}, nil
	}
	n1.describe = func() (*groupv1.DescribeGroupsResponse, error) {
		return nil, errs.New(errs.NotCoordinator, "group g moved")
	}
	n2.describe = okDescription
	require.NoError(t, describeGroup(context.Background(), c, "g"))
	require.EqualValues(t, 1, n1.describeCalls.Load())
	require.EqualValues(t, 1, n2.describeCalls.Load())

	nodeID, addr, err := c.FindCoordinator(context.Background(), "g")
	require.NoError(t, err)
	require.EqualValues(t, 2, nodeID)
	require.Equal(t, fakeAddr(2), addr)
}

// A coordinator that accepts connections and never answers is passed over
// after BootstrapTimeout and looked up again until the request timeout;
// the error then names it. A bootstrap node without the group API is no
// reason to give up early (it once ended the call with UNIMPLEMENTED).
func TestGroupCallSilentCoordinator(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: time.Second, BootstrapTimeout: 100 * time.Millisecond})
	fc.nodes[0].noRole.Store(true)
	fc.nodes[1].silent.Store(true)
	start := time.Now()
	err := describeGroup(context.Background(), c, "g")
	require.Equal(t, errs.RequestTimedOut, errs.CodeOf(err), "got %v", err)
	require.ErrorContains(t, err, fakeAddr(2)+" did not answer within 100ms")
	require.GreaterOrEqual(t, time.Since(start), time.Second, "retried until the request timeout")
}
