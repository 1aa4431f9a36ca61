package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// txnOffsetsNode is one node that coordinates every group and answers
// TxnOffsetCommit as the test scripts it.
type txnOffsetsNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	groupv1.UnimplementedGroupCoordinatorServiceServer

	mu   sync.Mutex
	reqs []*groupv1.TxnOffsetCommitRequest
	// answer gives each partition's error code on attempt n (from 0).
	answer func(n int, p int32) errs.Code
	// fetches are the OffsetFetch requests; a require_stable one is
	// answered UNSTABLE_OFFSET_COMMIT for partition 0 unstable times.
	fetches  []*groupv1.OffsetFetchRequest
	unstable int
}

func (f *txnOffsetsNode) OffsetFetch(_ context.Context, req *groupv1.OffsetFetchRequest) (*groupv1.OffsetFetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches = append(f.fetches, req)
	resp := &groupv1.OffsetFetchResponse{}
	for _, p := range req.GetPartitions() {
		part := &groupv1.OffsetFetchPartition{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 40 + int64(p.GetPartition()), LeaderEpoch: -1}
		if req.GetRequireStable() && p.GetPartition() == 0 && f.unstable > 0 {
			f.unstable--
			part.Offset, part.Error = -1, errs.New(errs.UnstableOffsetCommit, "pending").Proto()
		}
		resp.Partitions = append(resp.Partitions, part)
	}
	return resp, nil
}

func (f *txnOffsetsNode) GetMetadata(context.Context, *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	return &metadatav1.GetMetadataResponse{Brokers: []*commonv1.Broker{{Id: 1, Roles: []string{roleGroupCoordinator},
		State: commonv1.BrokerState_BROKER_STATE_ALIVE, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "node1", Port: 1}}}}}, nil
}

func (f *txnOffsetsNode) FindCoordinator(_ context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	return &groupv1.FindCoordinatorResponse{Coordinators: []*groupv1.Coordinator{{Key: req.GetKeys()[0], NodeId: 1, Address: "node1:1"}}}, nil
}

func (f *txnOffsetsNode) TxnOffsetCommit(_ context.Context, req *groupv1.TxnOffsetCommitRequest) (*groupv1.TxnOffsetCommitResponse, error) {
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	resp := &groupv1.TxnOffsetCommitResponse{}
	for _, p := range req.GetPartitions() {
		res := &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		if c := f.answer(n, p.GetPartition()); c != 0 {
			res.Error = errs.New(c, "scripted").Proto()
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

func startTxnOffsetsNode(t *testing.T, f *txnOffsetsNode) *Client {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, f)
	groupv1.RegisterGroupCoordinatorServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	c, err := New(Config{Bootstrap: []string{"node1:1"}, RequestTimeout: 10 * time.Second, DialOptions: []grpc.DialOption{
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

// Partitions answered for good leave the request; those the coordinator
// could not take yet are sent again alone; a final error is returned with
// its partition.
func TestTxnOffsetCommitRetriesOnlyWhatCanSucceed(t *testing.T) {
	f := &txnOffsetsNode{answer: func(n int, p int32) errs.Code {
		switch {
		case p == 1 && n == 0:
			return errs.CoordinatorLoadInProgress
		case p == 2:
			return errs.IllegalGeneration
		}
		return 0
	}}
	c := startTxnOffsetsNode(t, f)
	err := c.TxnOffsetCommit(context.Background(), TxnOffsetCommitRequest{TransactionalID: "tx", ProducerID: 7, ProducerEpoch: 3,
		GroupID: "g", GenerationID: 4, MemberID: "m1", GroupInstanceID: "i1",
		Offsets: map[TopicPartition]int64{{"t", 0}: 10, {"t", 1}: 11, {"t", 2}: 12}})
	require.Equal(t, errs.IllegalGeneration, errs.CodeOf(err))
	require.ErrorContains(t, err, "t-2")

	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.reqs, 2)
	first := f.reqs[0]
	require.Equal(t, "tx", first.GetTransactionalId())
	require.Equal(t, int64(7), first.GetProducerId())
	require.Equal(t, int32(3), first.GetProducerEpoch())
	require.Equal(t, int32(4), first.GetGenerationIdOrMemberEpoch())
	require.Equal(t, "m1", first.GetMemberId())
	require.Equal(t, "i1", first.GetGroupInstanceId())
	require.Len(t, first.GetPartitions(), 3)
	require.Len(t, f.reqs[1].GetPartitions(), 1)
	require.Equal(t, int32(1), f.reqs[1].GetPartitions()[0].GetPartition())
	require.Equal(t, int64(11), f.reqs[1].GetPartitions()[0].GetOffset())
}

func TestTxnOffsetCommitSucceeds(t *testing.T) {
	f := &txnOffsetsNode{answer: func(int, int32) errs.Code { return 0 }}
	c := startTxnOffsetsNode(t, f)
	require.NoError(t, c.TxnOffsetCommit(context.Background(), TxnOffsetCommitRequest{TransactionalID: "tx", ProducerID: 1, GroupID: "g",
		GenerationID: -1, Offsets: map[TopicPartition]int64{{"t", 0}: 1}}))
	require.NoError(t, c.TxnOffsetCommit(context.Background(), TxnOffsetCommitRequest{TransactionalID: "tx", GroupID: "g"}), "nothing to commit")
	require.Equal(t, errs.InvalidGroupID, errs.CodeOf(c.TxnOffsetCommit(context.Background(), TxnOffsetCommitRequest{Offsets: map[TopicPartition]int64{{"t", 0}: 1}})))
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.reqs, 1)
}

// A read_committed group consumer fetches its committed offsets with
// require_stable and waits while a transaction holds one (Kafka's
// consumer does the same); a read_uncommitted one does not ask.
func TestGroupConsumerFetchesStableOffsetsWhenReadCommitted(t *testing.T) {
	f := &txnOffsetsNode{unstable: 2}
	c := startTxnOffsetsNode(t, f)
	tps := []TopicPartition{{"t", 0}, {"t", 1}}
	for _, readCommitted := range []bool{true, false} {
		g := &GroupConsumer{c: c, cfg: GroupConsumerConfig{GroupID: "g", Consumer: ConsumerConfig{ReadCommitted: readCommitted}}}
		g.member = &classicMember{g: g}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := g.fetchCommitted(ctx, tps)
		cancel()
		require.NoError(t, err)
		require.Equal(t, int64(40), got[tps[0]].offset)
		require.Equal(t, int64(41), got[tps[1]].offset)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.fetches, 4, "two unstable answers, then one stable, then one read_uncommitted fetch")
	for _, r := range f.fetches[:3] {
		require.True(t, r.GetRequireStable())
	}
	require.False(t, f.fetches[3].GetRequireStable())
}
