package storagenode

import (
	"context"
	"sync"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

// markerTimeout bounds how long one WriteTxnMarkers call waits for its
// markers to be replicated; the coordinator retries what did not make it.
const markerTimeout = 30 * time.Second

// WriteTxnMarkers appends COMMIT or ABORT control batches (Kafka's control
// record layout) for the transaction coordinator, and answers each
// partition once its marker is acknowledged by every in-sync replica. A
// marker whose producer epoch is older than the partition's, or whose
// coordinator epoch is older than the last marker's for the producer, is
// refused (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED): it comes
// from a deposed coordinator or for a fenced producer.
//
// Markers for partitions of __consumer_offsets (offsets committed in a
// transaction) are forwarded to the partition's group coordinator
// (GroupCoordinatorService.WriteTxnOffsetMarkers), which writes them through its
// own fenced writer and commits or drops the producer's pending offsets
// once they are acknowledged; its answer is the partition's.
func (r *StorageNode) WriteTxnMarkers(ctx context.Context, req *storagev1.WriteTxnMarkersRequest) (*storagev1.WriteTxnMarkersResponse, error) {
	if err := authz.CheckInternal(ctx, r.deps.Authorizer(), "WriteTxnMarkers", markerCallers...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	out := &storagev1.WriteTxnMarkersResponse{}
	type wait struct {
		res   *storagev1.TxnMarkerResult
		part  *replica.Partition
		ar    storage.AppendResult
		epoch int32
	}
	var waits []wait
	forwards := map[int32]*markerForward{}
	for i, m := range req.GetMarkers() {
		if err := validateMarker(i, m); err != nil {
			return nil, err
		}
		now := r.deps.Clock()().UnixMilli()
		ct := record.ControlAbort
		if m.GetCommitted() {
			ct = record.ControlCommit
		}
		for _, tp := range m.GetPartitions() {
			res := &storagev1.TxnMarkerResult{ProducerId: m.GetProducerId(), Partition: tp}
			out.Results = append(out.Results, res)
			if tp.GetTopic() == metadata.OffsetsTopic {
				if err := r.forwardMarker(forwards, i, m, tp, res); err != nil {
					res.Error = errs.ItemError(err)
				}
				continue
			}
			part, err := r.partition(tp.GetTopic(), tp.GetPartition())
			if err == nil {
				batch := record.AppendEndTxnMarker(nil, m.GetProducerId(), int16(m.GetProducerEpoch()), ct, m.GetCoordinatorEpoch(), now)
				var ar storage.AppendResult
				var epoch int32
				ar, epoch, err = r.appendMarker(part, tp.GetTopic(), batch)
				if err == nil {
					waits = append(waits, wait{res: res, part: part, ar: ar, epoch: epoch})
				}
			}
			if err != nil {
				res.Error = errs.ItemError(err)
			}
		}
	}
	var wg sync.WaitGroup
	for _, f := range forwards {
		wg.Go(func() { f.send(ctx, r) })
	}
	for _, w := range waits {
		wg.Go(func() {
			if err := w.part.AwaitAck(ctx, w.ar, w.epoch, replica.AcksAll); err != nil {
				w.res.Error = errs.ItemError(err)
			}
		})
	}
	wg.Wait()
	return out, nil
}

func validateMarker(i int, m *storagev1.TxnMarker) error {
	switch {
	case m.GetProducerId() < 0:
		return errs.Invalid(errs.InvalidRequest, "markers", "marker %d: producer id %d is negative", i, m.GetProducerId())
	case m.GetProducerEpoch() < 0 || m.GetProducerEpoch() > 1<<15-1:
		return errs.Invalid(errs.InvalidRequest, "markers", "marker %d: producer epoch %d is outside [0, 32767]", i, m.GetProducerEpoch())
	case m.GetCoordinatorEpoch() < 0:
		return errs.Invalid(errs.InvalidRequest, "markers", "marker %d: coordinator epoch %d is negative", i, m.GetCoordinatorEpoch())
	case len(m.GetPartitions()) == 0:
		return errs.Invalid(errs.InvalidRequest, "markers", "marker %d names no partition", i)
	}
	return nil
}

// appendMarker appends one marker as leader. On an internal topic it takes
// the coordinator lock, so the marker and a coordinator's own writes are
// ordered (markers for __consumer_offsets do not come here: they are
// forwarded to its group coordinator).
func (r *StorageNode) appendMarker(part *replica.Partition, topic string, batch []byte) (storage.AppendResult, int32, error) {
	if metadata.CoordinatorRole(topic) != "" {
		part.LockCoordinator()
		defer part.UnlockCoordinator()
	}
	return part.Append(batch, replica.AcksAll, nil, record.FromCoordinator)
}

// markerForward is the markers forwarded to one group coordinator, with
// the results to fill in request order.
type markerForward struct {
	addr    string
	req     *groupv1.WriteTxnOffsetMarkersRequest
	results []*storagev1.TxnMarkerResult
	// last is the index of the request marker req's last marker copies.
	last int
}

// forwardMarker adds partition tp of marker i to the request for the group
// coordinator of tp (a partition of __consumer_offsets).
func (r *StorageNode) forwardMarker(forwards map[int32]*markerForward, i int, m *storagev1.TxnMarker, tp *commonv1.TopicPartition, res *storagev1.TxnMarkerResult) error {
	img := r.deps.Metadata.Load()
	c, _ := img.CoordinatorOf(tp.GetTopic(), tp.GetPartition(), metadata.CoordinatorRole(tp.GetTopic()))
	if c == nil {
		return errs.New(errs.CoordinatorNotAvailable, "%s-%d has no group coordinator now to write the marker", tp.GetTopic(), tp.GetPartition())
	}
	f := forwards[c.GetId()]
	if f == nil {
		f = &markerForward{addr: img.Address(c.GetId()), req: &groupv1.WriteTxnOffsetMarkersRequest{}, last: -1}
		forwards[c.GetId()] = f
	}
	if f.last != i {
		f.req.Markers = append(f.req.Markers, &storagev1.TxnMarker{ProducerId: m.GetProducerId(), ProducerEpoch: m.GetProducerEpoch(),
			Committed: m.GetCommitted(), CoordinatorEpoch: m.GetCoordinatorEpoch()})
		f.last = i
	}
	fm := f.req.Markers[len(f.req.Markers)-1]
	fm.Partitions = append(fm.Partitions, tp)
	f.results = append(f.results, res)
	return nil
}

// send calls the group coordinator and copies its answers; a failed call
// is every partition's answer (the transaction coordinator retries).
func (f *markerForward) send(ctx context.Context, r *StorageNode) {
	fail := func(err error) {
		for _, res := range f.results {
			res.Error = errs.ItemError(err)
		}
	}
	conn, err := r.deps.Pool.Get(f.addr)
	if err != nil {
		fail(err)
		return
	}
	resp, err := groupv1.NewGroupCoordinatorServiceClient(conn).WriteTxnOffsetMarkers(ctx, f.req)
	if err != nil {
		fail(err)
		return
	}
	if len(resp.GetResults()) != len(f.results) {
		fail(errs.New(errs.UnknownServerError, "the group coordinator at %s answered %d results for %d partitions", f.addr, len(resp.GetResults()), len(f.results)))
		return
	}
	for i, res := range resp.GetResults() {
		f.results[i].Error = res.GetError()
	}
}

// DescribeProducers describes the producer state of partitions: by default
// from their leaders, with any_replica from whatever replica this node has.
func (r *StorageNode) DescribeProducers(ctx context.Context, req *storagev1.DescribeProducersRequest) (*storagev1.DescribeProducersResponse, error) {
	if len(req.GetPartitions()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "partitions", "names no partition")
	}
	out := &storagev1.DescribeProducersResponse{}
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Read, authz.Topic)
	for _, tp := range req.GetPartitions() {
		res := &storagev1.DescribeProducersResult{Partition: &commonv1.TopicPartition{Topic: tp.GetTopic(), Partition: tp.GetPartition()},
			NodeId: r.replicas.NodeID(), LastStableOffset: -1}
		out.Results = append(out.Results, res)
		err := topics.Check(tp.GetTopic())
		var part *replica.Partition
		if err == nil {
			part, err = r.partition(tp.GetTopic(), tp.GetPartition())
		}
		var v replica.View
		if err == nil {
			if req.GetAnyReplica() {
				v = part.View()
			} else {
				v, err = part.LeaderView(nil)
			}
		}
		if err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		if v.IsLeader {
			res.LastStableOffset = v.LastStable
		}
		for _, p := range part.Log().Producers() {
			res.Producers = append(res.Producers, &storagev1.ProducerState{
				ProducerId: p.ProducerID, ProducerEpoch: int32(p.Epoch), LastSequence: p.LastSequence,
				LastTimestampMs: p.LastTimestamp, CoordinatorEpoch: p.CoordinatorEpoch, CurrentTxnStartOffset: p.TxnStartOffset,
			})
		}
	}
	return out, nil
}
