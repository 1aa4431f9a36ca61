package groupcoord

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// RegisterKafkaElsewhere registers the group API keys, at the versions the
// role serves, on the mux of a process that does not run the
// group-coordinator role. Every Kafka broker serves every group API, and
// clients decide what the cluster supports from whichever broker they
// asked: franz-go opts into the consumer protocol (KIP-848) only when a
// broker it talked to advertises ConsumerGroupHeartbeat v1, and otherwise
// falls back to the classic protocol for good. Such a process answers
// every group request NOT_COORDINATOR, so the client looks the
// coordinator up (FindCoordinator, which every process answers) and goes
// there; ListGroups lists nothing, as no group is coordinated here.
func RegisterKafkaElsewhere(m *kafka.Mux, nodeID int32) {
	e := errs.New(errs.NotCoordinator, "node %d does not run the group-coordinator role; find the group's coordinator with FindCoordinator", nodeID)
	for key, v := range kafkaVersions {
		m.Handle(int16(key), v[0], v[1], func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
			resp, err := notCoordinator(req, e)
			if err != nil {
				return kafka.Reply{}, err
			}
			resp.SetVersion(req.Version)
			return kafka.Now(resp), nil
		})
	}
}

// notCoordinator answers a group request with e wherever the response
// carries an error: for the whole request, or for each item of it.
func notCoordinator(req *kafka.Request, e *errs.Error) (kmsg.Response, error) {
	code, msg := kafka.ErrorCode(e), kafka.ErrorMessage(e)
	switch in := req.Msg.(type) {
	case *kmsg.JoinGroupRequest:
		out := kmsg.NewPtrJoinGroupResponse()
		out.ErrorCode, out.Generation, out.MemberID = code, kafkaUnknownGeneration, in.MemberID
		return out, nil
	case *kmsg.SyncGroupRequest:
		out := kmsg.NewPtrSyncGroupResponse()
		out.ErrorCode = code
		return out, nil
	case *kmsg.HeartbeatRequest:
		out := kmsg.NewPtrHeartbeatResponse()
		out.ErrorCode = code
		return out, nil
	case *kmsg.LeaveGroupRequest:
		out := kmsg.NewPtrLeaveGroupResponse()
		out.ErrorCode = code
		return out, nil
	case *kmsg.OffsetCommitRequest:
		out := kmsg.NewPtrOffsetCommitResponse()
		for _, t := range in.Topics {
			ot := kmsg.NewOffsetCommitResponseTopic()
			ot.Topic, ot.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetCommitResponseTopicPartition()
				op.Partition, op.ErrorCode = p.Partition, code
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return out, nil
	case *kmsg.OffsetFetchRequest:
		out := kmsg.NewPtrOffsetFetchResponse()
		out.ErrorCode = code
		for _, t := range in.Topics {
			ot := kmsg.NewOffsetFetchResponseTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetFetchResponseTopicPartition()
				op.Partition, op.Offset, op.ErrorCode = p, -1, code
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		for _, g := range in.Groups {
			og := kmsg.NewOffsetFetchResponseGroup()
			og.Group, og.ErrorCode = g.Group, code
			out.Groups = append(out.Groups, og)
		}
		return out, nil
	case *kmsg.OffsetDeleteRequest:
		out := kmsg.NewPtrOffsetDeleteResponse()
		out.ErrorCode = code
		return out, nil
	case *kmsg.TxnOffsetCommitRequest:
		out := kmsg.NewPtrTxnOffsetCommitResponse()
		for _, t := range in.Topics {
			ot := kmsg.NewTxnOffsetCommitResponseTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				op.Partition, op.ErrorCode = p.Partition, code
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return out, nil
	case *kmsg.ListGroupsRequest:
		return kmsg.NewPtrListGroupsResponse(), nil
	case *kmsg.DescribeGroupsRequest:
		out := kmsg.NewPtrDescribeGroupsResponse()
		for _, id := range in.Groups {
			og := kmsg.NewDescribeGroupsResponseGroup()
			og.Group, og.ErrorCode, og.ErrorMessage = id, code, msg
			out.Groups = append(out.Groups, og)
		}
		return out, nil
	case *kmsg.DeleteGroupsRequest:
		out := kmsg.NewPtrDeleteGroupsResponse()
		for _, id := range in.Groups {
			og := kmsg.NewDeleteGroupsResponseGroup()
			og.Group, og.ErrorCode, og.ErrorMessage = id, code, msg
			out.Groups = append(out.Groups, og)
		}
		return out, nil
	case *kmsg.ConsumerGroupHeartbeatRequest:
		out := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		out.ErrorCode, out.ErrorMessage = code, msg
		return out, nil
	case *kmsg.ConsumerGroupDescribeRequest:
		out := kmsg.NewPtrConsumerGroupDescribeResponse()
		for _, id := range in.Groups {
			og := kmsg.NewConsumerGroupDescribeResponseGroup()
			og.Group, og.ErrorCode, og.ErrorMessage = id, code, msg
			out.Groups = append(out.Groups, og)
		}
		return out, nil
	}
	// The mux routes only the keys registered above here.
	return nil, fmt.Errorf("groups: no NOT_COORDINATOR answer for API key %d", req.Key)
}
