package client

import (
	"context"
	"fmt"
	"sort"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// TxnOffsetCommitRequest is what Client.TxnOffsetCommit commits: a
// consumer group's positions, in the open transaction of a transactional
// producer (after AddOffsetsToTxn for the group).
type TxnOffsetCommitRequest struct {
	// TransactionalID, ProducerID and ProducerEpoch are the producer's.
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// GroupID is the group whose offsets these are.
	GroupID string
	// GenerationID, MemberID and GroupInstanceID are the group metadata of
	// the consumer that read the records (KIP-447): the coordinator fences
	// the commit as it would that consumer's own OffsetCommit. Generation
	// -1 with no member id skips the member check.
	GenerationID    int32
	MemberID        string
	GroupInstanceID string
	// Offsets are the next offsets to consume, by partition.
	Offsets map[TopicPartition]int64
}

// TxnOffsetCommit commits offsets in a transaction (the group
// coordinator's TxnOffsetCommit): they become the group's committed offsets
// when the transaction commits and are dropped if it aborts; until then
// OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them.
//
// The group's coordinator is found as for other group calls. Partitions
// that fail with NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS or REQUEST_TIMED_OUT are sent again (to the new coordinator) until ctx's deadline, or
// Config.RequestTimeout if ctx has none; writing the same offsets twice in
// a transaction is harmless. Any other error of a partition is final and
// returned, wrapped with the partition (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH or
// STALE_MEMBER_EPOCH: the consumer is no longer current and the
// transaction should abort; INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE:
// the producer was fenced or its transaction is over). When every
// partition failed alike the error is that one error.
func (c *Client) TxnOffsetCommit(ctx context.Context, req TxnOffsetCommitRequest) error {
	if req.GroupID == "" {
		return errs.Invalid(errs.InvalidGroupID, "GroupID", "is required")
	}
	if len(req.Offsets) == 0 {
		return nil
	}
	left := map[TopicPartition]int64{}
	for tp, off := range req.Offsets {
		left[tp] = off
	}
	var failed []error
	err := c.onGroupCoordinator(ctx, req.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r := &groupv1.TxnOffsetCommitRequest{TransactionalId: req.TransactionalID, GroupId: req.GroupID, ProducerId: req.ProducerID,
			ProducerEpoch: int32(req.ProducerEpoch), GenerationIdOrMemberEpoch: req.GenerationID, MemberId: req.MemberID,
			GroupInstanceId: req.GroupInstanceID}
		for _, tp := range sortedTopicPartitions(left) {
			r.Partitions = append(r.Partitions, &groupv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: left[tp]})
		}
		resp, err := gc.TxnOffsetCommit(ctx, r)
		if err != nil {
			return nil, err
		}
		// The partitions answered for good leave the request; a retriable
		// answer goes back to onCoordinator, which retries the rest.
		var retry *edpb.Error
		for _, res := range resp.GetResults() {
			tp := TopicPartition{res.GetTopic(), res.GetPartition()}
			e := errs.FromProto(res.GetError())
			switch {
			case e == nil:
				delete(left, tp)
			case txnOffsetRetriable(e.Code):
				if retry == nil {
					retry = res.GetError()
				}
			default:
				delete(left, tp)
				failed = append(failed, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, e))
			}
		}
		return retry, nil
	})
	if err != nil {
		return fmt.Errorf("committing offsets of group %q in transaction %q: %w", req.GroupID, req.TransactionalID, err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("committing offsets of group %q in transaction %q: %w", req.GroupID, req.TransactionalID, firstSame(failed))
	}
	return nil
}

// txnOffsetRetriable says whether a partition's TxnOffsetCommit answer is
// worth sending again: the coordinator moved or is loading
// (COORDINATOR_NOT_AVAILABLE also means the write did not reach its
// replicas), or the write's outcome is unknown.
func txnOffsetRetriable(c errs.Code) bool {
	return coordinatorMoved(c) || c == errs.RequestTimedOut
}

func sortedTopicPartitions(m map[TopicPartition]int64) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
