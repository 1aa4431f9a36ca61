package storagenode

import (
	"context"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/replica"
)

// ListOffsets looks up earliest, latest, by-timestamp and max-timestamp
// offsets on the leader. LATEST is the high watermark; a new leader answers
// OFFSET_NOT_AVAILABLE until it has committed a record in its own epoch,
// since until then its high watermark may trail the true one.
func (r *StorageNode) ListOffsets(ctx context.Context, req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
	out := &storagev1.ListOffsetsResponse{}
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Describe, authz.Topic)
	for _, lp := range req.GetPartitions() {
		res := &storagev1.ListOffsetsResult{Topic: lp.GetTopic(), Partition: lp.GetPartition(), Offset: -1, TimestampMs: -1, LeaderEpoch: -1}
		out.Results = append(out.Results, res)
		err := topics.Check(lp.GetTopic())
		var part *replica.Partition
		if err == nil {
			part, err = r.partition(lp.GetTopic(), lp.GetPartition())
		}
		if err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		v, err := part.LeaderView(lp.CurrentLeaderEpoch)
		if err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		switch lp.GetSpec() {
		case storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
			res.Offset = v.LogStart
		case storagev1.OffsetSpec_OFFSET_SPEC_LATEST:
			if !v.Committed {
				res.Error = errs.New(errs.OffsetNotAvailable, "%s-%d: the new leader has not committed in its epoch yet; retry", lp.GetTopic(), lp.GetPartition()).Proto()
				continue
			}
			res.Offset, res.LeaderEpoch = v.HighWatermark, v.LeaderEpoch
			if req.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
				res.Offset = v.LastStable
			}
		case storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			off, ts, found, err := part.Log().OffsetForTimestamp(lp.GetTimestampMs())
			if err != nil {
				res.Error = errs.ItemError(err)
				continue
			}
			if found && off < v.HighWatermark {
				res.Offset, res.TimestampMs = off, ts
			}
		case storagev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP:
			off, ts, found, err := part.Log().MaxTimestamp()
			if err != nil {
				res.Error = errs.ItemError(err)
				continue
			}
			bound := v.HighWatermark
			if req.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
				bound = v.LastStable
			}
			// Only a record a consumer can read yet.
			if found && off < bound {
				res.Offset, res.TimestampMs = off, ts
			}
		default:
			res.Error = errs.New(errs.Unimplemented, "offset spec %v is not supported yet", lp.GetSpec()).Proto()
		}
	}
	return out, nil
}

// OffsetForLeaderEpoch returns where an epoch ends in the leader's log, so
// a consumer can detect that the log was truncated under it (KIP-320).
func (r *StorageNode) OffsetForLeaderEpoch(ctx context.Context, req *storagev1.OffsetForLeaderEpochRequest) (*storagev1.OffsetForLeaderEpochResponse, error) {
	out := &storagev1.OffsetForLeaderEpochResponse{}
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Describe, authz.Topic)
	for _, lp := range req.GetPartitions() {
		res := &storagev1.OffsetForLeaderEpochResult{Topic: lp.GetTopic(), Partition: lp.GetPartition()}
		out.Results = append(out.Results, res)
		err := topics.Check(lp.GetTopic())
		var part *replica.Partition
		if err == nil {
			part, err = r.partition(lp.GetTopic(), lp.GetPartition())
		}
		if err == nil {
			_, err = part.LeaderView(lp.CurrentLeaderEpoch)
		}
		if err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		e, end := part.Log().EndOffsetForEpoch(lp.GetLeaderEpoch())
		res.End = &storagev1.EpochEndOffset{Epoch: e, EndOffset: end}
	}
	return out, nil
}

// DeleteRecords moves partitions' log start offsets on the leader;
// followers follow on their fetch streams.
func (r *StorageNode) DeleteRecords(ctx context.Context, req *storagev1.DeleteRecordsRequest) (*storagev1.DeleteRecordsResponse, error) {
	out := &storagev1.DeleteRecordsResponse{}
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Delete, authz.Topic)
	for _, dp := range req.GetPartitions() {
		res := &storagev1.DeleteRecordsResult{Topic: dp.GetTopic(), Partition: dp.GetPartition(), LowWatermark: -1}
		out.Results = append(out.Results, res)
		err := topics.Check(dp.GetTopic())
		var part *replica.Partition
		if err == nil {
			part, err = r.partition(dp.GetTopic(), dp.GetPartition())
		}
		if err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		low, err := part.DeleteRecords(dp.GetOffset())
		res.Error, res.LowWatermark = errs.ItemError(err), low
	}
	return out, nil
}
