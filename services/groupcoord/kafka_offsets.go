package groupcoord

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/kafka"
)

// commitTopic is one topic of a Kafka offset commit, resolved to a name:
// ok is false when the request named it by a topic id no topic has.
type commitTopic struct {
	name string
	ok   bool
}

// kafkaOffsetCommit serves OffsetCommit v2-v10 (v10 names topics by id).
// Retention fields of v2-v4 are ignored: offsets expire by the group's
// offsets.retention.minutes once it is empty, as Kafka 2.1+ does when
// none is given.
func (r *GroupCoordinator) kafkaOffsetCommit(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.OffsetCommitRequest)
	ids := kafka.Topics(r.deps.Metadata.Load())
	topics := make([]commitTopic, len(in.Topics))
	call := &groupv1.OffsetCommitRequest{GroupId: in.Group, GenerationIdOrMemberEpoch: in.Generation, MemberId: in.MemberID,
		GroupInstanceId: orEmpty(in.InstanceID)}
	for i, t := range in.Topics {
		ct := commitTopic{name: t.Topic, ok: true}
		if req.Version >= 10 {
			ct.name, ct.ok = ids.Name(t.TopicID)
		}
		topics[i] = ct
		if !ct.ok {
			continue
		}
		for _, p := range t.Partitions {
			epoch := p.LeaderEpoch
			call.Partitions = append(call.Partitions, &groupv1.OffsetCommitPartition{Topic: ct.name, Partition: p.Partition,
				Offset: p.Offset, LeaderEpoch: &epoch, Metadata: orEmpty(p.Metadata)})
		}
	}
	version := req.Version
	build := func(codes []int16, all int16) kmsg.Response {
		out := kmsg.NewPtrOffsetCommitResponse()
		out.Version = version
		k := 0
		for i, t := range in.Topics {
			ot := kmsg.NewOffsetCommitResponseTopic()
			ot.Topic, ot.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetCommitResponseTopicPartition()
				op.Partition = p.Partition
				switch {
				case !topics[i].ok:
					op.ErrorCode = kafkaUnknownTopicID
				case all != 0:
					op.ErrorCode = all
				default:
					op.ErrorCode = codes[k]
					k++
				}
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	}
	if len(call.Partitions) == 0 {
		// Nothing to store (an empty commit, or only unknown topic ids):
		// Kafka answers such a request without touching the group.
		return kafka.Now(build(nil, 0)), nil
	}
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		resp, err := r.OffsetCommit(callContext(wctx, req), call)
		if err != nil {
			return build(nil, kafka.ErrorCode(err))
		}
		codes := make([]int16, len(resp.GetResults()))
		for i, res := range resp.GetResults() {
			codes[i] = protoCode(res.GetError())
		}
		return build(codes, 0)
	}}, nil
}

// fetchGroup is one group of an OffsetFetch, as the gRPC call takes it.
// all asks for every committed offset (a null topic list); none for no
// topic at all (an empty one), which still checks the group.
type fetchGroup struct {
	call *groupv1.OffsetFetchRequest
	all  bool
	none bool
	// unknownIDs are topic ids (v10) no topic has, with their partitions.
	unknownIDs map[[16]byte][]int32
}

// fetchedTopic is one topic of an OffsetFetch answer.
type fetchedTopic struct {
	name       string
	partitions []*groupv1.OffsetFetchPartition
}

// groupFetched regroups an OffsetFetch answer by topic, in the order topics
// first appear.
func groupFetched(parts []*groupv1.OffsetFetchPartition) []fetchedTopic {
	var out []fetchedTopic
	at := map[string]int{}
	for _, p := range parts {
		i, ok := at[p.GetTopic()]
		if !ok {
			i = len(out)
			at[p.GetTopic()] = i
			out = append(out, fetchedTopic{name: p.GetTopic()})
		}
		out[i].partitions = append(out[i].partitions, p)
	}
	return out
}

// kafkaOffsetFetch serves OffsetFetch v1-v10: one group before v8, any
// number of groups from v8 on (each answered on its own: a group another
// node coordinates gets NOT_COORDINATOR alone), the consumer protocol's
// member id and epoch from v9, topic ids from v10. require_stable (v7+)
// answers UNSTABLE_OFFSET_COMMIT for offsets a transaction holds.
func (r *GroupCoordinator) kafkaOffsetFetch(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.OffsetFetchRequest)
	ids := kafka.Topics(r.deps.Metadata.Load())
	var groups []fetchGroup
	if req.Version < 8 {
		fg := fetchGroup{call: &groupv1.OffsetFetchRequest{GroupId: in.Group, RequireStable: in.RequireStable, MemberEpoch: -1},
			all: in.Topics == nil, none: in.Topics != nil && len(in.Topics) == 0}
		for _, t := range in.Topics {
			for _, p := range t.Partitions {
				fg.call.Partitions = append(fg.call.Partitions, &commonv1.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
		groups = append(groups, fg)
	}
	for _, g := range in.Groups {
		fg := fetchGroup{call: &groupv1.OffsetFetchRequest{GroupId: g.Group, RequireStable: in.RequireStable,
			MemberId: orEmpty(g.MemberID), MemberEpoch: g.MemberEpoch},
			all: g.Topics == nil, none: g.Topics != nil && len(g.Topics) == 0}
		for _, t := range g.Topics {
			name := t.Topic
			if req.Version >= 10 {
				var ok bool
				if name, ok = ids.Name(t.TopicID); !ok {
					if fg.unknownIDs == nil {
						fg.unknownIDs = map[[16]byte][]int32{}
					}
					fg.unknownIDs[t.TopicID] = append(fg.unknownIDs[t.TopicID], t.Partitions...)
					continue
				}
			}
			for _, p := range t.Partitions {
				fg.call.Partitions = append(fg.call.Partitions, &commonv1.TopicPartition{Topic: name, Partition: p})
			}
		}
		if len(fg.call.Partitions) == 0 && !fg.all {
			fg.none = true
		}
		groups = append(groups, fg)
	}
	cctx := callContext(ctx, req)
	answers := make([]*groupv1.OffsetFetchResponse, len(groups))
	codes := make([]int16, len(groups))
	for i, fg := range groups {
		resp, err := r.OffsetFetch(cctx, fg.call)
		if err != nil {
			codes[i] = kafka.ErrorCode(err)
			continue
		}
		codes[i] = protoCode(resp.GetError())
		answers[i] = resp
		if fg.none {
			answers[i] = &groupv1.OffsetFetchResponse{}
		}
	}
	out := kmsg.NewPtrOffsetFetchResponse()
	out.Version = req.Version
	if req.Version < 8 {
		fg := groups[0]
		if req.Version >= 2 {
			out.ErrorCode = codes[0]
		}
		var parts []*groupv1.OffsetFetchPartition
		if codes[0] == 0 {
			parts = answers[0].GetPartitions()
		} else if req.Version < 2 {
			// v0-v1 have no group error: each partition carries it.
			for _, p := range fg.call.Partitions {
				parts = append(parts, &groupv1.OffsetFetchPartition{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: -1, LeaderEpoch: -1})
			}
		}
		for _, t := range groupFetched(parts) {
			ot := kmsg.NewOffsetFetchResponseTopic()
			ot.Topic = t.name
			for _, p := range t.partitions {
				op := kmsg.NewOffsetFetchResponseTopicPartition()
				op.Partition, op.Offset, op.LeaderEpoch = p.GetPartition(), p.GetOffset(), p.GetLeaderEpoch()
				op.Metadata = kmsg.StringPtr(p.GetMetadata())
				op.ErrorCode = protoCode(p.GetError())
				if codes[0] != 0 {
					op.ErrorCode = codes[0]
				}
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return kafka.Now(out), nil
	}
	for i, fg := range groups {
		og := kmsg.NewOffsetFetchResponseGroup()
		og.Group = fg.call.GetGroupId()
		og.ErrorCode = codes[i]
		if codes[i] == 0 {
			for _, t := range groupFetched(answers[i].GetPartitions()) {
				ot := kmsg.NewOffsetFetchResponseGroupTopic()
				ot.Topic = t.name
				if req.Version >= 10 {
					id, ok := ids.ID(t.name)
					if !ok {
						continue // a deleted topic's offsets have no id to name them by
					}
					ot.TopicID = id
				}
				for _, p := range t.partitions {
					op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					op.Partition, op.Offset, op.LeaderEpoch = p.GetPartition(), p.GetOffset(), p.GetLeaderEpoch()
					op.Metadata = kmsg.StringPtr(p.GetMetadata())
					op.ErrorCode = protoCode(p.GetError())
					ot.Partitions = append(ot.Partitions, op)
				}
				og.Topics = append(og.Topics, ot)
			}
			for id, ps := range fg.unknownIDs {
				ot := kmsg.NewOffsetFetchResponseGroupTopic()
				ot.TopicID = id
				for _, p := range ps {
					op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					op.Partition, op.Offset, op.ErrorCode = p, -1, kafkaUnknownTopicID
					ot.Partitions = append(ot.Partitions, op)
				}
				og.Topics = append(og.Topics, ot)
			}
		}
		out.Groups = append(out.Groups, og)
	}
	return kafka.Now(out), nil
}

// kafkaOffsetDelete serves OffsetDelete v0.
func (r *GroupCoordinator) kafkaOffsetDelete(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.OffsetDeleteRequest)
	call := &groupv1.OffsetDeleteRequest{GroupId: in.Group}
	for _, t := range in.Topics {
		for _, p := range t.Partitions {
			call.Partitions = append(call.Partitions, &commonv1.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	version := req.Version
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		out := kmsg.NewPtrOffsetDeleteResponse()
		out.Version = version
		resp, err := r.OffsetDelete(callContext(wctx, req), call)
		switch {
		case err != nil:
			out.ErrorCode = kafka.ErrorCode(err)
			return out
		case resp.GetError() != nil:
			out.ErrorCode = protoCode(resp.GetError())
			return out
		}
		k := 0
		for _, t := range in.Topics {
			ot := kmsg.NewOffsetDeleteResponseTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetDeleteResponseTopicPartition()
				op.Partition = p.Partition
				if k < len(resp.GetResults()) {
					op.ErrorCode = protoCode(resp.GetResults()[k].GetError())
				}
				k++
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	}}, nil
}

// kafkaTxnOffsetCommit serves TxnOffsetCommit v0-v4: offsets committed in
// a transaction, pending until its marker (txnoffsets.go). Before v3 the
// request carries no group metadata, so the member checks are skipped as
// Kafka skips them.
func (r *GroupCoordinator) kafkaTxnOffsetCommit(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.TxnOffsetCommitRequest)
	call := &groupv1.TxnOffsetCommitRequest{TransactionalId: in.TransactionalID, GroupId: in.Group, ProducerId: in.ProducerID,
		ProducerEpoch: int32(in.ProducerEpoch), GenerationIdOrMemberEpoch: in.Generation, MemberId: in.MemberID,
		GroupInstanceId: orEmpty(in.InstanceID)}
	for _, t := range in.Topics {
		for _, p := range t.Partitions {
			epoch := p.LeaderEpoch
			call.Partitions = append(call.Partitions, &groupv1.OffsetCommitPartition{Topic: t.Topic, Partition: p.Partition,
				Offset: p.Offset, LeaderEpoch: &epoch, Metadata: orEmpty(p.Metadata)})
		}
	}
	version := req.Version
	build := func(codes []int16, all int16) kmsg.Response {
		out := kmsg.NewPtrTxnOffsetCommitResponse()
		out.Version = version
		k := 0
		for _, t := range in.Topics {
			ot := kmsg.NewTxnOffsetCommitResponseTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				op.Partition = p.Partition
				if all != 0 {
					op.ErrorCode = all
				} else if k < len(codes) {
					op.ErrorCode = codes[k]
				}
				k++
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	}
	if len(call.Partitions) == 0 {
		return kafka.Now(build(nil, 0)), nil
	}
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		resp, err := r.TxnOffsetCommit(callContext(wctx, req), call)
		if err != nil {
			return build(nil, kafka.ErrorCode(err))
		}
		codes := make([]int16, len(resp.GetResults()))
		for i, res := range resp.GetResults() {
			codes[i] = protoCode(res.GetError())
		}
		return build(codes, 0)
	}}, nil
}
