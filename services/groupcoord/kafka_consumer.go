package groupcoord

import (
	"context"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// The consumer protocol (KIP-848) over Kafka's wire: ConsumerGroupHeartbeat
// and ConsumerGroupDescribe. Kafka names topics by id here; the gRPC
// protocol by name, so ids are resolved against the metadata image.

// consumerMemberType is ConsumerGroupDescribe's member type of a member
// on the consumer protocol (v1+).
const consumerMemberType int8 = 1

// kafkaConsumerGroupHeartbeat serves ConsumerGroupHeartbeat v0-v1.
//
// Kafka's request leaves a field null when it did not change since the
// member's previous heartbeat; the gRPC request reads an empty field the
// same way for every field but the owned partitions, which it takes as the
// member's complete set each time (proto3 cannot tell empty from absent).
// A null owned-partitions list is therefore replaced here by the set the
// member reported last, so a keepalive never reads as "released
// everything". From v1 the member generates its own id (KIP-1082), and a
// malformed regex is INVALID_REGULAR_EXPRESSION.
func (r *GroupCoordinator) kafkaConsumerGroupHeartbeat(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	out := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	out.Version = req.Version
	fail := func(code int16, e *errs.Error) (kafka.Reply, error) {
		out.ErrorCode, out.ErrorMessage = code, kafka.ErrorMessage(e)
		return kafka.Now(out), nil
	}
	if req.Version >= 1 && in.MemberID == "" {
		e := errs.Invalid(errs.InvalidRequest, "member_id", "the member id must be set: from ConsumerGroupHeartbeat v1 on the member generates it (KIP-1082)")
		return fail(kafka.ErrorCode(e), e)
	}
	if in.SubscribedTopicRegex != nil && *in.SubscribedTopicRegex != "" {
		if _, err := regexp.Compile(*in.SubscribedTopicRegex); err != nil {
			e := errs.Invalid(errs.InvalidRequest, "subscribed_topic_regex", "%q is not a valid RE2 expression: %v", *in.SubscribedTopicRegex, err)
			return fail(kafkaInvalidRegularExpression, e)
		}
	}
	rebalance := in.RebalanceTimeoutMillis
	if rebalance == -1 {
		rebalance = 0 // unchanged, in the gRPC request's terms
	}
	call := &groupv1.ConsumerGroupHeartbeatRequest{GroupId: in.Group, MemberId: in.MemberID, MemberEpoch: in.MemberEpoch,
		InstanceId: orEmpty(in.InstanceID), RackId: orEmpty(in.RackID), RebalanceTimeoutMs: rebalance,
		SubscribedTopicNames: in.SubscribedTopicNames, SubscribedTopicRegex: orEmpty(in.SubscribedTopicRegex),
		ServerAssignor: orEmpty(in.ServerAssignor)}
	if in.MemberEpoch == -2 && in.InstanceID == nil {
		// A static member's temporary leave names its instance id in
		// the gRPC request; Kafka clients may leave it out as unchanged.
		call.InstanceId = r.consumerInstance(in.Group, in.MemberID)
	}
	ids := kafka.Topics(r.deps.Metadata.Load())
	if in.Topics == nil && in.MemberEpoch > 0 {
		call.OwnedPartitions = r.lastOwned(in.Group, in.MemberID)
	}
	for _, t := range in.Topics {
		name, ok := ids.Name(t.TopicID)
		if !ok {
			// A topic deleted meanwhile: the member owns nothing of it
			// that the group still assigns.
			continue
		}
		call.OwnedPartitions = append(call.OwnedPartitions, &groupv1.TopicPartitions{Topic: name, Partitions: t.Partitions})
	}
	resp, err := r.ConsumerGroupHeartbeat(callContext(ctx, req), call)
	switch {
	case err != nil:
		return fail(kafka.ErrorCode(err), errs.From(err))
	case resp.GetError() != nil:
		e := errs.FromProto(resp.GetError())
		return fail(kafka.ErrorCode(e), e)
	}
	out.MemberID = kmsg.StringPtr(resp.GetMemberId())
	out.MemberEpoch = resp.GetMemberEpoch()
	out.HeartbeatIntervalMillis = resp.GetHeartbeatIntervalMs()
	if a := resp.Assignment; a != nil {
		ka := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		ka.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		for _, tp := range a.GetTopicPartitions() {
			id, ok := ids.ID(tp.GetTopic())
			if !ok {
				continue
			}
			kt := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			kt.TopicID, kt.Partitions = id, tp.GetPartitions()
			ka.Topics = append(ka.Topics, kt)
		}
		out.Assignment = &ka
	}
	return kafka.Now(out), nil
}

// lastOwned returns the partitions a consumer-protocol member reported
// owning in its last heartbeat (nil when the group or member is unknown:
// the heartbeat then fails as it would anyway).
func (r *GroupCoordinator) lastOwned(groupID, memberID string) []*groupv1.TopicPartitions {
	s, e := r.shardFor(groupID)
	if e != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(groupID, false)
	if g == nil || g.consumer == nil {
		return nil
	}
	return parseOwnedKey(g.consumer.owned[memberID])
}

// consumerInstance returns the instance id of a consumer-protocol member,
// or "".
func (r *GroupCoordinator) consumerInstance(groupID, memberID string) string {
	s, e := r.shardFor(groupID)
	if e != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(groupID, false)
	if g == nil || g.consumer == nil {
		return ""
	}
	for _, m := range g.consumer.Describe().GetMembers() {
		if m.GetMemberId() == memberID {
			return m.GetGroupInstanceId()
		}
	}
	return ""
}

// parseOwnedKey reads back what ownedKey wrote. Topic names hold no ','
// or ';' (topic names are [a-zA-Z0-9._-]).
func parseOwnedKey(k string) []*groupv1.TopicPartitions {
	var out []*groupv1.TopicPartitions
	for _, t := range strings.Split(k, ";") {
		if t == "" {
			continue
		}
		fields := strings.Split(t, ",")
		tp := &groupv1.TopicPartitions{Topic: fields[0]}
		for _, f := range fields[1:] {
			if p, err := strconv.ParseInt(f, 10, 32); err == nil {
				tp.Partitions = append(tp.Partitions, int32(p))
			}
		}
		out = append(out, tp)
	}
	return out
}

// kafkaConsumerGroupDescribe serves ConsumerGroupDescribe v0-v1. A group
// that does not exist or is a classic group gets GROUP_ID_NOT_FOUND, as in
// Kafka. Members' client id and host are not known to the consumer
// protocol's state here and are left empty.
func (r *GroupCoordinator) kafkaConsumerGroupDescribe(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.ConsumerGroupDescribeRequest)
	out := kmsg.NewPtrConsumerGroupDescribeResponse()
	out.Version = req.Version
	for _, id := range in.Groups {
		if err := r.check(ctx, authz.Describe, authz.Group, id); err != nil {
			og := kmsg.NewConsumerGroupDescribeResponseGroup()
			og.Group, og.ErrorCode, og.ErrorMessage = id, kafka.ErrorCode(err), kafka.ErrorMessage(err)
			out.Groups = append(out.Groups, og)
			continue
		}
		out.Groups = append(out.Groups, r.describeConsumerGroup(id))
	}
	return kafka.Now(out), nil
}

func (r *GroupCoordinator) describeConsumerGroup(id string) kmsg.ConsumerGroupDescribeResponseGroup {
	og := kmsg.NewConsumerGroupDescribeResponseGroup()
	og.Group = id
	fail := func(e *errs.Error) kmsg.ConsumerGroupDescribeResponseGroup {
		og.ErrorCode, og.ErrorMessage = kafka.ErrorCode(e), kafka.ErrorMessage(e)
		return og
	}
	s, e := r.shardFor(id)
	if e != nil {
		return fail(e)
	}
	ids := kafka.Topics(r.deps.Metadata.Load())
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(id, false)
	switch {
	case g == nil:
		return fail(errs.New(errs.GroupIDNotFound, "group %q does not exist", id))
	case g.consumer == nil:
		return fail(errs.New(errs.GroupIDNotFound, "group %q is not a consumer-protocol group; describe it with DescribeGroups", id))
	}
	d := g.consumer.Describe()
	snap := g.consumer.Snapshot()
	og.State, og.Epoch, og.AssignmentEpoch, og.AssignorName = d.GetState(), d.GetEpoch(), snap.TargetEpoch, d.GetProtocol()
	current := map[string]*groupv1.GroupMember{}
	for _, m := range d.GetMembers() {
		current[m.GetMemberId()] = m
	}
	for _, ms := range snap.Members {
		om := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		om.MemberID, om.InstanceID, om.RackID = ms.ID, orNull(ms.InstanceID), orNull(ms.Rack)
		om.MemberType = consumerMemberType
		om.SubscribedTopics = append([]string{}, ms.TopicNames...)
		om.SubscribedTopicRegex = orNull(ms.Regex)
		if m := current[ms.ID]; m != nil {
			om.MemberEpoch = m.GetMemberEpoch()
			om.Assignment = kafkaAssignment(ids, m.GetAssignment().GetTopicPartitions())
		}
		var target []*groupv1.TopicPartitions
		for _, topic := range sortedKeys(snap.Target[ms.ID]) {
			target = append(target, &groupv1.TopicPartitions{Topic: topic, Partitions: snap.Target[ms.ID][topic]})
		}
		om.TargetAssignment = kafkaAssignment(ids, target)
		og.Members = append(og.Members, om)
	}
	return og
}

// kafkaAssignment converts an assignment by topic name into Kafka's by
// topic id; topics without an id (deleted) are left out.
func kafkaAssignment(ids *kafka.TopicIndex, tps []*groupv1.TopicPartitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	for _, tp := range tps {
		id, ok := ids.ID(tp.GetTopic())
		if !ok {
			continue
		}
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Topic = id, tp.GetTopic()
		at.Partitions = append([]int32{}, tp.GetPartitions()...)
		sort.Slice(at.Partitions, func(i, j int) bool { return at.Partitions[i] < at.Partitions[j] })
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	return a
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
