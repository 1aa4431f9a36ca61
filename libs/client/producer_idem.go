package client

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// The idempotent producer (KIP-98, on by default as in Kafka 3.0).
//
// The producer holds a producer id and epoch from a transaction coordinator
// (InitProducerId with no transactional id), fetched before the first send.
// Each batch gets the next sequence of its partition when it is first sent
// and keeps it on every retry, so the leader recognises a retry of a batch it
// already appended (one of the last five of the producer) and answers it with
// the original offset instead of appending it again.
//
// Order within a partition holds across retries with up to five requests in
// flight because retries are resent strictly in sequence order: once a batch
// must be retried, nothing more of its partition is sent until every batch
// in flight has its answer, and then the batches go again one at a time from
// the oldest. A batch answered OUT_OF_ORDER_SEQUENCE_NUMBER while an earlier
// batch of its partition is still outstanding was refused only because that
// earlier one is missing, and is resent after it.
//
// Recovery (KIP-360). A batch that has been sent and then fails for good
// (delivery timeout, OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID with
// nothing earlier outstanding, or any other non-retriable error) leaves the
// leader's expected sequence out of step with the producer's. Its records
// fail with the error; the partition then stops sending until its other
// batches of that identity are settled, takes a new producer id (fetched
// once for every partition that needs one) and starts again at sequence 0.
// Batches of the old identity answered OUT_OF_ORDER_SEQUENCE_NUMBER after
// that were never appended and are sent again under the new one, in order;
// those whose outcome is unknown are first resent under the old identity,
// where the leader either finds them appended or refuses them. So a record
// is never silently written twice or out of order; what the caller sees is
// the failed batch's error on its records, and every later record after
// them in the log. A record failed with REQUEST_TIMED_OUT may still have
// been written, as in Kafka.

// maxIdempotentInFlight is the most requests per partition the leader's
// window of five batches per producer can deduplicate.
const maxIdempotentInFlight = 5

// prodID is a producer id and epoch; gen counts the ids the producer has
// held (0: none yet).
type prodID struct {
	pid   int64
	epoch int16
	gen   uint64
}

// partIdem is a partition's sequencing state.
type partIdem struct {
	// gen, pid and epoch: the identity the partition's sequences belong
	// to (gen 0: none yet).
	gen     uint64
	pid     int64
	epoch   int16
	nextSeq int32
	// sequenced counts the batches given a sequence under this identity:
	// the next one's index.
	sequenced uint64
	// reset: a batch of this identity failed after it was sent, so the
	// partition must move to a newer identity before sending new batches.
	reset bool
	// acked: a batch of this identity was acknowledged, so the leader
	// knows the producer id. Until then one batch at a time is in flight:
	// a leader accepts a producer id it does not know at any sequence, so
	// a second batch could be appended while the first is refused for a
	// retriable reason, and land before it.
	acked bool
	// outstanding are the batches with a sequence that have no final
	// outcome yet (in flight or waiting to be resent), oldest first. At
	// most MaxInFlight: new batches get a sequence only while nothing
	// waits to be resent.
	outstanding []*prodBatch
	// resend counts the outstanding batches in ready.
	resend int
}

// idemTelemetry counts the idempotent producer's recoveries.
type idemTelemetry struct {
	resets metric.Int64Counter
}

func newIdemTelemetry(tel *Telemetry) idemTelemetry {
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	if tel != nil && tel.MeterProvider != nil {
		mp = tel.MeterProvider
	}
	// Instrument creation fails only on invalid names; the noop
	// instrument returned alongside is safe to use.
	resets, _ := mp.Meter("github.com/sluice-io/sluice/libs/client").Int64Counter("sluice.client.producer.sequence_resets",
		metric.WithDescription("Times a partition moved to a new producer id because a batch failed after it was sent (its records failed)."))
	return idemTelemetry{resets: resets}
}

// addSeq advances a sequence by n records; sequences wrap at MaxInt32 to 0.
func addSeq(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (1 << 31))
}

// idemNextLocked picks the batch of pp to send next and assigns it a
// sequence if it has none, or returns -1 when nothing may go now.
func (p *Producer) idemNextLocked(pp *prodPartition) int {
	st := &pp.idem
	if st.resend > 0 {
		// Resends go strictly in sequence order, one at a time, after
		// every earlier request of the partition has its answer. They may
		// sit behind batches that lost their sequence, which wait for a
		// new identity once these are settled.
		if pp.inflight > 0 {
			return -1
		}
		return slices.IndexFunc(pp.ready, func(b *prodBatch) bool { return b.seq >= 0 })
	}
	if st.gen != 0 && !st.reset {
		if !st.acked && pp.inflight > 0 {
			return -1
		}
		if len(st.outstanding) > 0 && st.sequenced-st.outstanding[0].seqIdx >= maxIdempotentInFlight {
			// The leader remembers a producer's last five batches: more
			// after the oldest one without an answer, and a resend of it
			// would no longer be recognised, even with fewer than five in
			// flight (the ones after it answered, it is being retried).
			return -1
		}
		return 0
	}
	// A new identity: only once the old one's batches are all settled,
	// so none of them can land after a batch of the new one.
	if len(st.outstanding) > 0 {
		return -1
	}
	if p.id.gen <= st.gen {
		p.needIDLocked(st.gen)
		if b := pp.ready[0]; p.idErr != nil {
			b.lastErr = p.idErr
		}
		return -1
	}
	*st = partIdem{gen: p.id.gen, pid: p.id.pid, epoch: p.id.epoch}
	return 0
}

// idemSequenceLocked gives a batch about to be sent for the first time (or
// again under a new identity) the partition's next sequence, and writes the
// producer fields into its header.
func (p *Producer) idemSequenceLocked(pp *prodPartition, b *prodBatch) {
	st := &pp.idem
	if b.seq >= 0 {
		return // a resend keeps its sequence
	}
	b.idGen, b.seq, b.seqIdx = st.gen, st.nextSeq, st.sequenced
	st.nextSeq = addSeq(st.nextSeq, len(b.recs))
	st.sequenced++
	if b.stampGen != st.gen || b.stampSeq != b.seq {
		stampProducer(b.data, st.pid, st.epoch, b.seq)
		b.stampGen, b.stampSeq = st.gen, b.seq
	}
	st.outstanding = insertByOrder(st.outstanding, b)
}

// idemPredictLocked returns the producer fields the partition's next sealed
// batch will most likely be given at its first send: the current identity,
// and the sequence after the batches that wait for one. ok is false while
// no identity is settled (none yet, a reset, resends pending, or a newer
// producer id to move to).
func (p *Producer) idemPredictLocked(pp *prodPartition) (pid int64, epoch int16, seq int32, ok bool) {
	st := &pp.idem
	if st.gen == 0 || st.reset || st.resend > 0 || p.id.gen != st.gen {
		return 0, 0, 0, false
	}
	seq = st.nextSeq
	for _, b := range pp.ready {
		if b.seq < 0 {
			seq = addSeq(seq, len(b.recs))
		}
	}
	return st.pid, st.epoch, seq, true
}

// stampProducer writes producer id, epoch and base sequence into a built
// batch and updates its CRC, which covers them.
func stampProducer(data []byte, pid int64, epoch int16, seq int32) {
	h, ok := record.ParseBatchHeader(data)
	if !ok {
		return // Build made it; cannot happen
	}
	h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, epoch, seq
	record.PutBatchHeader(data, &h)
	record.UpdateCRC(data)
}

// insertByOrder inserts b into batches kept in seal order.
func insertByOrder(batches []*prodBatch, b *prodBatch) []*prodBatch {
	i := len(batches)
	for i > 0 && batches[i-1].order > b.order {
		i--
	}
	return slices.Insert(batches, i, b)
}

// idemRequeueLocked puts a batch back to be sent again, in order.
func (p *Producer) idemRequeueLocked(pp *prodPartition, b *prodBatch) {
	pp.ready = insertByOrder(pp.ready, b)
	if b.seq >= 0 {
		pp.idem.resend++
	}
}

// idemSettledLocked removes a batch that has its final outcome from the
// partition's outstanding batches; a failure of the partition's current
// identity puts the partition into reset.
func (p *Producer) idemSettledLocked(pp *prodPartition, b *prodBatch, err error) {
	st := &pp.idem
	if i := slices.Index(st.outstanding, b); i >= 0 {
		st.outstanding = slices.Delete(st.outstanding, i, i+1)
	}
	if err == nil && b.idGen == st.gen {
		st.acked = true
	}
	if err == nil || b.idGen != st.gen || st.reset || p.closed {
		return
	}
	st.reset = true
	p.idemTel.resets.Add(context.Background(), 1, metric.WithAttributes(attribute.String("topic", b.tp.topic)))
	l := p.c.cfg.Logger
	if l == nil {
		return
	}
	l.Warn("idempotent producer: batch failed after it was sent; the partition continues under a new producer id",
		slog.String("topic", b.tp.topic), slog.Int("partition", int(b.tp.partition)),
		slog.Int64("producer_id", st.pid), slog.Int("producer_epoch", int(st.epoch)),
		slog.Int("base_sequence", int(b.seq)), slog.String("error", err.Error()))
}

// idemRetryOnRefusal says what to do with a batch the leader refused with
// e: true if it is to be sent again (in order) rather than failed.
func (p *Producer) idemRetryOnRefusal(pp *prodPartition, b *prodBatch, e *errs.Error) bool {
	if e.Code != errs.OutOfOrderSequenceNumber && e.Code != errs.UnknownProducerID {
		return false
	}
	st := &pp.idem
	if len(st.outstanding) > 0 && st.outstanding[0] != b {
		// An earlier batch is outstanding: this one was refused because
		// that one is not in the log yet; it goes again after it.
		return true
	}
	if b.idGen != st.gen || st.reset {
		// The identity was given up after an earlier batch failed; this
		// batch was refused, so it is not in the log: it goes again under
		// the new identity.
		if i := slices.Index(st.outstanding, b); i >= 0 {
			st.outstanding = slices.Delete(st.outstanding, i, i+1)
		}
		b.seq, b.idGen = -1, 0
		return true
	}
	return false
}

// needIDLocked starts fetching a producer id unless one newer than gen is
// held or being fetched.
func (p *Producer) needIDLocked(gen uint64) {
	if p.id.gen > gen || p.idFetching || p.closed {
		return
	}
	if p.idRefused != nil && p.idClock().Before(p.idRetryAt) {
		return // refused: batches fail with it until the backoff ends (sendReady)
	}
	p.idFetching, p.idRefused = true, nil
	p.bg.Go(p.fetchID)
}

// refusedID reports whether getting a producer id failed for a reason no
// retry can fix: the caller is not authorized or not authenticated.
func refusedID(err error) bool {
	switch errs.CodeOf(err) {
	case errs.ClusterAuthorizationFailed, errs.TopicAuthorizationFailed,
		errs.TransactionalIDAuthorizationFailed, errs.SaslAuthenticationFailed:
		return true
	}
	return false
}

// fetchID gets a new producer id, retrying with backoff until it has one
// or the producer closes. Batches waiting for it keep their delivery
// timeout, which names the last error if it passes.
func (p *Producer) fetchID() {
	wait := time.Duration(0)
	for {
		// Attempts shorter than the delivery timeout, so a batch that
		// times out waiting can name the error that kept it waiting.
		ctx, cancel := context.WithTimeout(p.ctx, min(p.cfg.RequestTimeout, p.cfg.DeliveryTimeout/2))
		pid, epoch, err := p.initID(ctx)
		cancel()
		p.mu.Lock()
		if err == nil {
			p.id = prodID{pid: pid, epoch: epoch, gen: p.id.gen + 1}
			p.idErr, p.idFetching, p.idRefusals = nil, false, 0
			p.mu.Unlock()
			if l := p.c.cfg.Logger; l != nil {
				l.Debug("idempotent producer: producer id assigned", slog.Int64("producer_id", pid), slog.Int("producer_epoch", int(epoch)))
			}
			p.kick()
			return
		}
		first := p.idErr == nil
		p.idErr = errs.New(errs.CodeOf(err), "getting a producer id: %w", err)
		if p.closed || p.ctx.Err() != nil {
			p.idFetching = false
			p.mu.Unlock()
			return
		}
		if refusedID(err) {
			// Retrying cannot help until an administrator changes the
			// ACLs or credentials: the batches waiting for an id fail now
			// with the server's message (sendReady), and so do those
			// produced during a backoff that starts at RetryBackoff and
			// doubles with each refusal in a row up to RetryBackoffMax;
			// the first batch after it asks again. Without the backoff a
			// producer refused an id would ask once per record.
			p.idRefusals++
			backoff := p.cfg.RetryBackoff
			for i := 1; i < p.idRefusals && backoff < p.cfg.RetryBackoffMax; i++ {
				backoff *= 2
			}
			backoff = min(backoff, p.cfg.RetryBackoffMax)
			p.idRefused = errs.New(errs.CodeOf(err), "%s (refused %d times in a row; the producer asks again for records produced after %v)",
				p.idErr.(*errs.Error).Message, p.idRefusals, backoff)
			p.idRefusedAt, p.idRetryAt, p.idFetching = time.Now(), p.idClock().Add(backoff), false
			p.mu.Unlock()
			p.kick()
			return
		}
		p.mu.Unlock()
		// Once per run of failures: the batches that time out name the
		// last one.
		if l := p.c.cfg.Logger; l != nil && first {
			l.Warn("idempotent producer: getting a producer id failed; retrying", slog.String("error", err.Error()))
		}
		wait = min(max(2*wait, p.cfg.RetryBackoff), p.cfg.RetryBackoffMax)
		select {
		case <-time.After(wait):
		case <-p.ctx.Done():
		}
	}
}
