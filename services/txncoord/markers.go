package txncoord

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
)

// markerSender sends one marker to the leaders of its partitions and
// returns, per partition, nil once the marker is written there.
type markerSender func(ctx context.Context, m *storagev1.TxnMarker) map[topicPartition]error

// markerWriter writes a decided transaction's COMMIT or ABORT markers.
//
// A marker carries the producer id and epoch of the transaction being
// ended (txnMeta.lastProducerID/lastEpoch), not the bumped epoch the
// producer moves on to: a partition leader matches it against the
// transaction it holds open for that producer. A late produce of the ended
// transaction is kept out by verification instead (AddPartitionsToTxn with
// verify_only answers INVALID_TXN_STATE or PRODUCER_FENCED once the
// coordinator has moved on), and the marker's coordinator_epoch (the
// __transaction_state partition's leader epoch at load) lets a leader
// refuse a deposed coordinator's markers.
type markerWriter struct {
	send   markerSender
	logger *slog.Logger
	m      *metrics
}

// writeAll writes m's markers to every partition of its transaction,
// retrying each partition (after a metadata refresh: a moved leader is
// found again) until it is written. It returns false if the shard unloaded
// first, or a later coordinator fenced it.
func (w *markerWriter) writeAll(ctx context.Context, s *shard, m *txnMeta) bool {
	left := map[topicPartition]bool{}
	for tp := range m.partitions {
		left[tp] = true
	}
	backoff := 50 * time.Millisecond
	for attempt := 0; len(left) > 0; attempt++ {
		marker := &storagev1.TxnMarker{
			ProducerId: m.lastProducerID, ProducerEpoch: int32(m.lastEpoch),
			Committed: m.state == kmsg.TransactionStatePrepareCommit, CoordinatorEpoch: s.coordEpoch,
		}
		for tp := range left {
			marker.Partitions = append(marker.Partitions, tp.proto())
		}
		var last error
		for tp, err := range w.send(ctx, marker) {
			if err == nil {
				delete(left, tp)
				continue
			}
			if errs.CodeOf(err) == errs.TransactionCoordinatorFenced {
				w.logger.Warn("transaction markers refused: a later coordinator took over", log.TopicPartition(stateTopic, s.id), log.Err(err))
				return false
			}
			last = err
		}
		if len(left) == 0 {
			break
		}
		w.m.markerRetry()
		if attempt%20 == 5 {
			w.logger.Warn("transaction markers not written yet; retrying", slog.String("transactional_id", m.tid),
				slog.Int("partitions_left", len(left)), log.Err(last))
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	return ctx.Err() == nil
}

// sendMarkers is the markerSender of a running coordinator: it groups the
// partitions by leader and calls StorageService.WriteTxnMarkers on each.
// A partition whose topic metadata no longer lists counts as written (the
// topic was deleted, and with it the open transaction).
func (r *TransactionCoordinator) sendMarkers(ctx context.Context, m *storagev1.TxnMarker) map[topicPartition]error {
	out := map[topicPartition]error{}
	img := r.deps.Metadata.Load()
	byLeader := map[int32][]topicPartition{}
	for _, p := range m.GetPartitions() {
		tp := topicPartition{p.GetTopic(), p.GetPartition()}
		ps, ok := img.Partition(tp.topic, tp.partition)
		switch {
		case !ok && img.Topics[tp.topic] == nil:
			r.logger.Info("transaction marker skipped: the topic is gone", log.TopicPartition(tp.topic, tp.partition))
			out[tp] = nil
		case !ok || ps.GetLeaderId() < 0:
			out[tp] = errs.New(errs.LeaderNotAvailable, "%s-%d has no leader", tp.topic, tp.partition)
		default:
			byLeader[ps.GetLeaderId()] = append(byLeader[ps.GetLeaderId()], tp)
		}
	}
	for leader, tps := range byLeader {
		fail := func(err error) {
			for _, tp := range tps {
				out[tp] = err
			}
		}
		conn, err := r.deps.Pool.Get(img.Address(leader))
		if err != nil {
			fail(errs.From(err))
			continue
		}
		one := &storagev1.TxnMarker{ProducerId: m.GetProducerId(), ProducerEpoch: m.GetProducerEpoch(), Committed: m.GetCommitted(),
			CoordinatorEpoch: m.GetCoordinatorEpoch()}
		for _, tp := range tps {
			one.Partitions = append(one.Partitions, tp.proto())
			out[tp] = errs.New(errs.UnknownServerError, "the leader did not answer for %s-%d", tp.topic, tp.partition)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := storagev1.NewStorageServiceClient(conn).WriteTxnMarkers(cctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{one}})
		cancel()
		if err != nil {
			fail(errs.From(err))
			continue
		}
		for _, res := range resp.GetResults() {
			tp := topicPartition{res.GetPartition().GetTopic(), res.GetPartition().GetPartition()}
			if _, ok := out[tp]; !ok {
				continue
			}
			if e := errs.FromProto(res.GetError()); e != nil {
				out[tp] = e
			} else {
				out[tp] = nil
			}
		}
	}
	return out
}
