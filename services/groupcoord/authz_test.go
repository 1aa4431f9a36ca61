package groupcoord

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Kafka's numbers of the authorization errors.
const (
	codeTopicAuth int16 = 29
	codeGroupAuth int16 = 30
	codeTxnAuth   int16 = 53
)

// authzHarness is a Kafka harness whose authorizer grants:
// alice Read on group g and Read on topic t (a consumer),
// dave Read on group g only (no topic),
// carol Describe on group g, Delete on group g and Describe on topic t,
// pat Write on transactional id tx, Read on group g and Read on topic t.
func authzHarness(t *testing.T) *kafkaHarness {
	h := newKafkaHarness(t)
	h.c.deps.Authz = authztest.New(
		authztest.Allow("User:alice", authz.Read, authz.Group, "g"),
		authztest.Allow("User:alice", authz.Read, authz.Topic, "t"),
		authztest.Allow("User:dave", authz.Read, authz.Group, "g"),
		authztest.Allow("User:carol", authz.Describe, authz.Group, "g"),
		authztest.Allow("User:carol", authz.Delete, authz.Group, "g"),
		authztest.Allow("User:carol", authz.Describe, authz.Topic, "t"),
		authztest.Allow("User:pat", authz.Write, authz.TransactionalID, "tx"),
		authztest.Allow("User:pat", authz.Read, authz.Group, "g"),
		authztest.Allow("User:pat", authz.Read, authz.Topic, "t"),
	)
	return h
}

// as runs the following requests as User:name.
func (h *kafkaHarness) as(name string) *kafkaHarness {
	h.ctx = authztest.Ctx(h.ctx, name)
	return h
}

func commitReq(group string, gen int32, member string) *kmsg.OffsetCommitRequest {
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation, oc.MemberID = group, gen, member
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "t"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset = 0, 5
	ot.Partitions = []kmsg.OffsetCommitRequestTopicPartition{op}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{ot}
	return oc
}

func TestKafkaGroupCallsNeedGroupACLs(t *testing.T) {
	h := authzHarness(t)
	// bob may not join; alice may.
	require.Equal(t, codeGroupAuth, h.as("bob").do(joinReq("g", "", nil), 3).(*kmsg.JoinGroupResponse).ErrorCode)
	j := h.as("alice").do(joinReq("g", "", nil), 3).(*kmsg.JoinGroupResponse)
	require.Zero(t, j.ErrorCode)
	sync := h.do(syncReq("g", j.MemberID, j.Generation, map[string][]int32{j.MemberID: {0}}), 3).(*kmsg.SyncGroupResponse)
	require.Zero(t, sync.ErrorCode)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.Generation, hb.MemberID = "g", j.Generation, j.MemberID
	require.Zero(t, h.do(hb, 3).(*kmsg.HeartbeatResponse).ErrorCode)
	require.Equal(t, codeGroupAuth, h.as("bob").do(hb, 3).(*kmsg.HeartbeatResponse).ErrorCode)

	// Commits: Read on the group (else every partition is refused with
	// GROUP_AUTHORIZATION_FAILED) and Read on each topic.
	oc := commitReq("g", j.Generation, j.MemberID)
	require.Equal(t, codeGroupAuth, h.as("bob").do(oc, 8).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, codeTopicAuth, h.as("dave").do(oc, 8).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)
	require.Zero(t, h.as("alice").do(oc, 8).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)

	// Fetches: Describe on the group and on each topic; a fetch of every
	// partition leaves out the topics the caller may not Describe.
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "g"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "t", []int32{0}
	of.Topics = []kmsg.OffsetFetchRequestTopic{ft}
	fr := h.as("carol").do(of, 7).(*kmsg.OffsetFetchResponse)
	require.Zero(t, fr.ErrorCode)
	require.Equal(t, int64(5), fr.Topics[0].Partitions[0].Offset)
	require.Equal(t, codeTopicAuth, h.as("dave").do(of, 7).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, codeGroupAuth, h.as("bob").do(of, 7).(*kmsg.OffsetFetchResponse).ErrorCode)
	of.Topics = nil
	require.Len(t, h.as("carol").do(of, 7).(*kmsg.OffsetFetchResponse).Topics, 1)
	require.Empty(t, h.as("dave").do(of, 7).(*kmsg.OffsetFetchResponse).Topics)

	// Admin: Describe / Delete per group; listing only describable groups.
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"g"}
	dg.IncludeAuthorizedOperations = true
	dgr := h.as("carol").do(dg, 5).(*kmsg.DescribeGroupsResponse)
	require.Zero(t, dgr.Groups[0].ErrorCode)
	require.Equal(t, int32(1<<8|1<<6), dgr.Groups[0].AuthorizedOperations, "Describe and Delete")
	require.Equal(t, codeGroupAuth, h.as("bob").do(dg, 5).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode)
	lg := kmsg.NewPtrListGroupsRequest()
	require.Len(t, h.as("carol").do(lg, 4).(*kmsg.ListGroupsResponse).Groups, 1)
	require.Empty(t, h.as("bob").do(lg, 4).(*kmsg.ListGroupsResponse).Groups)
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"g"}
	require.Equal(t, codeGroupAuth, h.as("bob").do(del, 2).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode)
	require.NotEqual(t, codeGroupAuth, h.as("carol").do(del, 2).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode)
}

func TestKafkaConsumerProtocolNeedsGroupACLs(t *testing.T) {
	h := authzHarness(t)
	hb := cgHeartbeat("", 0)
	hb.Group = "g"
	hb.SubscribedTopicNames = []string{"t"}
	hb.RebalanceTimeoutMillis = 10000
	require.Equal(t, codeGroupAuth, h.as("bob").do(hb, 0).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode)
	require.Zero(t, h.as("alice").do(hb, 0).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode)
	cd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cd.Groups = []string{"g"}
	require.Equal(t, codeGroupAuth, h.as("bob").do(cd, 0).(*kmsg.ConsumerGroupDescribeResponse).Groups[0].ErrorCode)
	require.Zero(t, h.as("carol").do(cd, 0).(*kmsg.ConsumerGroupDescribeResponse).Groups[0].ErrorCode)
}

func TestKafkaTxnOffsetCommitNeedsTransactionalID(t *testing.T) {
	h := authzHarness(t)
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch = "tx", "g", 7, 0
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = "t"
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Partition, tp.Offset = 1, 42
	tt.Partitions = []kmsg.TxnOffsetCommitRequestTopicPartition{tp}
	tc.Topics = []kmsg.TxnOffsetCommitRequestTopic{tt}
	require.Equal(t, codeTxnAuth, h.as("alice").do(tc, 3).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)
	require.Zero(t, h.as("pat").do(tc, 3).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)
}

func TestGRPCGroupCallsNeedACLs(t *testing.T) {
	h := authzHarness(t)
	bg := h.ctx
	_, err := h.c.JoinGroup(authztest.Ctx(bg, "bob"), &groupv1.JoinGroupRequest{GroupId: "g"})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, errs.GroupAuthorizationFailed, errs.CodeOf(err))
	_, err = h.c.OffsetCommit(authztest.Ctx(bg, "bob"), &groupv1.OffsetCommitRequest{GroupId: "g", GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: "t", Offset: 1}}})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	resp, err := h.c.OffsetCommit(authztest.Ctx(bg, "dave"), &groupv1.OffsetCommitRequest{GroupId: "g", GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: "t", Offset: 1}, {Topic: "nope", Offset: 1}}})
	require.NoError(t, err)
	require.Equal(t, errs.TopicAuthorizationFailed, resp.GetResults()[0].GetError().GetCode())
	require.Equal(t, errs.TopicAuthorizationFailed, resp.GetResults()[1].GetError().GetCode(), "before the existence check")

	fc, err := h.c.FindCoordinator(authztest.Ctx(bg, "carol"), &groupv1.FindCoordinatorRequest{Keys: []string{"g", "other"}})
	require.NoError(t, err)
	require.Len(t, fc.GetCoordinators(), 2)
	require.NotEqual(t, errs.GroupAuthorizationFailed, fc.GetCoordinators()[0].GetError().GetCode())
	require.Equal(t, "other", fc.GetCoordinators()[1].GetKey())
	require.Equal(t, errs.GroupAuthorizationFailed, fc.GetCoordinators()[1].GetError().GetCode())
	// An idempotent producer asks for any transaction coordinator with the
	// empty key; its InitProducerId is what is checked.
	fc, err = h.c.FindCoordinator(authztest.Ctx(bg, "carol"), &groupv1.FindCoordinatorRequest{
		KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: []string{""}})
	require.NoError(t, err)
	require.NotEqual(t, errs.TransactionalIDAuthorizationFailed, fc.GetCoordinators()[0].GetError().GetCode())

	// Markers for the offsets topic come from the storage node only.
	_, err = h.c.WriteTxnOffsetMarkers(authztest.RoleCtx(bg, "replication"), &groupv1.WriteTxnOffsetMarkersRequest{
		Markers: []*storagev1.TxnMarker{}})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	_, err = h.c.WriteTxnOffsetMarkers(authztest.RoleCtx(bg, "storage-node"), &groupv1.WriteTxnOffsetMarkersRequest{})
	require.NotEqual(t, codes.PermissionDenied, status.Code(err))
	_, err = h.c.WriteTxnOffsetMarkers(authztest.Ctx(context.Background(), "alice"), &groupv1.WriteTxnOffsetMarkersRequest{})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
}
