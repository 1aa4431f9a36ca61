package storagenode

import (
	"context"
	"time"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

// fenceWait bounds how long a leader waits for its metadata to reach a
// coordinator's revision; past it the coordinator retries.
const fenceWait = 5 * time.Second

// checkCoordinator checks that fence names the coordinator of an internal
// topic's partition, in metadata at least as new as the fence's revision.
// Called with the partition's coordinator lock held.
func (r *StorageNode) checkCoordinator(ctx context.Context, topic string, partition int32, fence *storagev1.CoordinatorFence) error {
	coordRole := metadata.CoordinatorRole(topic)
	if fence == nil {
		return errs.Invalid(errs.InvalidRequest, "coordinator", "topic %q is internal: only its %s writes it", topic, coordRole)
	}
	img := r.deps.Metadata.Load()
	if img.Revision < fence.GetMetadataRevision() {
		wctx, cancel := context.WithTimeout(ctx, fenceWait)
		var err error
		img, err = r.deps.Metadata.WaitFor(wctx, func(i *metadata.Image) bool { return i.Revision >= fence.GetMetadataRevision() })
		cancel()
		if err != nil {
			return errs.New(errs.NodeNotReady, "node %d has not seen metadata revision %d yet; retry", r.replicas.NodeID(), fence.GetMetadataRevision())
		}
	}
	b, _ := img.CoordinatorOf(topic, partition, coordRole)
	if b == nil || b.GetId() != fence.GetNodeId() {
		return errs.New(errs.NotCoordinator, "node %d does not coordinate %s-%d at metadata revision %d", fence.GetNodeId(), topic, partition, img.Revision)
	}
	return nil
}

// appendInternal appends a coordinator's batches to an internal topic:
// the check and the append are one step under the partition's coordinator
// lock, so a fence taken after it covers the write.
func (r *StorageNode) appendInternal(ctx context.Context, part *replica.Partition, pp *storagev1.ProducePartition, fence *storagev1.CoordinatorFence, batches []byte, acks replica.Acks) (storage.AppendResult, int32, error) {
	part.LockCoordinator()
	defer part.UnlockCoordinator()
	if err := r.checkCoordinator(ctx, pp.GetTopic(), pp.GetPartition(), fence); err != nil {
		return storage.AppendResult{}, 0, err
	}
	// A coordinator that took the partition over later has fenced it: this
	// writer's state predates that coordinator's writes, even if metadata
	// names it the coordinator again now (it lost and regained the
	// partition without reloading).
	if f := part.CoordinatorFence(); fence.GetMetadataRevision() < f {
		return storage.AppendResult{}, 0, errs.New(errs.NotCoordinator, "node %d's hold on %s-%d (metadata revision %d) predates a later coordinator's (revision %d); it must reload",
			fence.GetNodeId(), pp.GetTopic(), pp.GetPartition(), fence.GetMetadataRevision(), f)
	}
	return part.Append(batches, acks, pp.CurrentLeaderEpoch, record.FromCoordinator)
}

// FenceCoordinator makes the caller the only coordinator whose writes this
// leader accepts for the partition, and returns the log end to replay to.
func (r *StorageNode) FenceCoordinator(ctx context.Context, req *storagev1.FenceCoordinatorRequest) (*storagev1.FenceCoordinatorResponse, error) {
	if err := authz.CheckInternal(ctx, r.deps.Authorizer(), "FenceCoordinator", fenceCallers...); err != nil {
		return nil, err
	}
	if metadata.CoordinatorRole(req.GetTopic()) == "" {
		return nil, errs.Invalid(errs.InvalidRequest, "topic", "topic %q is not an internal coordinator topic", req.GetTopic())
	}
	part, err := r.partition(req.GetTopic(), req.GetPartition())
	if err != nil {
		return nil, err
	}
	part.LockCoordinator()
	defer part.UnlockCoordinator()
	if err := r.checkCoordinator(ctx, req.GetTopic(), req.GetPartition(), req.GetCoordinator()); err != nil {
		return nil, err
	}
	if f := part.CoordinatorFence(); req.GetCoordinator().GetMetadataRevision() < f {
		return nil, errs.New(errs.NotCoordinator, "a coordinator fenced %s-%d at metadata revision %d, after %d", req.GetTopic(), req.GetPartition(), f, req.GetCoordinator().GetMetadataRevision())
	}
	part.RaiseCoordinatorFence(req.GetCoordinator().GetMetadataRevision())
	v, err := part.LeaderView(nil)
	if err != nil {
		return nil, err
	}
	return &storagev1.FenceCoordinatorResponse{LogStartOffset: v.LogStart, LogEndOffset: v.LogEnd, LeaderEpoch: v.LeaderEpoch}, nil
}
