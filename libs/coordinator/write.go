package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// KV is one record to write to a coordinator's partition; a nil Value is a
// tombstone.
type KV struct{ Key, Value []byte }

// Writer appends a shard's records to its Log: one batch per call, with
// acks=all, applied to the shard's memory only once acknowledged, so memory
// never runs ahead of what a successor replays. Its zero value is not
// usable: set every field.
type Writer struct {
	Topic     string
	Partition int32
	Log       Log
	// Mu is the shard's lock: WriteLocked is called, and apply and failed
	// run, with it held, so the log order is the order of validation.
	Mu *sync.Mutex
	// Ctx ends when the shard is unloaded.
	Ctx context.Context
	Now func() time.Time
	// Fenced, if set, is called (with Mu held) when a write fails with
	// NOT_COORDINATOR while the shard is still loaded: a later coordinator
	// fenced the partition, and the shard must reload.
	Fenced func(e *errs.Error)

	builder *record.Builder
}

// WriteLocked appends recs as one batch and returns a channel that gets
// the outcome. Once the write is acknowledged, apply runs with Mu held
// (with the batch's first offset) before the outcome is sent; if it fails,
// failed (if set) runs instead. The wait outlives any caller: apply runs
// whenever the acknowledgement comes; callers may stop waiting earlier
// (Await). Called with Mu held.
func (w *Writer) WriteLocked(recs []KV, apply func(base int64), failed func(e *errs.Error)) <-chan *errs.Error {
	if w.builder == nil {
		w.builder = record.NewBuilder(record.CodecNone)
	}
	w.builder.Reset()
	now := w.Now().UnixMilli()
	for _, r := range recs {
		if err := w.builder.Append(&record.Record{Timestamp: now, Key: r.Key, Value: r.Value}); err != nil {
			return w.failNow(errs.New(errs.UnknownServerError, "encoding %s records: %v", w.Topic, err), failed)
		}
	}
	batch, err := w.builder.Build()
	if err != nil {
		return w.failNow(errs.New(errs.UnknownServerError, "encoding a %s batch: %v", w.Topic, err), failed)
	}
	return w.appendLocked(append([]byte(nil), batch...), apply, failed)
}

// appendLocked appends one encoded batch and applies it once acknowledged
// (see WriteLocked). Called with Mu held.
func (w *Writer) appendLocked(batch []byte, apply func(base int64), failed func(e *errs.Error)) <-chan *errs.Error {
	done := make(chan *errs.Error, 1)
	fail := func(e *errs.Error) {
		if failed != nil {
			failed(e)
		}
		done <- e
	}
	wait := w.Log.Append(batch)
	go func() {
		ctx, cancel := context.WithTimeout(w.Ctx, 30*time.Second)
		defer cancel()
		base, err := wait(ctx)
		w.Mu.Lock()
		defer w.Mu.Unlock()
		if err != nil {
			e := WriteError(err, w.Topic, w.Partition, w.Ctx.Err() != nil)
			if e.Code == errs.NotCoordinator && w.Ctx.Err() == nil && w.Fenced != nil {
				w.Fenced(e)
			}
			fail(e)
			return
		}
		if w.Ctx.Err() != nil {
			fail(errs.New(errs.NotCoordinator, "this node stopped coordinating %s-%d", w.Topic, w.Partition))
			return
		}
		apply(base)
		done <- nil
	}()
	return done
}
