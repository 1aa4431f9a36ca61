package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// groupFake is one in-process node: metadata for topic "t" (two
// partitions, led here), fetch streams that stay idle, and a group
// coordinator whose answers the test scripts.
type groupFake struct {
	metadatav1.UnimplementedMetadataServiceServer
	storagev1.UnimplementedStorageServiceServer
	groupv1.UnimplementedGroupCoordinatorServiceServer

	mu sync.Mutex
	// Classic protocol.
	gen        int32
	joins      []*groupv1.JoinGroupRequest
	syncs      []*groupv1.SyncGroupRequest
	heartbeat  edpb.ErrorCode // the answer to the next heartbeats
	leaves     []*groupv1.LeaveGroupRequest
	committed  map[TopicPartition]int64
	commits    []*groupv1.OffsetCommitRequest
	heartbeats int
	// holdJoin, when set, holds the next rejoin until it is closed;
	// joinPending is true meanwhile. strictCommits refuses commits as the
	// coordinator does: REBALANCE_IN_PROGRESS during a join,
	// ILLEGAL_GENERATION for another generation.
	holdJoin      chan struct{}
	joinPending   bool
	strictCommits bool
	refused       int // commits refused by strictCommits
	// holdCommit holds the next commit until it is closed; commitPending
	// is true meanwhile. syncAssign, when set, is the assignment (of "t")
	// every SyncGroup hands out, whatever the leader sent.
	holdCommit    chan struct{}
	commitPending bool
	syncAssign    []int32
	// Consumer protocol.
	cghb   []*groupv1.ConsumerGroupHeartbeatRequest
	epoch  int32
	target []int32 // partitions of "t" to hand out with the next heartbeat
	fence  bool    // answer the next heartbeat with FENCED_MEMBER_EPOCH
	// fetchErrors answer the next OffsetFetches, one each.
	fetchErrors []errs.Code
}

func (f *groupFake) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{Brokers: []*commonv1.Broker{{
		Id: 1, Roles: []string{"storage-node", roleGroupCoordinator}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "node1", Port: 1}},
	}}}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		if name == "t" {
			for p := range int32(2) {
				ti.Partitions = append(ti.Partitions, &commonv1.PartitionState{Topic: name, Partition: p, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}})
			}
		} else {
			ti.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

func (f *groupFake) Fetch(_ *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	<-stream.Context().Done()
	return nil
}

func (f *groupFake) ListOffsets(_ context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	resp := &storagev1.ListOffsetsResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 0})
	}
	return resp, nil
}

func (f *groupFake) FindCoordinator(_ context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	return &groupv1.FindCoordinatorResponse{Coordinators: []*groupv1.Coordinator{{Key: req.GetKeys()[0], NodeId: 1, Address: "node1:1"}}}, nil
}

// holdLocked waits, with f.mu released, until *hold (when set) is
// closed, with *pending true meanwhile; *hold is cleared, so it holds one
// call.
func (f *groupFake) holdLocked(ctx context.Context, hold *chan struct{}, pending *bool) {
	h := *hold
	if h == nil {
		return
	}
	*hold, *pending = nil, true
	f.mu.Unlock()
	select {
	case <-h:
	case <-ctx.Done():
	}
	f.mu.Lock()
	*pending = false
}

// JoinGroup answers a first join with MEMBER_ID_REQUIRED (KIP-394) and
// makes every other join a new generation led by the joining member.
func (f *groupFake) JoinGroup(ctx context.Context, req *groupv1.JoinGroupRequest) (*groupv1.JoinGroupResponse, error) {
	f.mu.Lock()
	if req.GetMemberId() != "" {
		f.holdLocked(ctx, &f.holdJoin, &f.joinPending)
	}
	defer f.mu.Unlock()
	f.joins = append(f.joins, proto.Clone(req).(*groupv1.JoinGroupRequest))
	if req.GetMemberId() == "" {
		return &groupv1.JoinGroupResponse{MemberId: "m1", Error: errs.New(errs.MemberIDRequired, "join again").Proto()}, nil
	}
	f.gen++
	f.heartbeat = errs.None
	p := req.GetProtocols()[0]
	return &groupv1.JoinGroupResponse{GenerationId: f.gen, ProtocolType: "consumer", ProtocolName: p.GetName(),
		Leader: req.GetMemberId(), MemberId: req.GetMemberId(),
		Members: []*groupv1.JoinGroupMember{{MemberId: req.GetMemberId(), GroupInstanceId: req.GetGroupInstanceId(), Metadata: p.GetMetadata()}}}, nil
}

func (f *groupFake) SyncGroup(_ context.Context, req *groupv1.SyncGroupRequest) (*groupv1.SyncGroupResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncs = append(f.syncs, proto.Clone(req).(*groupv1.SyncGroupRequest))
	if f.syncAssign != nil {
		return &groupv1.SyncGroupResponse{ProtocolType: "consumer", ProtocolName: req.GetProtocolName(),
			Assignment: assign.EncodeAssignment(map[string][]int32{"t": f.syncAssign}, nil)}, nil
	}
	for _, a := range req.GetAssignments() {
		if a.GetMemberId() == req.GetMemberId() {
			return &groupv1.SyncGroupResponse{ProtocolType: "consumer", ProtocolName: req.GetProtocolName(), Assignment: a.GetAssignment()}, nil
		}
	}
	return &groupv1.SyncGroupResponse{Error: errs.New(errs.UnknownMemberID, "no assignment").Proto()}, nil
}

func (f *groupFake) Heartbeat(context.Context, *groupv1.HeartbeatRequest) (*groupv1.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats++
	if f.heartbeat != errs.None {
		return &groupv1.HeartbeatResponse{Error: errs.New(f.heartbeat, "scripted").Proto()}, nil
	}
	return &groupv1.HeartbeatResponse{}, nil
}

func (f *groupFake) LeaveGroup(_ context.Context, req *groupv1.LeaveGroupRequest) (*groupv1.LeaveGroupResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaves = append(f.leaves, req)
	return &groupv1.LeaveGroupResponse{}, nil
}

func (f *groupFake) OffsetFetch(_ context.Context, req *groupv1.OffsetFetchRequest) (*groupv1.OffsetFetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fetchErrors) > 0 {
		code := f.fetchErrors[0]
		f.fetchErrors = f.fetchErrors[1:]
		return &groupv1.OffsetFetchResponse{Error: errs.New(code, "scripted").Proto()}, nil
	}
	resp := &groupv1.OffsetFetchResponse{}
	for _, p := range req.GetPartitions() {
		off, ok := f.committed[TopicPartition{p.GetTopic(), p.GetPartition()}]
		if !ok {
			off = -1
		}
		resp.Partitions = append(resp.Partitions, &groupv1.OffsetFetchPartition{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: off, LeaderEpoch: -1})
	}
	return resp, nil
}

func (f *groupFake) OffsetCommit(ctx context.Context, req *groupv1.OffsetCommitRequest) (*groupv1.OffsetCommitResponse, error) {
	f.mu.Lock()
	f.holdLocked(ctx, &f.holdCommit, &f.commitPending)
	defer f.mu.Unlock()
	f.commits = append(f.commits, req)
	resp := &groupv1.OffsetCommitResponse{}
	var refuse *errs.Error
	switch {
	case f.strictCommits && f.joinPending:
		refuse = errs.New(errs.RebalanceInProgress, "the group is rebalancing")
	case f.strictCommits && req.GetGenerationIdOrMemberEpoch() != f.gen:
		refuse = errs.New(errs.IllegalGeneration, "generation %d is not %d", req.GetGenerationIdOrMemberEpoch(), f.gen)
	}
	if refuse != nil {
		f.refused++
	}
	for _, p := range req.GetPartitions() {
		if refuse != nil {
			resp.Results = append(resp.Results, &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Error: refuse.Proto()})
			continue
		}
		f.committed[TopicPartition{p.GetTopic(), p.GetPartition()}] = p.GetOffset()
		resp.Results = append(resp.Results, &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	return resp, nil
}

// ConsumerGroupHeartbeat hands out f.target (when set) with a new epoch,
// or fences the member when the test asks.
func (f *groupFake) ConsumerGroupHeartbeat(_ context.Context, req *groupv1.ConsumerGroupHeartbeatRequest) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cghb = append(f.cghb, proto.Clone(req).(*groupv1.ConsumerGroupHeartbeatRequest))
	if req.GetMemberEpoch() < 0 {
		return &groupv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: req.GetMemberEpoch()}, nil
	}
	if f.fence && req.GetMemberEpoch() > 0 {
		f.fence = false
		return &groupv1.ConsumerGroupHeartbeatResponse{Error: errs.New(errs.FencedMemberEpoch, "scripted").Proto()}, nil
	}
	resp := &groupv1.ConsumerGroupHeartbeatResponse{MemberId: "c1", MemberEpoch: f.epoch, HeartbeatIntervalMs: 20}
	if req.GetMemberEpoch() == 0 && f.target == nil {
		f.target = []int32{0, 1}
	}
	if f.target != nil {
		f.epoch++
		resp.MemberEpoch = f.epoch
		resp.Assignment = &groupv1.Assignment{TopicPartitions: []*groupv1.TopicPartitions{{Topic: "t", Partitions: f.target}}}
		f.target = nil
	}
	return resp, nil
}

func (f *groupFake) with(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func startGroupFake(t *testing.T) (*groupFake, *Client) {
	t.Helper()
	f := &groupFake{committed: map[TopicPartition]int64{}}
	c := bufconnClient(t, 5*time.Second, func(srv *grpc.Server) {
		metadatav1.RegisterMetadataServiceServer(srv, f)
		storagev1.RegisterStorageServiceServer(srv, f)
		groupv1.RegisterGroupCoordinatorServiceServer(srv, f)
	})
	return f, c
}

// bufconnClient serves what register adds on an in-process listener and
// returns a client of it (bootstrap "node1:1"; every address dials it).
func bufconnClient(t *testing.T, requestTimeout time.Duration, register func(*grpc.Server)) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	register(srv)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	c, err := New(Config{Bootstrap: []string{"node1:1"}, RequestTimeout: requestTimeout, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})
	return c
}

// callbackLog records rebalance callbacks in order.
type callbackLog struct {
	mu     sync.Mutex
	events []string
}

func (l *callbackLog) hook(kind string) func(context.Context, []TopicPartition) {
	return func(_ context.Context, tps []TopicPartition) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.events = append(l.events, fmt.Sprintf("%s %v", kind, tps))
	}
}

func (l *callbackLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// pollUntil polls in short rounds until cond holds (or fails the test
// after 10 s). Poll's goroutine is the caller's, as for an application.
func pollUntil(t *testing.T, g *GroupConsumer, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := g.Poll(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
	}
}

var (
	bothT = fmt.Sprint([]TopicPartition{{"t", 0}, {"t", 1}})
)

// A classic member joins with the member id the coordinator hands out
// (KIP-394), leads and assigns with the coordinator's chosen assignor,
// starts at the committed offsets, commits with its generation, revokes
// everything before an eager rejoin, drops its partitions as lost (without
// committing) when fenced, and leaves on Close after a last commit.
func TestClassicMemberLifecycle(t *testing.T) {
	f, c := startGroupFake(t)
	f.with(func() { f.committed[TopicPartition{"t", 0}] = 5 })
	var log callbackLog
	g, err := c.NewGroupConsumer(GroupConsumerConfig{
		GroupID: "g", Topics: []string{"t"}, Assignors: []assign.Assignor{assign.Range()},
		HeartbeatInterval: 20 * time.Millisecond, SessionTimeout: time.Second, AutoCommit: true,
		OnAssigned: log.hook("assigned"), OnRevoked: log.hook("revoked"), OnLost: log.hook("lost"),
	})
	require.NoError(t, err)
	require.Equal(t, int32(-1), g.Generation())

	pollUntil(t, g, "the first assignment", func() bool { return len(g.Assignment()) == 2 })
	require.Equal(t, "m1", g.MemberID())
	require.Equal(t, int32(1), g.Generation())
	f.with(func() {
		require.Len(t, f.joins, 2)
		require.Empty(t, f.joins[0].GetMemberId())
		require.Equal(t, "m1", f.joins[1].GetMemberId(), "the second join carries the member id from MEMBER_ID_REQUIRED")
		require.Equal(t, "range", f.joins[1].GetProtocols()[0].GetName())
		require.Len(t, f.syncs, 1)
		got, err := assign.DecodeAssignment(f.syncs[0].GetAssignments()[0].GetAssignment())
		require.NoError(t, err)
		require.Equal(t, map[string][]int32{"t": {0, 1}}, got, "the leader assigned both partitions to itself")
	})
	require.Equal(t, int64(5), g.k.Position(TopicPartition{"t", 0}), "reading starts at the committed offset")
	pollUntil(t, g, "the reset position of t-1", func() bool { return g.k.Position(TopicPartition{"t", 1}) == 0 })

	require.NoError(t, g.CommitSync(context.Background(), nil))
	f.with(func() {
		last := f.commits[len(f.commits)-1]
		require.Equal(t, int32(1), last.GetGenerationIdOrMemberEpoch())
		require.Equal(t, "m1", last.GetMemberId())
		require.Len(t, last.GetPartitions(), 2)
	})

	// The coordinator starts a rebalance: an eager member revokes all
	// before it joins again, inside Poll.
	f.with(func() { f.heartbeat = errs.RebalanceInProgress })
	pollUntil(t, g, "the second generation", func() bool { return g.Generation() == 2 })
	require.Equal(t, []string{"assigned " + bothT, "revoked " + bothT, "assigned " + bothT}, log.list())

	// Fenced: the partitions are lost, nothing is committed for them.
	f.with(func() {
		f.committed[TopicPartition{"t", 0}] = 7
		f.heartbeat = errs.IllegalGeneration
	})
	commitsBefore := len(f.commits)
	pollUntil(t, g, "the third generation", func() bool { return g.Generation() == 3 })
	require.Equal(t, []string{"assigned " + bothT, "revoked " + bothT, "assigned " + bothT, "lost " + bothT, "assigned " + bothT}, log.list())
	f.with(func() {
		require.Len(t, f.commits, commitsBefore, "a fenced member does not commit its lost partitions")
	})
	require.Equal(t, int64(7), g.k.Position(TopicPartition{"t", 0}), "taken back at the offset committed meanwhile")

	require.NoError(t, g.Close(context.Background()))
	require.Equal(t, "revoked "+bothT, log.list()[5])
	f.with(func() {
		require.Len(t, f.leaves, 1)
		require.Equal(t, "m1", f.leaves[0].GetMembers()[0].GetMemberId())
	})
	_, err = g.Poll(context.Background())
	require.ErrorContains(t, err, "closed")
}

// startCooperativeMember starts an auto-committing cooperative member and
// polls until it owns both partitions of "t" at their reset positions.
func startCooperativeMember(t *testing.T, c *Client) *GroupConsumer {
	t.Helper()
	g, err := c.NewGroupConsumer(GroupConsumerConfig{
		GroupID: "g", Topics: []string{"t"}, Assignors: []assign.Assignor{assign.CooperativeSticky()},
		HeartbeatInterval: 20 * time.Millisecond, SessionTimeout: time.Second,
		AutoCommit: true, AutoCommitInterval: time.Hour, Reset: ResetEarliest,
	})
	require.NoError(t, err)
	pollUntil(t, g, "the first assignment", func() bool { return len(g.Assignment()) == 2 })
	pollUntil(t, g, "the reset positions", func() bool {
		return g.k.Position(TopicPartition{"t", 0}) == 0 && g.k.Position(TopicPartition{"t", 1}) == 0
	})
	return g
}

// A cooperative member goes on reading while it rejoins. Closed before
// its join is answered, it finishes the join and makes its last commit in
// the new generation, which the coordinator takes; its commit in the old
// one was refused as the group was rebalancing.
func TestCooperativeMemberClosedMidJoinCommitsInTheNewGeneration(t *testing.T) {
	f, c := startGroupFake(t)
	g := startCooperativeMember(t, c)
	hold := make(chan struct{})
	f.with(func() { f.strictCommits, f.holdJoin, f.heartbeat = true, hold, errs.RebalanceInProgress })
	pollUntil(t, g, "the rejoin in flight", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.joinPending
	})
	require.Len(t, g.Assignment(), 2, "a cooperative member keeps its partitions while it rejoins")
	// The join is answered once Close's commit in the old generation
	// was refused.
	go func() {
		for !func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.refused > 0 }() {
			time.Sleep(5 * time.Millisecond)
		}
		close(hold)
	}()
	require.NoError(t, g.Close(context.Background()))
	f.with(func() {
		last := f.commits[len(f.commits)-1]
		require.Equal(t, int32(2), last.GetGenerationIdOrMemberEpoch())
		require.Len(t, last.GetPartitions(), 2)
		require.Equal(t, map[TopicPartition]int64{{"t", 0}: 0, {"t", 1}: 0}, f.committed)
		require.Len(t, f.leaves, 1)
	})
}

// A cooperative member keeps its session while it commits the partitions
// a rebalance takes from it: a commit slower than the session must not
// expire the member (its partitions would move on without it).
func TestCooperativeMemberHeartbeatsWhileItCommitsRevokedPartitions(t *testing.T) {
	f, c := startGroupFake(t)
	g := startCooperativeMember(t, c)
	defer func() { require.NoError(t, g.Close(context.Background())) }()
	hold := make(chan struct{})
	f.with(func() { f.syncAssign, f.holdCommit, f.heartbeat = []int32{1}, hold, errs.RebalanceInProgress })
	beats := make(chan int, 1)
	go func() {
		for !func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.commitPending }() {
			time.Sleep(5 * time.Millisecond)
		}
		var before int
		f.with(func() { before = f.heartbeats })
		time.Sleep(300 * time.Millisecond)
		f.with(func() { beats <- f.heartbeats - before })
		close(hold)
	}()
	pollUntil(t, g, "t-0 revoked", func() bool { return len(g.Assignment()) == 1 })
	require.GreaterOrEqual(t, <-beats, 5, "heartbeats every 20 ms while the revocation's commit took 300 ms")
}

// A refused commit of an earlier generation does not cost the member the
// partitions of its current one.
func TestClassicMemberIgnoresRefusalsOfAnOlderGeneration(t *testing.T) {
	f, c := startGroupFake(t)
	var log callbackLog
	g, err := c.NewGroupConsumer(GroupConsumerConfig{GroupID: "g", Topics: []string{"t"},
		HeartbeatInterval: 20 * time.Millisecond, SessionTimeout: time.Second,
		OnAssigned: log.hook("assigned"), OnRevoked: log.hook("revoked"), OnLost: log.hook("lost")})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close(context.Background())) }()
	pollUntil(t, g, "the first generation", func() bool { return g.Generation() == 1 })
	f.with(func() { f.heartbeat = errs.RebalanceInProgress })
	pollUntil(t, g, "the second generation", func() bool { return g.Generation() == 2 })
	events := log.list()

	g.member.fenced(errs.IllegalGeneration, 1)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, _ = g.Poll(ctx)
		cancel()
	}
	require.Equal(t, int32(2), g.Generation())
	require.Equal(t, events, log.list(), "nothing revoked or lost")

	g.member.fenced(errs.IllegalGeneration, 2)
	pollUntil(t, g, "the rejoin of a fenced member", func() bool { return g.Generation() == 3 })
	require.Equal(t, "lost "+bothT, log.list()[len(events)])
}

// A static member (group.instance.id) does not leave the group on Close,
// so a restart within the session keeps its partitions (KIP-345).
func TestStaticClassicMemberDoesNotLeave(t *testing.T) {
	f, c := startGroupFake(t)
	g, err := c.NewGroupConsumer(GroupConsumerConfig{GroupID: "g", InstanceID: "i1", Topics: []string{"t"},
		HeartbeatInterval: 20 * time.Millisecond, SessionTimeout: time.Second})
	require.NoError(t, err)
	pollUntil(t, g, "the assignment", func() bool { return len(g.Assignment()) == 2 })
	f.with(func() { require.Equal(t, "i1", f.joins[0].GetGroupInstanceId()) })
	require.NoError(t, g.Close(context.Background()))
	f.with(func() { require.Empty(t, f.leaves) })
}

// A consumer-protocol member joins with epoch 0, takes its assignment,
// revokes a partition the coordinator takes away (committing first, with
// the new epoch) and reports what it owns at once; fenced, it drops
// everything as lost and joins again with epoch 0 and nothing owned; Close
// leaves with epoch -1.
func TestConsumerProtocolMemberReconciles(t *testing.T) {
	f, c := startGroupFake(t)
	var log callbackLog
	g, err := c.NewGroupConsumer(GroupConsumerConfig{
		GroupID: "g", Topics: []string{"t"}, Protocol: GroupProtocolConsumer, AutoCommit: true,
		OnAssigned: log.hook("assigned"), OnRevoked: log.hook("revoked"), OnLost: log.hook("lost"),
	})
	require.NoError(t, err)
	pollUntil(t, g, "the first assignment", func() bool { return len(g.Assignment()) == 2 })
	require.Equal(t, "c1", g.MemberID())
	require.Equal(t, int32(1), g.Generation())
	f.with(func() {
		require.Equal(t, int32(0), f.cghb[0].GetMemberEpoch())
		require.Equal(t, []string{"t"}, f.cghb[0].GetSubscribedTopicNames())
		require.Equal(t, "uniform", f.cghb[0].GetServerAssignor())
		require.Empty(t, f.cghb[0].GetOwnedPartitions())
	})
	// Once reconciled, the next heartbeat reports both partitions.
	reported := func(want ...int32) func() bool {
		return func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			last := f.cghb[len(f.cghb)-1]
			if last.GetMemberEpoch() <= 0 {
				return len(want) == 0 && len(last.GetOwnedPartitions()) == 0
			}
			owned := last.GetOwnedPartitions()
			return len(owned) == 1 && fmt.Sprint(owned[0].GetPartitions()) == fmt.Sprint(want)
		}
	}
	pollUntil(t, g, "both partitions reported owned", reported(0, 1))
	pollUntil(t, g, "t-1's reset position", func() bool { return g.k.Position(TopicPartition{"t", 1}) == 0 })

	f.with(func() { f.target = []int32{1} })
	pollUntil(t, g, "t-0 revoked", func() bool { return len(g.Assignment()) == 1 })
	pollUntil(t, g, "t-1 alone reported owned", reported(1))
	require.Equal(t, []string{"assigned " + bothT, "revoked [{t 0}]", "assigned []"}, log.list())
	f.with(func() {
		last := f.commits[len(f.commits)-1]
		require.Equal(t, int32(2), last.GetGenerationIdOrMemberEpoch(), "the commit before the revocation carries the new epoch")
	})

	f.with(func() { f.fence = true })
	pollUntil(t, g, "the rejoin after the fence", func() bool { return g.Generation() == 3 })
	require.Equal(t, "lost [{t 1}]", log.list()[3])
	f.with(func() {
		var rejoin *groupv1.ConsumerGroupHeartbeatRequest
		for _, r := range f.cghb[1:] {
			if r.GetMemberEpoch() == 0 {
				rejoin = r
			}
		}
		require.NotNil(t, rejoin, "the member joined again with epoch 0")
		require.Empty(t, rejoin.GetOwnedPartitions(), "a rejoin owns nothing")
	})

	require.NoError(t, g.Close(context.Background()))
	f.with(func() { require.Equal(t, int32(-1), f.cghb[len(f.cghb)-1].GetMemberEpoch()) })
}

// A consumer-protocol member whose committed-offset fetch finds it fenced
// (its session expired meanwhile) joins again; Poll does not fail. The
// first fetch (on assignment) fails otherwise, so the fence is met by
// Poll's retry.
//
// A heartbeat sent before the fence may be answered after Poll has dropped
// the partitions; that answer is the old membership's and must not put the
// old epoch back (the member then never joined again). Whether the answer
// lands in that window is up to the scheduler (about one run in two), so
// the scenario runs ten times.
func TestConsumerProtocolMemberFencedAtOffsetFetchRejoins(t *testing.T) {
	for range 10 {
		fencedAtOffsetFetchRejoins(t)
	}
}

func fencedAtOffsetFetchRejoins(t *testing.T) {
	f, c := startGroupFake(t)
	var log callbackLog
	f.with(func() { f.fetchErrors = []errs.Code{errs.GroupAuthorizationFailed, errs.FencedMemberEpoch} })
	g, err := c.NewGroupConsumer(GroupConsumerConfig{
		GroupID: "g", Topics: []string{"t"}, Protocol: GroupProtocolConsumer,
		OnAssigned: log.hook("assigned"), OnRevoked: log.hook("revoked"), OnLost: log.hook("lost"),
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close(context.Background())) }()
	pollUntil(t, g, "the assignment after the rejoin", func() bool { return g.Generation() == 2 && len(g.Assignment()) == 2 })
	pollUntil(t, g, "the positions", func() bool {
		return g.k.Position(TopicPartition{"t", 0}) == 0 && g.k.Position(TopicPartition{"t", 1}) == 0
	})
	require.Equal(t, []string{"assigned " + bothT, "lost " + bothT, "assigned " + bothT}, log.list())
}

// spanRecorder is a TracerProvider (OTel API only) that records the names
// of the spans started.
type spanRecorder struct {
	tracenoop.TracerProvider
	mu    sync.Mutex
	names []string
}

func (r *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{r: r}
}

func (r *spanRecorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.names {
		if s == name {
			n++
		}
	}
	return n
}

type recordingTracer struct {
	tracenoop.Tracer
	r *spanRecorder
}

func (t recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.r.mu.Lock()
	t.r.names = append(t.r.names, name)
	t.r.mu.Unlock()
	return t.Tracer.Start(ctx, name, opts...)
}

// meterRecorder is a MeterProvider (OTel API only) that sums Int64Counter
// additions and counts histogram records, by instrument name.
type meterRecorder struct {
	metricnoop.MeterProvider
	mu     sync.Mutex
	counts map[string]int64
}

func (r *meterRecorder) Meter(string, ...metric.MeterOption) metric.Meter {
	return recordingMeter{r: r}
}

func (r *meterRecorder) get(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

func (r *meterRecorder) add(name string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[name] += n
}

type recordingMeter struct {
	metricnoop.Meter
	r *meterRecorder
}

func (m recordingMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return recordingCounter{r: m.r, name: name}, nil
}

func (m recordingMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return recordingHistogram{r: m.r, name: name}, nil
}

type recordingCounter struct {
	metricnoop.Int64Counter
	r    *meterRecorder
	name string
}

func (c recordingCounter) Add(_ context.Context, n int64, _ ...metric.AddOption) { c.r.add(c.name, n) }

type recordingHistogram struct {
	metricnoop.Float64Histogram
	r    *meterRecorder
	name string
}

func (h recordingHistogram) Record(context.Context, float64, ...metric.RecordOption) {
	h.r.add(h.name, 1)
}

// Joins and syncs are traced, routine heartbeats are not but one that
// starts a rebalance is, and each completed rebalance is counted and timed.
func TestGroupTelemetry(t *testing.T) {
	f, c := startGroupFake(t)
	spans := &spanRecorder{}
	meters := &meterRecorder{counts: map[string]int64{}}
	c.cfg.Telemetry = &Telemetry{TracerProvider: spans, MeterProvider: meters}
	g, err := c.NewGroupConsumer(GroupConsumerConfig{GroupID: "g", Topics: []string{"t"},
		HeartbeatInterval: 20 * time.Millisecond, SessionTimeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close(context.Background())) }()
	pollUntil(t, g, "the first generation", func() bool { return g.Generation() == 1 })
	pollUntil(t, g, "a few heartbeats", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.heartbeats >= 3
	})
	require.Equal(t, 2, spans.count("group.join"), "the KIP-394 join and the real one")
	require.Equal(t, 1, spans.count("group.sync"))
	require.Zero(t, spans.count("group.heartbeat"), "routine heartbeats are not traced")
	require.Equal(t, int64(1), meters.get("sluice.client.group.rebalances"))
	require.Equal(t, int64(1), meters.get("sluice.client.group.rebalance.duration"))

	f.with(func() { f.heartbeat = errs.RebalanceInProgress })
	pollUntil(t, g, "the second generation", func() bool { return g.Generation() == 2 })
	require.Equal(t, 1, spans.count("group.heartbeat"))
	require.Equal(t, 3, spans.count("group.join"))
	require.Equal(t, int64(2), meters.get("sluice.client.group.rebalances"))
}
