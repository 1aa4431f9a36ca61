package groupcoord

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// Kafka's wire protocol for groups. Every handler converts the kmsg request
// into the gRPC request, calls the method that serves gRPC (so both
// protocols share validation, fencing and state), and converts the answer
// back. The versions registered are those served completely: a client
// picks the highest version both sides know, so a half-served one would
// break real clients.
//
// Calls that can wait (JoinGroup for the join phase, SyncGroup for the
// leader's assignment, anything that writes to the offsets topic) answer
// through kafka.Reply.Wait, so the connection goes on reading meanwhile.

// kafkaUnknownTopicID is UNKNOWN_TOPIC_ID: a topic id no topic has.
var kafkaUnknownTopicID = errs.Lookup(errs.UnknownTopicID).Kafka

// Kafka error codes the catalog does not carry yet.
const (
	// kafkaInvalidRegularExpression is INVALID_REGULAR_EXPRESSION
	// (ConsumerGroupHeartbeat v1+).
	kafkaInvalidRegularExpression int16 = 128
	// kafkaUnknownGeneration is the generation Kafka answers with a
	// failed JoinGroup.
	kafkaUnknownGeneration int32 = -1
)

// kafkaVersions are the versions served of each group API key, by this
// role and (answering NOT_COORDINATOR) by processes that do not run it.
var kafkaVersions = map[kmsg.Key][2]int16{
	kmsg.JoinGroup:    {0, 9},
	kmsg.SyncGroup:    {0, 5},
	kmsg.Heartbeat:    {0, 4},
	kmsg.LeaveGroup:   {0, 5},
	kmsg.OffsetCommit: {2, 10},
	kmsg.OffsetFetch:  {1, 10},
	kmsg.OffsetDelete: {0, 0},
	// v5 and v6 belong to the transaction protocol of KIP-890 part 2
	// (the coordinator adds the offsets partition to the transaction
	// itself) and to topic ids (KIP-1319); neither is served.
	kmsg.TxnOffsetCommit:        {0, 4},
	kmsg.ListGroups:             {0, 5},
	kmsg.DescribeGroups:         {0, 6},
	kmsg.DeleteGroups:           {0, 3},
	kmsg.ConsumerGroupHeartbeat: {0, 1},
	kmsg.ConsumerGroupDescribe:  {0, 1},
}

// registerKafka registers the role's Kafka API handlers.
func (r *GroupCoordinator) registerKafka(m *kafka.Mux) {
	handlers := map[kmsg.Key]kafka.Handler{
		kmsg.JoinGroup: r.kafkaJoinGroup, kmsg.SyncGroup: r.kafkaSyncGroup, kmsg.Heartbeat: r.kafkaHeartbeat,
		kmsg.LeaveGroup: r.kafkaLeaveGroup, kmsg.OffsetCommit: r.kafkaOffsetCommit, kmsg.OffsetFetch: r.kafkaOffsetFetch,
		kmsg.OffsetDelete: r.kafkaOffsetDelete, kmsg.TxnOffsetCommit: r.kafkaTxnOffsetCommit, kmsg.ListGroups: r.kafkaListGroups,
		kmsg.DescribeGroups: r.kafkaDescribeGroups, kmsg.DeleteGroups: r.kafkaDeleteGroups,
		kmsg.ConsumerGroupHeartbeat: r.kafkaConsumerGroupHeartbeat, kmsg.ConsumerGroupDescribe: r.kafkaConsumerGroupDescribe,
	}
	for key, v := range kafkaVersions {
		m.Handle(int16(key), v[0], v[1], handlers[key])
	}
}

// callContext carries the Kafka client's id and address the way the gRPC
// path reads them (the "client-id" header and the peer), so DescribeGroups
// shows them for members of either protocol.
func callContext(ctx context.Context, req *kafka.Request) context.Context {
	if req.ClientID != "" {
		ctx = grpcmd.NewIncomingContext(ctx, grpcmd.Pairs("client-id", req.ClientID))
	}
	if req.Conn != nil && req.Conn.Remote != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: req.Conn.Remote})
	}
	return ctx
}

// protoCode is the Kafka code of a per-item error (0 for none).
func protoCode(e *edpb.Error) int16 {
	if e == nil {
		return 0
	}
	return kafka.ErrorCode(errs.FromProto(e))
}

// protoMessage is the error message of a per-item error, nil for none.
func protoMessage(e *edpb.Error) *string {
	if e == nil || e.GetCode() == errs.None {
		return nil
	}
	return kafka.ErrorMessage(errs.FromProto(e))
}

// orEmpty reads a nullable Kafka string; null becomes "", as proto3 has it.
func orEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// orNull is the nullable Kafka string of s: null for "".
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// kafkaJoinGroup serves JoinGroup v0-v9.
//
// Versions before 4 predate KIP-394: a member joining with no member id and
// no instance id is admitted at once, so the MEMBER_ID_REQUIRED round trip
// the coordinator asks for is made here, on the client's behalf.
//
// A static member (KIP-345) that rejoins a stable group with unchanged
// metadata gets the current generation without a rebalance. When it is the
// leader, Kafka tells a v9+ client so with skip_assignment and the member
// list (KIP-814); an older client is told the previous leader's member id
// instead of its own, so it does not compute an assignment with no members
// and takes its stored one from SyncGroup as a follower.
func (r *GroupCoordinator) kafkaJoinGroup(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.JoinGroupRequest)
	call := &groupv1.JoinGroupRequest{
		GroupId: in.Group, SessionTimeoutMs: in.SessionTimeoutMillis, RebalanceTimeoutMs: in.RebalanceTimeoutMillis,
		MemberId: in.MemberID, GroupInstanceId: orEmpty(in.InstanceID), ProtocolType: in.ProtocolType, Reason: orEmpty(in.Reason),
	}
	for _, p := range in.Protocols {
		call.Protocols = append(call.Protocols, &groupv1.JoinGroupProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	version := req.Version
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		wctx = callContext(wctx, req)
		prevLeader := ""
		if call.MemberId == "" && call.GroupInstanceId != "" {
			prevLeader = r.staticHolder(call.GroupId, call.GroupInstanceId)
		}
		resp, err := r.JoinGroup(wctx, call)
		if err == nil && version < 4 && call.MemberId == "" && call.GroupInstanceId == "" &&
			errs.FromProto(resp.GetError()).Code == errs.MemberIDRequired && resp.GetMemberId() != "" {
			again := proto.Clone(call).(*groupv1.JoinGroupRequest)
			again.MemberId = resp.GetMemberId()
			resp, err = r.JoinGroup(wctx, again)
		}
		out := kmsg.NewPtrJoinGroupResponse()
		out.Version = version
		if err != nil {
			out.ErrorCode = kafka.ErrorCode(err)
			out.Generation = kafkaUnknownGeneration
			out.MemberID = in.MemberID
			return out
		}
		r.fillJoinResponse(out, call, resp, prevLeader)
		return out
	}}, nil
}

// fillJoinResponse converts a JoinGroup answer (see kafkaJoinGroup for the
// static leader's case).
func (r *GroupCoordinator) fillJoinResponse(out *kmsg.JoinGroupResponse, call *groupv1.JoinGroupRequest, resp *groupv1.JoinGroupResponse, prevLeader string) {
	out.ErrorCode = protoCode(resp.GetError())
	out.MemberID = resp.GetMemberId()
	if out.ErrorCode != 0 {
		out.Generation = kafkaUnknownGeneration
		return
	}
	out.Generation = resp.GetGenerationId()
	out.ProtocolType = orNull(resp.GetProtocolType())
	out.Protocol = orNull(resp.GetProtocolName())
	out.LeaderID = resp.GetLeader()
	for _, m := range resp.GetMembers() {
		km := kmsg.NewJoinGroupResponseMember()
		km.MemberID, km.InstanceID, km.ProtocolMetadata = m.GetMemberId(), orNull(m.GetGroupInstanceId()), m.GetMetadata()
		out.Members = append(out.Members, km)
	}
	staticLeaderRejoin := call.GetMemberId() == "" && call.GetGroupInstanceId() != "" &&
		resp.GetLeader() == resp.GetMemberId() && len(resp.GetMembers()) == 0
	if !staticLeaderRejoin {
		return
	}
	if out.Version >= 9 {
		members, ok := r.classicMembers(call.GetGroupId(), resp.GetGenerationId())
		if ok {
			out.SkipAssignment = true
			out.Members = members
			return
		}
	}
	out.LeaderID = prevLeader
}

// staticHolder returns the member id holding a static instance id of a
// classic group now, or "".
func (r *GroupCoordinator) staticHolder(groupID, instanceID string) string {
	s, e := r.shardFor(groupID)
	if e != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(groupID, false)
	if g == nil || g.classic == nil {
		return ""
	}
	return g.classic.static[instanceID]
}

// classicMembers lists the members of a classic group at generation, with
// their metadata for the group's protocol, as a JoinGroup leader gets them;
// ok is false when the group moved to another generation.
func (r *GroupCoordinator) classicMembers(groupID string, generation int32) ([]kmsg.JoinGroupResponseMember, bool) {
	s, e := r.shardFor(groupID)
	if e != nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(groupID, false)
	if g == nil || g.classic == nil || g.classic.generation != generation {
		return nil, false
	}
	c := g.classic
	var out []kmsg.JoinGroupResponseMember
	for _, id := range sortedIDs(c.members) {
		m := c.members[id]
		km := kmsg.NewJoinGroupResponseMember()
		km.MemberID, km.InstanceID, km.ProtocolMetadata = m.id, orNull(m.instanceID), m.metadataFor(c.protocol)
		out = append(out, km)
	}
	return out, true
}

// kafkaSyncGroup serves SyncGroup v0-v5; a member waits for the leader's
// assignment.
func (r *GroupCoordinator) kafkaSyncGroup(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.SyncGroupRequest)
	call := &groupv1.SyncGroupRequest{
		GroupId: in.Group, GenerationId: in.Generation, MemberId: in.MemberID, GroupInstanceId: orEmpty(in.InstanceID),
		ProtocolType: orEmpty(in.ProtocolType), ProtocolName: orEmpty(in.Protocol),
	}
	for _, a := range in.GroupAssignment {
		call.Assignments = append(call.Assignments, &groupv1.SyncGroupAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	version := req.Version
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		resp, err := r.SyncGroup(callContext(wctx, req), call)
		out := kmsg.NewPtrSyncGroupResponse()
		out.Version = version
		if err != nil {
			out.ErrorCode = kafka.ErrorCode(err)
			return out
		}
		out.ErrorCode = protoCode(resp.GetError())
		if out.ErrorCode != 0 {
			return out
		}
		out.ProtocolType = orNull(resp.GetProtocolType())
		out.Protocol = orNull(resp.GetProtocolName())
		out.MemberAssignment = resp.GetAssignment()
		return out
	}}, nil
}

// kafkaHeartbeat serves Heartbeat v0-v4.
func (r *GroupCoordinator) kafkaHeartbeat(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.HeartbeatRequest)
	resp, err := r.Heartbeat(callContext(ctx, req), &groupv1.HeartbeatRequest{
		GroupId: in.Group, GenerationId: in.Generation, MemberId: in.MemberID, GroupInstanceId: orEmpty(in.InstanceID),
	})
	out := kmsg.NewPtrHeartbeatResponse()
	out.Version = req.Version
	if err != nil {
		out.ErrorCode = kafka.ErrorCode(err)
	} else {
		out.ErrorCode = protoCode(resp.GetError())
	}
	return kafka.Now(out), nil
}

// kafkaLeaveGroup serves LeaveGroup v0-v5. Before v3 a request names one
// member and its outcome is the response's error; from v3 on members leave
// in batches (KIP-345) with an outcome each.
func (r *GroupCoordinator) kafkaLeaveGroup(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.LeaveGroupRequest)
	call := &groupv1.LeaveGroupRequest{GroupId: in.Group}
	if req.Version < 3 {
		call.Members = []*groupv1.LeavingMember{{MemberId: in.MemberID}}
	}
	for _, m := range in.Members {
		call.Members = append(call.Members, &groupv1.LeavingMember{MemberId: m.MemberID, GroupInstanceId: orEmpty(m.InstanceID), Reason: orEmpty(m.Reason)})
	}
	resp, err := r.LeaveGroup(callContext(ctx, req), call)
	out := kmsg.NewPtrLeaveGroupResponse()
	out.Version = req.Version
	switch {
	case err != nil:
		out.ErrorCode = kafka.ErrorCode(err)
	case resp.GetError() != nil:
		out.ErrorCode = protoCode(resp.GetError())
	case req.Version < 3:
		if len(resp.GetResults()) > 0 {
			out.ErrorCode = protoCode(resp.GetResults()[0].GetError())
		}
	default:
		for _, res := range resp.GetResults() {
			m := kmsg.NewLeaveGroupResponseMember()
			m.MemberID, m.InstanceID, m.ErrorCode = res.GetMemberId(), orNull(res.GetGroupInstanceId()), protoCode(res.GetError())
			out.Members = append(out.Members, m)
		}
	}
	return kafka.Now(out), nil
}
