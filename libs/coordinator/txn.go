package coordinator

import (
	"context"
	"errors"
	"io"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/log"
)

// LogRecord is one record met in a replay (Log.ReplayAll), with what its
// batch says of it.
type LogRecord struct {
	Key, Value []byte
	Offset     int64
	// ProducerID and ProducerEpoch are the batch's producer, -1 when it
	// has none.
	ProducerID    int64
	ProducerEpoch int16
	// Transactional says the batch belongs to a transaction of the
	// producer. Control says it is a transaction marker: Key and Value are
	// the control record's (record.ParseControlKey reads its type).
	Transactional, Control bool
}

// dataOnly adapts a Replay callback to ReplayAll: control records are
// passed over.
func dataOnly(apply func(key, value []byte, offset int64)) func(r *LogRecord) {
	return func(r *LogRecord) {
		if !r.Control {
			apply(r.Key, r.Value, r.Offset)
		}
	}
}

// replayBatches calls apply for the records of buf (whole batches) in
// [from, end).
func replayBatches(it *record.Iterator, buf []byte, from, end int64, apply func(r *LogRecord)) error {
	it.Reset(buf)
	var lr LogRecord
	for it.Next() {
		b, r := it.Batch(), it.Record()
		if r.Offset < from || r.Offset >= end {
			continue
		}
		lr = LogRecord{Key: r.Key, Value: r.Value, Offset: r.Offset, ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch,
			Transactional: b.Attributes.Transactional(), Control: b.Attributes.Control()}
		apply(&lr)
	}
	return it.Err()
}

// ReplayAll reads the partition from its leader with plain fetches (not
// the SDK consumer, which hides batch attributes and markers), retrying
// until ctx ends.
func (l *remoteLog) ReplayAll(ctx context.Context, start, end int64, apply func(r *LogRecord)) error {
	var it record.Iterator
	offset := start
	backoff := 50 * time.Millisecond
	for offset < end {
		next, err := l.fetchOnce(ctx, &it, offset, end, apply)
		if next > offset {
			offset, backoff = next, 50*time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			err = errors.New("the leader returned nothing")
		}
		l.env.Logger.Debug("coordinator replay fetch failed; retrying", log.TopicPartition(l.topic, l.partition), log.Offset(offset), log.Err(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stop:
			return errors.New("coordinator log closed")
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return nil
}

// fetchOnce fetches once from offset and applies what came; it returns the
// offset to go on from.
func (l *remoteLog) fetchOnce(ctx context.Context, it *record.Iterator, offset, end int64, apply func(r *LogRecord)) (int64, error) {
	sc, err := l.leader()
	if err != nil {
		return offset, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := sc.Fetch(cctx, &storagev1.FetchRequest{
		Format: storagev1.RecordFormat_RECORD_FORMAT_BATCHES, IsolationLevel: commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED,
		MaxWaitMs: 500, MinBytes: 1,
		Partitions: []*storagev1.FetchPartition{{Topic: l.topic, Partition: l.partition, FetchOffset: offset, PartitionMaxBytes: 1 << 20}},
	})
	if err != nil {
		return offset, asErr(err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return offset, nil
		}
		if err != nil {
			return offset, asErr(err)
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			return offset, e
		}
		if err := replayBatches(it, resp.GetBatches(), offset, end, apply); err != nil {
			return offset, err
		}
		offset = max(offset, resp.GetNextOffset())
	}
}

// WriteTxnLocked is WriteLocked for records that belong to a transaction
// of producer producerID at producerEpoch: the batch is transactional and
// carries the producer, with no sequence (a coordinator's write, as
// Kafka's group coordinator writes offsets committed in a transaction).
// The partition's leader counts it in the producer's open transaction
// until a marker ends it.
func (w *Writer) WriteTxnLocked(producerID int64, producerEpoch int16, recs []KV, apply func(base int64), failed func(e *errs.Error)) <-chan *errs.Error {
	b := record.NewBuilder(record.CodecNone)
	b.SetProducer(producerID, producerEpoch, -1)
	b.SetTransactional(true)
	now := w.Now().UnixMilli()
	for _, r := range recs {
		if err := b.Append(&record.Record{Timestamp: now, Key: r.Key, Value: r.Value}); err != nil {
			return w.failNow(errs.New(errs.UnknownServerError, "encoding %s records: %v", w.Topic, err), failed)
		}
	}
	batch, err := b.Build()
	if err != nil {
		return w.failNow(errs.New(errs.UnknownServerError, "encoding a %s batch: %v", w.Topic, err), failed)
	}
	return w.appendLocked(append([]byte(nil), batch...), apply, failed)
}

// WriteMarkerLocked is WriteLocked for a transaction marker: a control
// batch (record.AppendEndTxnMarker) that ends producerID's transaction at
// producerEpoch on the partition, committing it or aborting it. The
// partition's leader refuses it for an older producer epoch
// (INVALID_PRODUCER_EPOCH) or an older coordinatorEpoch than its last
// marker's (TRANSACTION_COORDINATOR_FENCED); WriteError passes those
// through.
func (w *Writer) WriteMarkerLocked(producerID int64, producerEpoch int16, commit bool, coordinatorEpoch int32, apply func(base int64), failed func(e *errs.Error)) <-chan *errs.Error {
	t := record.ControlAbort
	if commit {
		t = record.ControlCommit
	}
	batch := record.AppendEndTxnMarker(nil, producerID, producerEpoch, t, coordinatorEpoch, w.Now().UnixMilli())
	return w.appendLocked(batch, apply, failed)
}

func (w *Writer) failNow(e *errs.Error, failed func(e *errs.Error)) <-chan *errs.Error {
	done := make(chan *errs.Error, 1)
	if failed != nil {
		failed(e)
	}
	done <- e
	return done
}
