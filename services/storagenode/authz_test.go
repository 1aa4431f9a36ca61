package storagenode

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/replica"
)

// Kafka's numbers of the authorization errors.
var (
	kTopicAuth   = kafka.ErrorCode(errs.New(errs.TopicAuthorizationFailed, ""))
	kClusterAuth = kafka.ErrorCode(errs.New(errs.ClusterAuthorizationFailed, ""))
	kTxnAuth     = kafka.ErrorCode(errs.New(errs.TransactionalIDAuthorizationFailed, ""))
)

// callAs is call with the identity of ctx.
func callAs(t *testing.T, ctx context.Context, h kafka.Handler, msg kmsg.Request) kmsg.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := h(ctx, &kafka.Request{Key: msg.Key(), Version: msg.GetVersion(), Msg: msg})
	require.NoError(t, err)
	if reply.Release != nil {
		t.Cleanup(reply.Release)
	}
	if reply.Wait != nil {
		return reply.Wait(ctx)
	}
	require.NotNil(t, reply.Msg)
	return reply.Msg
}

// authzNode is newKafkaNode with an authorizer granting alice Write and
// Read on topic t, and carol Describe on t.
func authzNode(t *testing.T) (r *StorageNode, alice, bob, carol context.Context) {
	r = newKafkaNode(t)
	r.deps.Authz = authztest.New(
		authztest.Allow("User:alice", authz.Write, authz.Topic, "t"),
		authztest.Allow("User:alice", authz.Read, authz.Topic, "t"),
		authztest.Allow("User:carol", authz.Describe, authz.Topic, "t"),
	)
	bg := context.Background()
	return r, authztest.Ctx(bg, "alice"), authztest.Ctx(bg, "bob"), authztest.Ctx(bg, "carol")
}

func TestKafkaProduceFetchNeedTopicACLs(t *testing.T) {
	r, alice, bob, carol := authzNode(t)
	b := kafkaBatch(t, record.CodecNone, "a", "b")
	rp := onlyProduce(t, callAs(t, alice, r.kafkaProduce, produceReq(9, -1, "t", 0, b)))
	require.Zero(t, rp.ErrorCode, "Write on t is what a produce needs: %v", rp.ErrorMessage)
	for _, who := range []context.Context{bob, carol} {
		rp = onlyProduce(t, callAs(t, who, r.kafkaProduce, produceReq(9, -1, "t", 0, kafkaBatch(t, record.CodecNone, "x"))))
		require.Equal(t, kTopicAuth, rp.ErrorCode)
		require.EqualValues(t, -1, rp.BaseOffset)
	}
	// An unknown topic is refused the same way: its existence stays hidden.
	rp = onlyProduce(t, callAs(t, bob, r.kafkaProduce, produceReq(9, -1, "nope", 0, kafkaBatch(t, record.CodecNone, "x"))))
	require.Equal(t, kTopicAuth, rp.ErrorCode)

	// A transactional produce needs Write on its transactional id too.
	req := produceReq(9, -1, "t", 0, kafkaBatch(t, record.CodecNone, "x"))
	req.TransactionID = kmsg.StringPtr("tx")
	rp = onlyProduce(t, callAs(t, alice, r.kafkaProduce, req))
	require.Equal(t, kTxnAuth, rp.ErrorCode)

	fp := onlyFetch(t, callAs(t, alice, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, 0)))
	require.Zero(t, fp.ErrorCode)
	require.NotEmpty(t, fp.RecordBatches)
	for _, who := range []context.Context{bob, carol} {
		fp = onlyFetch(t, callAs(t, who, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, 0)))
		require.Equal(t, kTopicAuth, fp.ErrorCode, "Fetch needs Read")
		require.Empty(t, fp.RecordBatches)
	}
	// A fetch that names a replica is a follower's: ClusterAction.
	freq := fetchReq(11, "t", [16]byte{}, 0)
	freq.ReplicaID = 3
	resp := callAs(t, alice, r.kafkaFetch, freq).(*kmsg.FetchResponse)
	require.Equal(t, kClusterAuth, resp.ErrorCode)
}

func TestKafkaOffsetsAPIsNeedDescribe(t *testing.T) {
	r, _, bob, carol := authzNode(t)
	lo := listReq(7, 0, -1)
	resp := callAs(t, carol, r.kafkaListOffsets, lo).(*kmsg.ListOffsetsResponse)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode, "Describe is what ListOffsets needs")
	resp = callAs(t, bob, r.kafkaListOffsets, lo).(*kmsg.ListOffsetsResponse)
	require.Equal(t, kTopicAuth, resp.Topics[0].Partitions[0].ErrorCode)

	oe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oe.Version, oe.ReplicaID = 4, -1
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "t"
	op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	op.CurrentLeaderEpoch, op.LeaderEpoch = 3, 3
	ot.Partitions = append(ot.Partitions, op)
	oe.Topics = append(oe.Topics, ot)
	eresp := callAs(t, carol, r.kafkaOffsetForLeaderEpoch, oe).(*kmsg.OffsetForLeaderEpochResponse)
	require.Zero(t, eresp.Topics[0].Partitions[0].ErrorCode)
	eresp = callAs(t, bob, r.kafkaOffsetForLeaderEpoch, oe).(*kmsg.OffsetForLeaderEpochResponse)
	require.Equal(t, kTopicAuth, eresp.Topics[0].Partitions[0].ErrorCode)

	dl := kmsg.NewPtrDescribeLogDirsRequest()
	dl.Version = 4
	dresp := callAs(t, carol, r.kafkaDescribeLogDirs, dl).(*kmsg.DescribeLogDirsResponse)
	require.Equal(t, kClusterAuth, dresp.ErrorCode)
	require.Empty(t, dresp.Dirs)
}

func TestGRPCProduceAndFetchNeedTopicACLs(t *testing.T) {
	r, alice, bob, _ := authzNode(t)
	req := func(tid string) *storagev1.ProduceRequest {
		return &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TransactionalId: tid, Partitions: []*storagev1.ProducePartition{
			{Topic: "t", Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: kafkaBatch(t, record.CodecNone, "v")}}}}
	}
	resp, err := r.Produce(alice, req(""))
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	resp, err = r.Produce(bob, req(""))
	require.NoError(t, err, "a refused topic is the partition's error, not the call's")
	require.Equal(t, errs.TopicAuthorizationFailed, resp.GetResults()[0].GetError().GetCode())
	_, err = r.Produce(alice, req("tx"))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a refused transactional id refuses the call")
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, errs.CodeOf(err))

	fetch := func(ctx context.Context) []*storagev1.FetchResponse {
		s := &fetchStream{ctx: ctx}
		require.NoError(t, r.Fetch(&storagev1.FetchRequest{Partitions: []*storagev1.FetchPartition{{Topic: "t", Partition: 0}}, MaxWaitMs: 1}, s))
		return s.sent
	}
	for _, m := range fetch(alice) {
		require.Nil(t, m.GetError())
	}
	sent := fetch(bob)
	require.Len(t, sent, 1)
	require.Equal(t, errs.TopicAuthorizationFailed, sent[0].GetError().GetCode())
}

func TestInternalCallsNeedTheirRole(t *testing.T) {
	r, alice, _, _ := authzNode(t)
	bg := context.Background()
	// WriteTxnMarkers: the transaction coordinator's, or ClusterAction.
	_, err := r.WriteTxnMarkers(alice, &storagev1.WriteTxnMarkersRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	_, err = r.WriteTxnMarkers(authztest.RoleCtx(bg, "replication"), &storagev1.WriteTxnMarkersRequest{})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "a replication certificate cannot write markers")
	_, err = r.WriteTxnMarkers(authztest.RoleCtx(bg, "transaction-coordinator"), &storagev1.WriteTxnMarkersRequest{})
	require.NotEqual(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))

	_, err = r.FenceCoordinator(authztest.RoleCtx(bg, "storage-node"), &storagev1.FenceCoordinatorRequest{Topic: "t"})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	_, err = r.FenceCoordinator(authztest.RoleCtx(bg, "group-coordinator"), &storagev1.FenceCoordinatorRequest{Topic: "t"})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "past authorization: t is not an internal topic")

	// A client may not write a coordinator's internal topic.
	resp, err := r.Produce(alice, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, Partitions: []*storagev1.ProducePartition{
		{Topic: "__consumer_offsets", Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: kafkaBatch(t, record.CodecNone, "v")}}}})
	require.NoError(t, err)
	require.Equal(t, errs.ClusterAuthorizationFailed, resp.GetResults()[0].GetError().GetCode())

	// The ReplicationService: the replication role's (and the
	// controller's, for DescribeReplicas).
	rs := replica.NewServer(r.replicas)
	rs.Authz = r.deps.Authz
	_, err = rs.DescribeReplicas(alice, nil)
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	_, err = rs.DescribeReplicas(authztest.RoleCtx(bg, "controller"), nil)
	require.NoError(t, err)
	err = rs.FollowerFetch(&followStream{ctx: authztest.RoleCtx(bg, "group-coordinator")})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
}

func TestAuthorizationOffCostsNothingOnProduce(t *testing.T) {
	r := newKafkaNode(t)
	ctx := authztest.Ctx(context.Background(), "alice")
	req := &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_LEADER}
	a := r.deps.Authorizer()
	// The per-request checks of a produce with authorization off.
	allocs := testing.AllocsPerRun(1000, func() {
		topics := authz.NewMemo(ctx, a, authz.Write, authz.Topic)
		if r.authorizeProduce(ctx, req) != nil || r.authorizeProduceTopic(ctx, &topics, "t") != nil {
			t.Fatal("refused with authorization off")
		}
	})
	require.Zero(t, allocs)
}

// fetchStream is the server side of a Fetch stream, recording the
// messages that are not frames of batches.
type fetchStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*storagev1.FetchResponse
}

func (s *fetchStream) Context() context.Context { return s.ctx }
func (s *fetchStream) Send(m *storagev1.FetchResponse) error {
	s.sent = append(s.sent, m)
	return nil
}
func (s *fetchStream) SendMsg(m any) error {
	if fr, ok := m.(*storagev1.FetchResponse); ok {
		s.sent = append(s.sent, fr)
	}
	return nil
}
func (s *fetchStream) SetHeader(metadata.MD) error  { return nil }
func (s *fetchStream) SendHeader(metadata.MD) error { return nil }
func (s *fetchStream) SetTrailer(metadata.MD)       {}

// followStream is a FollowerFetch stream whose follower sent nothing.
type followStream struct {
	grpc.BidiStreamingServer[replicationv1.FollowerFetchRequest, replicationv1.FollowerFetchResponse]
	ctx context.Context
}

func (s *followStream) Context() context.Context { return s.ctx }

// TestKafkaProduceAuthzCost measures a Kafka produce of one batch to one
// topic with authorization off and on (one ACL check per request and
// topic, not per batch or record). Set SLUICE_AUTHZ_BENCH=1 to run it.
func TestKafkaProduceAuthzCost(t *testing.T) {
	if os.Getenv("SLUICE_AUTHZ_BENCH") == "" {
		t.Skip("a measurement: set SLUICE_AUTHZ_BENCH=1")
	}
	r, alice, _, _ := authzNode(t)
	acls := r.deps.Authz
	batch := kafkaBatch(t, record.CodecNone, "a", "b", "c", "d")
	for _, on := range []bool{false, true, false, true} {
		r.deps.Authz = nil
		if on {
			r.deps.Authz = acls
		}
		res := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := produceReq(9, 1, "t", 0, batch)
				reply, err := r.kafkaProduce(alice, &kafka.Request{Key: req.Key(), Version: req.Version, Msg: req})
				if err != nil {
					b.Fatal(err)
				}
				if reply.Wait != nil {
					reply.Wait(context.Background())
				}
			}
		})
		t.Logf("authorization on=%v: %v %v", on, res, res.MemString())
	}
}
