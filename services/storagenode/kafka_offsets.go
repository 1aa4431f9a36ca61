package storagenode

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

// optEpoch converts Kafka's "current leader epoch, -1 for none" to the
// optional field of the gRPC requests.
func optEpoch(e int32) *int32 {
	if e < 0 {
		return nil
	}
	return &e
}

// epochAt returns the leader epoch of the batch that holds offset in a
// log, -1 if the epoch cache cannot place it.
func epochAt(l *storage.Log, offset int64) int32 {
	epoch := int32(-1)
	for _, e := range l.Epochs() {
		if e.StartOffset > offset {
			break
		}
		epoch = e.Epoch
	}
	return epoch
}

// Kafka's special ListOffsets timestamps.
const (
	kafkaLatest       = -1
	kafkaEarliest     = -2
	kafkaMaxTimestamp = -3 // v7+ (KIP-734)
	// kafkaEarliestLocal is the first offset on local disk (v8+, KIP-405):
	// with no tiered storage, the earliest.
	kafkaEarliestLocal = -4
)

// kafkaListOffsets serves ListOffsets (key 2) with the gRPC ListOffsets:
// -2 earliest (and -4, earliest on local disk, the same without tiered
// storage), -1 latest (the last stable offset for read_committed), -3 the
// record with the largest timestamp, and lookups by timestamp; each answer carries the leader epoch of the offset
// it names, so a consumer that resets can check it for truncation.
func (r *StorageNode) kafkaListOffsets(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.ListOffsetsRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("list offsets: unexpected message %T", kr.Msg)
	}
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Version = req.Version
	iso := commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if req.IsolationLevel == 1 {
		iso = commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	good := &storagev1.ListOffsetsRequest{IsolationLevel: iso}
	type slot struct {
		rp  *kmsg.ListOffsetsResponseTopicPartition
		idx int // index into good.Partitions, -1 when refused
	}
	var slots []slot
	seen := map[replica.TP]bool{}
	for _, t := range req.Topics {
		resp.Topics = append(resp.Topics, kmsg.NewListOffsetsResponseTopic())
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Offset, rp.Timestamp, rp.LeaderEpoch = p.Partition, -1, -1, -1
			lp := &storagev1.ListOffsetsPartition{Topic: t.Topic, Partition: p.Partition, CurrentLeaderEpoch: optEpoch(p.CurrentLeaderEpoch), TimestampMs: p.Timestamp}
			switch {
			case p.Timestamp == kafkaEarliest, p.Timestamp == kafkaEarliestLocal && req.Version >= 8:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
			case p.Timestamp == kafkaMaxTimestamp && req.Version >= 7:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP
			case p.Timestamp == kafkaLatest:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_LATEST
			case p.Timestamp >= 0:
				lp.Spec = storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP
			}
			var err error
			if lp.Spec == storagev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED {
				err = errs.Invalid(errs.InvalidRequest, "timestamp", "%d is not a timestamp or a spec of ListOffsets v%d", p.Timestamp, req.Version)
			} else {
				err = validateListOffsets(&storagev1.ListOffsetsRequest{IsolationLevel: iso, Partitions: []*storagev1.ListOffsetsPartition{lp}})
			}
			tp := replica.TP{Topic: t.Topic, Partition: p.Partition}
			if err == nil && seen[tp] {
				err = errs.Invalid(errs.InvalidRequest, "topics", "partition %s appears more than once in the request", tp)
			}
			seen[tp] = true
			if err != nil {
				rp.ErrorCode = kafka.ErrorCode(err)
				slots = append(slots, slot{rp: rp, idx: -1})
				continue
			}
			slots = append(slots, slot{rp: rp, idx: len(good.Partitions)})
			good.Partitions = append(good.Partitions, lp)
		}
	}
	if len(good.Partitions) > 0 {
		out, err := r.ListOffsets(ctx, good)
		if err != nil {
			return kafka.Reply{}, fmt.Errorf("list offsets: %w", err)
		}
		for _, s := range slots {
			if s.idx < 0 {
				continue
			}
			res, lp := out.GetResults()[s.idx], good.Partitions[s.idx]
			s.rp.ErrorCode, _ = itemCode(res.GetError())
			if res.GetError() != nil {
				continue
			}
			s.rp.Offset, s.rp.Timestamp, s.rp.LeaderEpoch = res.GetOffset(), res.GetTimestampMs(), res.GetLeaderEpoch()
			if part, ok := r.replicas.Get(replica.TP{Topic: lp.GetTopic(), Partition: lp.GetPartition()}); ok && s.rp.Offset >= 0 &&
				lp.GetSpec() != storagev1.OffsetSpec_OFFSET_SPEC_LATEST {
				s.rp.LeaderEpoch = epochAt(part.Log(), s.rp.Offset)
			}
		}
	}
	return kafka.Now(resp), nil
}

// kafkaOffsetForLeaderEpoch serves OffsetForLeaderEpoch (key 23): where
// an epoch ends in the leader's log (KIP-320), for a consumer's truncation
// check after a leader change.
func (r *StorageNode) kafkaOffsetForLeaderEpoch(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.OffsetForLeaderEpochRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("offset for leader epoch: unexpected message %T", kr.Msg)
	}
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
			lp := &storagev1.OffsetForLeaderEpochPartition{Topic: t.Topic, Partition: p.Partition, CurrentLeaderEpoch: optEpoch(p.CurrentLeaderEpoch), LeaderEpoch: p.LeaderEpoch}
			one := &storagev1.OffsetForLeaderEpochRequest{Partitions: []*storagev1.OffsetForLeaderEpochPartition{lp}}
			// Partitions are looked up one at a time, so a bad one is
			// answered alone (duplicates just get the same answer twice).
			out, err := (*storagev1.OffsetForLeaderEpochResponse)(nil), validateOffsetForLeaderEpoch(one)
			if err == nil {
				out, err = r.OffsetForLeaderEpoch(ctx, one)
			}
			switch {
			case err != nil:
				rp.ErrorCode = kafka.ErrorCode(err)
			case out.GetResults()[0].GetError() != nil:
				rp.ErrorCode, _ = itemCode(out.GetResults()[0].GetError())
			default:
				end := out.GetResults()[0].GetEnd()
				rp.LeaderEpoch, rp.EndOffset = end.GetEpoch(), end.GetEndOffset()
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return kafka.Now(resp), nil
}

// kafkaDeleteRecords serves DeleteRecords (key 21): moves log start
// offsets on the leader (-1: up to the high watermark); followers follow.
func (r *StorageNode) kafkaDeleteRecords(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.DeleteRecordsRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("delete records: unexpected message %T", kr.Msg)
	}
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	resp.Version = req.Version
	seen := map[replica.TP]bool{}
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			one := &storagev1.DeleteRecordsRequest{TimeoutMs: max(req.TimeoutMillis, 0),
				Partitions: []*storagev1.DeleteRecordsPartition{{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset}}}
			err := validateDeleteRecords(one)
			tp := replica.TP{Topic: t.Topic, Partition: p.Partition}
			if err == nil && seen[tp] {
				err = errs.Invalid(errs.InvalidRequest, "topics", "partition %s appears more than once in the request", tp)
			}
			seen[tp] = true
			var out *storagev1.DeleteRecordsResponse
			if err == nil {
				out, err = r.DeleteRecords(ctx, one)
			}
			switch {
			case err != nil:
				rp.ErrorCode = kafka.ErrorCode(err)
			case out.GetResults()[0].GetError() != nil:
				rp.ErrorCode, _ = itemCode(out.GetResults()[0].GetError())
			default:
				rp.LowWatermark = out.GetResults()[0].GetLowWatermark()
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return kafka.Now(resp), nil
}
