package groupcoord

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/kafka"
)

// Kafka error codes the tests expect, by Kafka's numbers.
const (
	codeIllegalGeneration      int16 = 22
	codeInvalidGroupID         int16 = 24
	codeUnknownMemberID        int16 = 25
	codeRebalanceInProgress    int16 = 27
	codeInvalidRequest         int16 = 42
	codeGroupIDNotFound        int16 = 69
	codeMemberIDRequired       int16 = 79
	codeFencedInstanceID       int16 = 82
	codeUnknownTopicID         int16 = 100
	codeInvalidRegularExpr     int16 = 128
	codeCoordinatorUnavailable int16 = 15
)

const testTopicID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"

// kafkaHarness drives the role's Kafka handlers through a mux, encoding
// every request and response at the version asked for, as a connection
// would.
type kafkaHarness struct {
	*txnHarness
	mux *kafka.Mux
}

func newKafkaHarness(t *testing.T) *kafkaHarness {
	h := &kafkaHarness{txnHarness: newTxnHarness(t), mux: kafka.NewMux()}
	h.c.cfg.MinSessionTimeout, h.c.cfg.MaxSessionTimeout = time.Millisecond, time.Hour
	h.c.deps.Metadata.Load().Topics["t"].ID = testTopicID
	h.c.registerKafka(h.mux)
	return h
}

func (h *kafkaHarness) do(req kmsg.Request, version int16) kmsg.Response {
	h.t.Helper()
	req.SetVersion(version)
	in := kmsg.RequestForKey(req.Key())
	in.SetVersion(version)
	require.NoError(h.t, in.ReadFrom(req.AppendTo(nil)), "decoding the request")
	handler, minV, maxV, ok := h.mux.Lookup(req.Key())
	require.True(h.t, ok, "key %d registered", req.Key())
	require.True(h.t, version >= minV && version <= maxV, "version %d of key %d served", version, req.Key())
	reply, err := handler(h.ctx, &kafka.Request{Key: req.Key(), Version: version, Msg: in, ClientID: "kafka-client",
		Conn: &kafka.Conn{Remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}}})
	require.NoError(h.t, err)
	resp := reply.Msg
	if reply.Wait != nil {
		resp = reply.Wait(h.ctx)
	}
	require.NotNil(h.t, resp)
	require.Equal(h.t, version, resp.GetVersion())
	out := in.ResponseKind()
	out.SetVersion(version)
	require.NoError(h.t, out.ReadFrom(resp.AppendTo(nil)), "decoding the response")
	return out
}

func topicIDOf(t *testing.T) [16]byte {
	id, ok := kafka.TopicID(testTopicID)
	require.True(t, ok)
	return id
}

func joinReq(group, member string, instance *string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Group, r.MemberID, r.InstanceID = group, member, instance
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10000, 10000
	r.ProtocolType = "consumer"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"t"}
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", meta.AppendTo(nil)
	r.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	return r
}

func syncReq(group, member string, gen int32, assign map[string][]int32) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Group, r.MemberID, r.Generation = group, member, gen
	for m, ps := range assign {
		a := kmsg.NewConsumerMemberAssignment()
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = "t", ps
		a.Topics = append(a.Topics, at)
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = m, a.AppendTo(nil)
		r.GroupAssignment = append(r.GroupAssignment, ga)
	}
	return r
}

func TestKafkaVersionsServed(t *testing.T) {
	h := newKafkaHarness(t)
	got := map[int16][2]int16{}
	for _, k := range h.mux.Versions() {
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	require.Equal(t, map[int16][2]int16{
		int16(kmsg.OffsetCommit): {2, 10}, int16(kmsg.OffsetFetch): {1, 10}, int16(kmsg.JoinGroup): {0, 9},
		int16(kmsg.Heartbeat): {0, 4}, int16(kmsg.LeaveGroup): {0, 5}, int16(kmsg.SyncGroup): {0, 5},
		int16(kmsg.DescribeGroups): {0, 6}, int16(kmsg.ListGroups): {0, 5}, int16(kmsg.TxnOffsetCommit): {0, 4},
		int16(kmsg.DeleteGroups): {0, 3}, int16(kmsg.OffsetDelete): {0, 0},
		int16(kmsg.ConsumerGroupHeartbeat): {0, 1}, int16(kmsg.ConsumerGroupDescribe): {0, 1},
	}, got)
}

// A classic group over Kafka's protocol, from a v3 join (no
// MEMBER_ID_REQUIRED) through sync, heartbeats, commits, fetches and a
// batch leave.
func TestKafkaClassicGroupLifecycle(t *testing.T) {
	h := newKafkaHarness(t)

	// v4+: the first join is asked to come back with a member id.
	jr := h.do(joinReq("g4", "", nil), 9).(*kmsg.JoinGroupResponse)
	require.Equal(t, codeMemberIDRequired, jr.ErrorCode)
	require.Equal(t, int32(-1), jr.Generation)
	require.NotEmpty(t, jr.MemberID)

	// v3: admitted at once.
	jr = h.do(joinReq("g", "", nil), 3).(*kmsg.JoinGroupResponse)
	require.Zero(t, jr.ErrorCode)
	require.Equal(t, int32(1), jr.Generation)
	require.Equal(t, jr.MemberID, jr.LeaderID)
	require.Equal(t, "range", *jr.Protocol)
	require.Len(t, jr.Members, 1)
	me := jr.MemberID
	require.Contains(t, me, "kafka-client-", "the member id starts with the Kafka client id")

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", me, 1
	require.Zero(t, h.do(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode, "waiting for the assignment is no reason to rejoin")

	sr := h.do(syncReq("g", me, 1, map[string][]int32{me: {0, 1, 2, 3}}), 5).(*kmsg.SyncGroupResponse)
	require.Zero(t, sr.ErrorCode)
	require.Equal(t, "consumer", *sr.ProtocolType)
	var got kmsg.ConsumerMemberAssignment
	require.NoError(t, got.ReadFrom(sr.MemberAssignment))
	require.Equal(t, []int32{0, 1, 2, 3}, got.Topics[0].Partitions)

	require.Zero(t, h.do(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode)
	hb.Generation = 7
	require.Equal(t, codeIllegalGeneration, h.do(hb, 0).(*kmsg.HeartbeatResponse).ErrorCode)
	hb.Generation, hb.MemberID = 1, "nobody"
	require.Equal(t, codeUnknownMemberID, h.do(hb, 2).(*kmsg.HeartbeatResponse).ErrorCode)

	// Commit at v8 by name and at v10 by topic id (one id unknown).
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation, oc.MemberID = "g", 1, me
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "t"
	for p := int32(0); p < 2; p++ {
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition, op.Offset, op.Metadata = p, int64(100+p), kmsg.StringPtr("m")
		ot.Partitions = append(ot.Partitions, op)
	}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{ot}
	ocr := h.do(oc, 8).(*kmsg.OffsetCommitResponse)
	require.Len(t, ocr.Topics, 1)
	require.Equal(t, "t", ocr.Topics[0].Topic)
	for _, p := range ocr.Topics[0].Partitions {
		require.Zero(t, p.ErrorCode)
	}
	ot.Topic, ot.TopicID = "", topicIDOf(t)
	ot.Partitions = ot.Partitions[:1]
	ot.Partitions[0].Partition, ot.Partitions[0].Offset = 2, 300
	unknown := kmsg.NewOffsetCommitRequestTopic()
	unknown.TopicID = [16]byte{1}
	unknown.Partitions = []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{ot, unknown}
	ocr = h.do(oc, 10).(*kmsg.OffsetCommitResponse)
	require.Len(t, ocr.Topics, 2)
	require.Equal(t, topicIDOf(t), ocr.Topics[0].TopicID)
	require.Zero(t, ocr.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, codeUnknownTopicID, ocr.Topics[1].Partitions[0].ErrorCode)
	oc.Topics, oc.Generation = oc.Topics[:1], 5
	require.Equal(t, codeIllegalGeneration, h.do(oc, 9).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)

	// Fetch one group at v7 (every offset: null topics) and two at v8.
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "g"
	ofr := h.do(of, 7).(*kmsg.OffsetFetchResponse)
	require.Zero(t, ofr.ErrorCode)
	require.Len(t, ofr.Topics, 1)
	offsets := map[int32]int64{}
	for _, p := range ofr.Topics[0].Partitions {
		offsets[p.Partition] = p.Offset
	}
	require.Equal(t, map[int32]int64{0: 100, 1: 101, 2: 300}, offsets)
	of = kmsg.NewPtrOffsetFetchRequest()
	for _, g := range []string{"g", "", "unknown"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = "t", []int32{1, 3}
		rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{rt}
		of.Groups = append(of.Groups, rg)
	}
	ofr = h.do(of, 8).(*kmsg.OffsetFetchResponse)
	require.Len(t, ofr.Groups, 3)
	require.Zero(t, ofr.Groups[0].ErrorCode)
	require.Equal(t, int64(101), ofr.Groups[0].Topics[0].Partitions[0].Offset)
	require.Equal(t, "m", *ofr.Groups[0].Topics[0].Partitions[0].Metadata)
	require.Equal(t, int64(-1), ofr.Groups[0].Topics[0].Partitions[1].Offset)
	require.Equal(t, codeInvalidGroupID, ofr.Groups[1].ErrorCode)
	require.Zero(t, ofr.Groups[2].ErrorCode)
	require.Equal(t, int64(-1), ofr.Groups[2].Topics[0].Partitions[0].Offset)
	// v10 answers by topic id.
	of.Groups = of.Groups[:1]
	of.Groups[0].Topics[0].Topic, of.Groups[0].Topics[0].TopicID = "", topicIDOf(t)
	of.Groups[0].MemberID, of.Groups[0].MemberEpoch = kmsg.StringPtr(me), 1
	ofr = h.do(of, 10).(*kmsg.OffsetFetchResponse)
	require.Zero(t, ofr.Groups[0].ErrorCode, "a classic member's id and generation are not checked (as in Kafka; franz-go sends them)")
	require.Equal(t, topicIDOf(t), ofr.Groups[0].Topics[0].TopicID)
	require.Equal(t, int64(101), ofr.Groups[0].Topics[0].Partitions[0].Offset)
	of.Groups[0].MemberID, of.Groups[0].MemberEpoch = nil, -1

	// Describe while stable: metadata and the leader's assignment bytes.
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"g", "absent"}
	dgr := h.do(dg, 6).(*kmsg.DescribeGroupsResponse)
	require.Len(t, dgr.Groups, 2)
	require.Equal(t, stateStable, dgr.Groups[0].State)
	require.Equal(t, "range", dgr.Groups[0].Protocol)
	require.Len(t, dgr.Groups[0].Members, 1)
	require.Equal(t, "kafka-client", dgr.Groups[0].Members[0].ClientID)
	require.Equal(t, "127.0.0.1:5555", dgr.Groups[0].Members[0].ClientHost)
	require.NoError(t, got.ReadFrom(dgr.Groups[0].Members[0].MemberAssignment))
	require.Equal(t, []int32{0, 1, 2, 3}, got.Topics[0].Partitions)
	require.Equal(t, codeGroupIDNotFound, dgr.Groups[1].ErrorCode)
	require.NotNil(t, dgr.Groups[1].ErrorMessage)
	dgr = h.do(dg, 5).(*kmsg.DescribeGroupsResponse)
	require.Zero(t, dgr.Groups[1].ErrorCode, "before v6 a missing group is Dead without an error")
	require.Equal(t, stateDead, dgr.Groups[1].State)

	// A group with members cannot be deleted; after a v5 batch leave
	// (one member known, one not) it can.
	dl := kmsg.NewPtrDeleteGroupsRequest()
	dl.Groups = []string{"g"}
	require.NotZero(t, h.do(dl, 3).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode)
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Group = "g"
	for _, id := range []string{me, "nobody"} {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		lv.Members = append(lv.Members, m)
	}
	lvr := h.do(lv, 5).(*kmsg.LeaveGroupResponse)
	require.Zero(t, lvr.ErrorCode)
	require.Len(t, lvr.Members, 2)
	require.Zero(t, lvr.Members[0].ErrorCode)
	require.Equal(t, codeUnknownMemberID, lvr.Members[1].ErrorCode)

	lg := kmsg.NewPtrListGroupsRequest()
	lg.StatesFilter = []string{"empty"}
	lgr := h.do(lg, 5).(*kmsg.ListGroupsResponse)
	require.Len(t, lgr.Groups, 2, "g, and g4 that the MEMBER_ID_REQUIRED join created (as in Kafka)")
	require.Equal(t, "g", lgr.Groups[0].Group)
	require.Equal(t, "consumer", lgr.Groups[0].ProtocolType)
	require.Equal(t, "classic", lgr.Groups[0].GroupType)
	lg.TypesFilter = []string{"no-such-type"}
	require.Empty(t, h.do(lg, 5).(*kmsg.ListGroupsResponse).Groups, "an unknown type matches nothing")

	dlr := h.do(dl, 3).(*kmsg.DeleteGroupsResponse)
	require.Zero(t, dlr.Groups[0].ErrorCode)
	require.Nil(t, dlr.Groups[0].ErrorMessage)
	ofr = h.do(of, 9).(*kmsg.OffsetFetchResponse)
	require.Equal(t, int64(-1), ofr.Groups[0].Topics[0].Partitions[0].Offset, "the offsets went with the group")
}

// Two members of a v5 (pre-KIP-394 follower path) group: the follower's
// JoinGroup and SyncGroup wait, through Reply.Wait, for the rebalance and
// the leader.
func TestKafkaJoinAndSyncWait(t *testing.T) {
	h := newKafkaHarness(t)
	first := h.do(joinReq("g", "", kmsg.StringPtr("a")), 5).(*kmsg.JoinGroupResponse)
	require.Zero(t, first.ErrorCode)
	a := first.MemberID
	require.Zero(t, h.do(syncReq("g", a, 1, map[string][]int32{a: {0, 1, 2, 3}}), 5).(*kmsg.SyncGroupResponse).ErrorCode)

	// b joins; a learns of the rebalance from its heartbeat and rejoins.
	var wg sync.WaitGroup
	var bJoin *kmsg.JoinGroupResponse
	wg.Add(1)
	go func() {
		defer wg.Done()
		bJoin = h.do(joinReq("g", "", kmsg.StringPtr("b")), 5).(*kmsg.JoinGroupResponse)
	}()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", a, 1
	require.Eventually(t, func() bool {
		return h.do(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode == codeRebalanceInProgress
	}, 5*time.Second, 10*time.Millisecond)
	aJoin := h.do(joinReq("g", a, kmsg.StringPtr("a")), 5).(*kmsg.JoinGroupResponse)
	wg.Wait()
	require.Zero(t, aJoin.ErrorCode)
	require.Zero(t, bJoin.ErrorCode)
	require.Equal(t, int32(2), aJoin.Generation)
	require.Equal(t, a, aJoin.LeaderID, "the leader stays")
	require.Len(t, aJoin.Members, 2)
	require.Empty(t, bJoin.Members)
	require.Equal(t, "b", *aJoin.Members[1].InstanceID+"", "instance ids reach the leader")

	var bSync *kmsg.SyncGroupResponse
	wg.Add(1)
	go func() {
		defer wg.Done()
		bSync = h.do(syncReq("g", bJoin.MemberID, 2, nil), 3).(*kmsg.SyncGroupResponse)
	}()
	aSync := h.do(syncReq("g", a, 2, map[string][]int32{a: {0, 1}, bJoin.MemberID: {2, 3}}), 3).(*kmsg.SyncGroupResponse)
	wg.Wait()
	require.Zero(t, aSync.ErrorCode)
	require.Zero(t, bSync.ErrorCode)
	var got kmsg.ConsumerMemberAssignment
	require.NoError(t, got.ReadFrom(bSync.MemberAssignment))
	require.Equal(t, []int32{2, 3}, got.Topics[0].Partitions)

	// A second process with b's instance id fences the first.
	fenced := kmsg.NewPtrHeartbeatRequest()
	fenced.Group, fenced.MemberID, fenced.Generation, fenced.InstanceID = "g", "b-impostor", 2, kmsg.StringPtr("b")
	require.Equal(t, codeFencedInstanceID, h.do(fenced, 4).(*kmsg.HeartbeatResponse).ErrorCode)
}

// A static leader that restarts with unchanged metadata keeps the
// generation: a v9 client is told to skip the assignment and gets the
// members (KIP-814); an older one is told another member leads.
func TestKafkaStaticLeaderRejoin(t *testing.T) {
	for _, version := range []int16{9, 5} {
		h := newKafkaHarness(t)
		first := h.do(joinReq("g", "", kmsg.StringPtr("a")), version).(*kmsg.JoinGroupResponse)
		require.Zero(t, first.ErrorCode)
		require.Zero(t, h.do(syncReq("g", first.MemberID, 1, map[string][]int32{first.MemberID: {0, 1, 2, 3}}), 5).(*kmsg.SyncGroupResponse).ErrorCode)

		// The restarted client's metadata differs in its bytes (here the
		// generation it last saw): only a change of the selected protocol
		// would rebalance.
		rejoin := joinReq("g", "", kmsg.StringPtr("a"))
		meta := kmsg.NewConsumerMemberMetadata()
		meta.Version, meta.Topics, meta.Generation = 2, []string{"t"}, 1
		rejoin.Protocols[0].Metadata = meta.AppendTo(nil)
		again := h.do(rejoin, version).(*kmsg.JoinGroupResponse)
		require.Zero(t, again.ErrorCode)
		require.Equal(t, int32(1), again.Generation, "no rebalance")
		require.NotEqual(t, first.MemberID, again.MemberID)
		if version >= 9 {
			require.True(t, again.SkipAssignment)
			require.Equal(t, again.MemberID, again.LeaderID)
			require.Len(t, again.Members, 1)
			require.Equal(t, again.MemberID, again.Members[0].MemberID)
		} else {
			require.False(t, again.SkipAssignment)
			require.Equal(t, first.MemberID, again.LeaderID, "v%d: the old id leads, so the client acts as a follower", version)
			require.Empty(t, again.Members)
		}
		sr := h.do(syncReq("g", again.MemberID, 1, nil), 5).(*kmsg.SyncGroupResponse)
		require.Zero(t, sr.ErrorCode)
		var got kmsg.ConsumerMemberAssignment
		require.NoError(t, got.ReadFrom(sr.MemberAssignment))
		require.Equal(t, []int32{0, 1, 2, 3}, got.Topics[0].Partitions, "the stored assignment")
	}
}

func cgHeartbeat(member string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Group, r.MemberID, r.MemberEpoch = "cg", member, epoch
	return r
}

func TestKafkaConsumerProtocol(t *testing.T) {
	h := newKafkaHarness(t)
	id := topicIDOf(t)

	bad := cgHeartbeat("", 0)
	bad.SubscribedTopicNames, bad.RebalanceTimeoutMillis = []string{"t"}, 30000
	r := h.do(bad, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Equal(t, codeInvalidRequest, r.ErrorCode, "v1: the member generates its id")
	require.NotNil(t, r.ErrorMessage)
	bad.MemberID, bad.SubscribedTopicNames, bad.SubscribedTopicRegex = "m1", nil, kmsg.StringPtr("(")
	require.Equal(t, codeInvalidRegularExpr, h.do(bad, 1).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode)
	bad.SubscribedTopicRegex = nil
	require.Equal(t, codeInvalidRequest, h.do(bad, 1).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode, "a join names a subscription")

	join := cgHeartbeat("m1", 0)
	join.SubscribedTopicNames, join.RebalanceTimeoutMillis = []string{"t"}, 30000
	join.ServerAssignor = kmsg.StringPtr("uniform")
	join.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	r = h.do(join, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, "m1", *r.MemberID)
	require.Positive(t, r.MemberEpoch)
	require.Equal(t, int32(1000), r.HeartbeatIntervalMillis)
	require.NotNil(t, r.Assignment)
	require.Len(t, r.Assignment.Topics, 1)
	require.Equal(t, id, r.Assignment.Topics[0].TopicID)
	require.ElementsMatch(t, []int32{0, 1, 2, 3}, r.Assignment.Topics[0].Partitions)
	epoch := r.MemberEpoch

	// Report ownership, then keep alive with null fields: nothing changes.
	ack := cgHeartbeat("m1", epoch)
	owned := kmsg.NewConsumerGroupHeartbeatRequestTopic()
	owned.TopicID, owned.Partitions = id, []int32{0, 1, 2, 3}
	ack.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{owned}
	r = h.do(ack, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	require.Nil(t, r.Assignment)
	keep := cgHeartbeat("m1", epoch)
	r = h.do(keep, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	require.Nil(t, r.Assignment, "a keepalive does not read as releasing the partitions")

	// A second member: m1 must give up half; until it says so (keepalives
	// only) m2 gets nothing m1 still holds.
	join2 := cgHeartbeat("m2", 0)
	join2.SubscribedTopicNames, join2.RebalanceTimeoutMillis = []string{"t"}, 30000
	r2 := h.do(join2, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r2.ErrorCode)
	require.NotNil(t, r2.Assignment)
	require.Empty(t, r2.Assignment.Topics, "m1 still owns everything")
	r = h.do(keep, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	require.NotNil(t, r.Assignment)
	kept := r.Assignment.Topics[0].Partitions
	require.Len(t, kept, 2)
	keep.MemberEpoch = r.MemberEpoch
	r = h.do(keep, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	m2 := cgHeartbeat("m2", r2.MemberEpoch)
	r2 = h.do(m2, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.True(t, r2.Assignment == nil || len(r2.Assignment.Topics) == 0, "m1 has not released yet")

	// m1 reports only what it keeps: m2 gets the rest.
	owned.Partitions = kept
	keep.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{owned}
	r = h.do(keep, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r.ErrorCode)
	keep.MemberEpoch = r.MemberEpoch
	m2.MemberEpoch = r2.MemberEpoch
	r2 = h.do(m2, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r2.ErrorCode)
	require.NotNil(t, r2.Assignment)
	require.Len(t, r2.Assignment.Topics[0].Partitions, 2)
	require.NotContains(t, r2.Assignment.Topics[0].Partitions, kept[0])

	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"cg", "absent", ""}
	dr := h.do(d, 1).(*kmsg.ConsumerGroupDescribeResponse)
	require.Len(t, dr.Groups, 3)
	g := dr.Groups[0]
	require.Zero(t, g.ErrorCode)
	require.Equal(t, "uniform", g.AssignorName)
	require.Len(t, g.Members, 2)
	for _, m := range g.Members {
		require.Equal(t, []string{"t"}, m.SubscribedTopics)
		require.Equal(t, consumerMemberType, m.MemberType)
		require.Len(t, m.TargetAssignment.TopicPartitions, 1)
		require.Equal(t, id, m.TargetAssignment.TopicPartitions[0].TopicID)
	}
	require.Equal(t, codeGroupIDNotFound, dr.Groups[1].ErrorCode)
	require.Equal(t, codeInvalidGroupID, dr.Groups[2].ErrorCode)

	// DescribeGroups describes classic groups only, as Kafka's does.
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"cg"}
	require.Equal(t, codeGroupIDNotFound, h.do(dg, 6).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode)
	lg := kmsg.NewPtrListGroupsRequest()
	lg.TypesFilter = []string{"Consumer"}
	lgr := h.do(lg, 5).(*kmsg.ListGroupsResponse)
	require.Len(t, lgr.Groups, 1)
	require.Equal(t, "consumer", lgr.Groups[0].GroupType)

	// Commit with the member epoch and fetch with it (v9).
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation, oc.MemberID = "cg", keep.MemberEpoch, "m1"
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "t"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset = kept[0], 9
	ot.Partitions = []kmsg.OffsetCommitRequestTopicPartition{op}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{ot}
	require.Zero(t, h.do(oc, 9).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)
	of := kmsg.NewPtrOffsetFetchRequest()
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group, rg.MemberID, rg.MemberEpoch = "cg", kmsg.StringPtr("m1"), keep.MemberEpoch
	of.Groups = []kmsg.OffsetFetchRequestGroup{rg}
	ofr := h.do(of, 9).(*kmsg.OffsetFetchResponse)
	require.Zero(t, ofr.Groups[0].ErrorCode)
	require.Equal(t, int64(9), ofr.Groups[0].Topics[0].Partitions[0].Offset)
	of.Groups[0].MemberEpoch = keep.MemberEpoch + 5
	require.NotZero(t, h.do(of, 9).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode, "a newer epoch than the member's is fenced")

	// Leaving.
	leave := cgHeartbeat("m2", -1)
	r2 = h.do(leave, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, r2.ErrorCode)
	require.Equal(t, int32(-1), r2.MemberEpoch)
	require.Equal(t, codeUnknownMemberID, h.do(cgHeartbeat("m2", 3), 1).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode)
}

func TestKafkaTxnOffsetCommitAndOffsetDelete(t *testing.T) {
	h := newKafkaHarness(t)
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch = "tx", "g", 7, 0
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = "t"
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Partition, tp.Offset = 1, 42
	tt.Partitions = []kmsg.TxnOffsetCommitRequestTopicPartition{tp}
	tc.Topics = []kmsg.TxnOffsetCommitRequestTopic{tt}
	tr := h.do(tc, 3).(*kmsg.TxnOffsetCommitResponse)
	require.Zero(t, tr.Topics[0].Partitions[0].ErrorCode)

	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group, of.RequireStable = "g", true
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "t", []int32{1}
	of.Topics = []kmsg.OffsetFetchRequestTopic{ft}
	require.Equal(t, int16(88), h.do(of, 7).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].ErrorCode,
		"UNSTABLE_OFFSET_COMMIT while the transaction is open")
	require.Zero(t, h.marker(7, 0, true))
	ofr := h.do(of, 7).(*kmsg.OffsetFetchResponse)
	require.Zero(t, ofr.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, int64(42), ofr.Topics[0].Partitions[0].Offset)

	tc.TransactionalID = ""
	require.Equal(t, codeInvalidRequest, h.do(tc, 3).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode)

	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	dt := kmsg.NewOffsetDeleteRequestTopic()
	dt.Topic = "t"
	dt.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}
	od.Topics = []kmsg.OffsetDeleteRequestTopic{dt}
	odr := h.do(od, 0).(*kmsg.OffsetDeleteResponse)
	require.Zero(t, odr.ErrorCode)
	require.Zero(t, odr.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, int64(-1), h.do(of, 7).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset)
	od.Group = "absent"
	require.Equal(t, codeGroupIDNotFound, h.do(od, 0).(*kmsg.OffsetDeleteResponse).ErrorCode)
}

// A group id whose shard is not here: the coordinator's own errors reach
// the Kafka client as Kafka's codes.
func TestKafkaCoordinatorErrors(t *testing.T) {
	h := newKafkaHarness(t)
	h.shard().mu.Lock()
	h.shard().loaded = false
	h.shard().mu.Unlock()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID = "g", "m"
	require.Equal(t, int16(14), h.do(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode, "COORDINATOR_LOAD_IN_PROGRESS")
	jr := h.do(joinReq("g", "", nil), 7).(*kmsg.JoinGroupResponse)
	require.Equal(t, int16(14), jr.ErrorCode)
	require.Nil(t, jr.Protocol)

	h.c.mu.Lock()
	delete(h.c.shards, 0)
	h.c.mu.Unlock()
	require.Equal(t, codeCoordinatorUnavailable, errCodeFor(h, hb), "no node coordinates the partition: its leader runs no coordinator")
}

func errCodeFor(h *kafkaHarness, hb *kmsg.HeartbeatRequest) int16 {
	return h.do(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode
}

func TestOwnedKeyRoundTrip(t *testing.T) {
	in := []*groupv1.TopicPartitions{{Topic: "a.b-c_d", Partitions: []int32{0, 7, 12}}, {Topic: "x", Partitions: nil}}
	out := parseOwnedKey(ownedKey(in))
	require.Len(t, out, 2)
	require.Equal(t, "a.b-c_d", out[0].GetTopic())
	require.Equal(t, []int32{0, 7, 12}, out[0].GetPartitions())
	require.Equal(t, "x", out[1].GetTopic())
	require.Empty(t, out[1].GetPartitions())
	require.Empty(t, parseOwnedKey(""))
}

func TestTopicIDBytes(t *testing.T) {
	b, ok := kafka.TopicID(testTopicID)
	require.True(t, ok)
	require.Equal(t, byte(0x0f), b[0])
	require.Equal(t, byte(0xf0), b[15])
	for _, bad := range []string{"", "xyz", "0f1e2d3c-4b5a-4978-8695"} {
		_, ok := kafka.TopicID(bad)
		require.False(t, ok, bad)
	}
}

// A process without the role advertises the same group APIs and versions
// and answers every one NOT_COORDINATOR (nothing for ListGroups), at every
// version, so clients look the coordinator up instead of concluding the
// cluster lacks the API.
func TestKafkaElsewhereAnswersNotCoordinator(t *testing.T) {
	const notCoordinator int16 = 16
	mux := kafka.NewMux()
	RegisterKafkaElsewhere(mux, 7)
	require.Len(t, mux.Versions(), len(kafkaVersions))
	for key, v := range kafkaVersions {
		for version := v[0]; version <= v[1]; version++ {
			req := kmsg.RequestForKey(int16(key))
			req.SetVersion(version)
			switch r := req.(type) {
			case *kmsg.DescribeGroupsRequest:
				r.Groups = []string{"g"}
			case *kmsg.DeleteGroupsRequest:
				r.Groups = []string{"g"}
			case *kmsg.ConsumerGroupDescribeRequest:
				r.Groups = []string{"g"}
			case *kmsg.OffsetFetchRequest:
				r.Group = "g"
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = "g"
				r.Groups = []kmsg.OffsetFetchRequestGroup{rg}
			}
			in := kmsg.RequestForKey(int16(key))
			in.SetVersion(version)
			require.NoError(t, in.ReadFrom(req.AppendTo(nil)))
			h, _, _, ok := mux.Lookup(int16(key))
			require.True(t, ok)
			reply, err := h(context.Background(), &kafka.Request{Key: int16(key), Version: version, Msg: in})
			require.NoError(t, err)
			out := in.ResponseKind()
			out.SetVersion(version)
			require.NoError(t, out.ReadFrom(reply.Msg.AppendTo(nil)), "%s v%d", key.Name(), version)
			var code int16
			switch r := out.(type) {
			case *kmsg.JoinGroupResponse:
				code = r.ErrorCode
			case *kmsg.SyncGroupResponse:
				code = r.ErrorCode
			case *kmsg.HeartbeatResponse:
				code = r.ErrorCode
			case *kmsg.LeaveGroupResponse:
				code = r.ErrorCode
			case *kmsg.OffsetDeleteResponse:
				code = r.ErrorCode
			case *kmsg.ConsumerGroupHeartbeatResponse:
				code = r.ErrorCode
			case *kmsg.DescribeGroupsResponse:
				code = r.Groups[0].ErrorCode
			case *kmsg.DeleteGroupsResponse:
				code = r.Groups[0].ErrorCode
			case *kmsg.ConsumerGroupDescribeResponse:
				code = r.Groups[0].ErrorCode
			case *kmsg.OffsetFetchResponse:
				if version >= 8 {
					code = r.Groups[0].ErrorCode
				} else if version >= 2 {
					code = r.ErrorCode
				} else {
					code = notCoordinator // v1 answers per partition, and none was asked for
				}
			case *kmsg.ListGroupsResponse:
				require.Empty(t, r.Groups)
				code = notCoordinator
			default:
				code = notCoordinator // per-partition answers, none asked for
			}
			require.Equal(t, notCoordinator, code, "%s v%d", key.Name(), version)
		}
	}
}

// Before v3 LeaveGroup names one member and answers with its outcome as
// the response's error.
func TestKafkaLeaveGroupSingleMember(t *testing.T) {
	h := newKafkaHarness(t)
	jr := h.do(joinReq("g", "", nil), 1).(*kmsg.JoinGroupResponse)
	require.Zero(t, jr.ErrorCode)
	require.Equal(t, int32(1), jr.Generation)
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Group, lv.MemberID = "g", jr.MemberID
	require.Zero(t, h.do(lv, 0).(*kmsg.LeaveGroupResponse).ErrorCode)
	require.Equal(t, codeUnknownMemberID, h.do(lv, 2).(*kmsg.LeaveGroupResponse).ErrorCode)
	lv.Group = ""
	require.Equal(t, codeInvalidGroupID, h.do(lv, 1).(*kmsg.LeaveGroupResponse).ErrorCode)
	// v3+ with no members at all is a bad request, answered in the response.
	lv = kmsg.NewPtrLeaveGroupRequest()
	lv.Group = "g"
	require.Equal(t, codeInvalidRequest, h.do(lv, 5).(*kmsg.LeaveGroupResponse).ErrorCode)
}
