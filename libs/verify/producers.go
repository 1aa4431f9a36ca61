package verify

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// pacer spaces out work to a rate: wait blocks until the next unit is due.
// After a stall (a fault) it does not burst to catch up by more than a
// second's worth.
type pacer struct {
	interval time.Duration
	next     time.Time
}

func newPacer(perSecond float64) *pacer {
	if perSecond <= 0 {
		perSecond = 1
	}
	return &pacer{interval: time.Duration(float64(time.Second) / perSecond), next: time.Now()}
}

// due returns how many units are due now (0 when none), counting them as
// done.
func (p *pacer) due(now time.Time) int {
	if now.Before(p.next) {
		return 0
	}
	if lag := now.Sub(p.next); lag > time.Second {
		p.next = now.Add(-time.Second)
	}
	n := int(now.Sub(p.next)/p.interval) + 1
	p.next = p.next.Add(time.Duration(n) * p.interval)
	return n
}

// wait sleeps until the next unit is due or ctx ends; false when ctx ended.
func (p *pacer) wait(ctx context.Context) bool {
	d := time.Until(p.next)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// target picks where a record goes: a topic among the allowed ones, a
// partition, and a key from a small space so keys repeat across partitions'
// records.
func (r *runner) target(rng *rand.Rand, topics []string) (string, int32, string) {
	t := topics[rng.IntN(len(topics))]
	p := rng.Int32N(r.cfg.Partitions)
	return t, p, fmt.Sprintf("k%d", rng.IntN(1000))
}

// acksOf maps Config.Acks (as withDefaults spells it) to the SDK's setting
// for a producer; idempotent producers always use acks=all.
func acksOf(s string, idempotent bool) client.Acks {
	switch {
	case idempotent:
		return client.AcksAll
	case s == "1":
		return client.AcksLeader
	case s == "0":
		return client.AcksNone
	}
	return client.AcksAll
}

// runPlain runs a plain or idempotent producer: one record at a time at its
// share of the rate, asynchronously, each recorded as a transaction of one
// send when its callback reports the outcome.
func (r *runner) runPlain(ctx context.Context, proc int, idempotent bool, rate float64, topics []string) {
	kind := OpProducePlain
	if idempotent {
		kind = OpProduceIdempotent
	}
	log := r.cfg.Logger.With(slog.Int("process", proc), slog.String("kind", kind))
	p := r.cl.NewProducer(client.ProducerConfig{
		Acks: acksOf(r.cfg.Acks, idempotent), DisableIdempotence: !idempotent, Linger: 5 * time.Millisecond,
		DeliveryTimeout: 30 * time.Second,
	})
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(proc)))
	pace := newPacer(rate)
	var seq int64
	var wg sync.WaitGroup
	sends := &sendLog{record: func(t check.Txn) { r.rec.Txn(t) }}
	defer sends.flushAll()
	for pace.wait(ctx) {
		for n := pace.due(time.Now()); n > 0; n-- {
			topic, part, key := r.target(rng, topics)
			seq++
			value := fmt.Sprintf("%d-%d", proc, seq)
			start := r.now()
			rec := &client.Record{Topic: topic, Partition: part, Key: []byte(key), Value: []byte(value)}
			send := check.Send{Topic: topic, Partition: part, Key: key, Value: value, Offset: check.NoOffset}
			slot := sends.add()
			wg.Add(1)
			err := p.Produce(ctx, rec, func(res client.Result) {
				defer wg.Done()
				t := check.Txn{Process: proc, Start: start, CommitStart: start, End: r.now(), Commit: true,
					Idempotent: idempotent, Outcome: outcomeOf(res.Err), ProducerID: 0, Epoch: -1}
				if res.Err == nil {
					send.Acked, send.Offset = true, res.Offset
				}
				t.Sends = []check.Send{send}
				sends.done(slot, t)
			})
			if err != nil {
				wg.Done()
				// Produce refused the record before queueing it (the run is
				// ending, or the buffer stayed full): it was never sent.
				outcome := check.Fail
				if ctx.Err() == nil {
					log.Warn("produce refused", slog.Any("err", err))
				}
				sends.done(slot, check.Txn{Process: proc, Start: start, CommitStart: start, End: r.now(), Commit: true,
					Idempotent: idempotent, Outcome: outcome, Epoch: -1, Sends: []check.Send{send}})
				break
			}
		}
	}
	// Quiet phase: every queued record gets its outcome before the producer
	// closes (failures after the delivery timeout are recorded as such).
	cctx, cancel := context.WithTimeout(context.Background(), r.closeTimeout())
	defer cancel()
	if err := p.Close(cctx); err != nil {
		log.Warn("closing producer", slog.Any("err", err))
	}
	waitGroup(&wg, 15*time.Second)
}

// sendLog records one producer's sends in the order it made them, whatever
// the order their outcomes arrive in. The history keeps each producer's
// transactions in the order it ran them, and the checker compares acknowledged
// offsets in that order (NonMonotonicSend). Callbacks are not a safe proxy
// for it: when a batch is answered with a retriable error after the leader
// appended it (REQUEST_TIMED_OUT while its replicas lag, say) and a later
// batch in flight is acknowledged meanwhile, the later batch's callbacks run
// first and the retried one's, answered with its original (lower) offset,
// after them. Recording in callback order would then report a reordering
// that the log does not have.
type sendLog struct {
	record func(check.Txn)
	mu     sync.Mutex
	next   uint64 // index of the first slot not recorded yet
	slots  []sendSlot
}

type sendSlot struct {
	t    check.Txn
	done bool
}

// add reserves the next slot in send order and returns its index.
func (l *sendLog) add() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slots = append(l.slots, sendSlot{})
	return l.next + uint64(len(l.slots)) - 1
}

// done fills a slot with its transaction and records every filled slot from
// the oldest unrecorded one on.
func (l *sendLog) done(slot uint64, t check.Txn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if slot < l.next {
		// Late, after flushAll: nothing is held behind it any more.
		l.record(t)
		return
	}
	l.slots[slot-l.next] = sendSlot{t: t, done: true}
	n := 0
	for n < len(l.slots) && l.slots[n].done {
		l.record(l.slots[n].t)
		n++
	}
	l.slots = l.slots[n:]
	l.next += uint64(n)
}

// flushAll records the filled slots still held behind one whose outcome
// never came (a callback that did not run before the producer was given
// up); the missing ones stay out of the history, as they did before.
func (l *sendLog) flushAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.slots {
		if s.done {
			l.record(s.t)
		}
	}
	l.next += uint64(len(l.slots))
	l.slots = nil
}

// closeTimeout bounds how long a producer may take to settle its records
// at the end: long in the quiet phase, short when the run was interrupted.
func (r *runner) closeTimeout() time.Duration {
	if r.ctx.Err() != nil {
		return 2 * time.Second
	}
	return 45 * time.Second
}

// waitGroup waits for wg, at most d; callbacks that never come leave their
// records out of the history (and are logged by the caller's checks).
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// txnWorker is one transactional producer: multi-partition transactions
// (one in five aborted on purpose) at its share of the rate, and, when a
// copy is configured, read-process-write copies of the input topic into the
// output topic with the consumed offsets committed in the transaction.
type txnWorker struct {
	r      *runner
	proc   int
	tid    string
	log    *slog.Logger
	rng    *rand.Rand
	p      *client.Producer
	g      *group // nil without a copy
	seq    int64
	topics []string
	// lastCopyAbort spaces out aborted copies.
	lastCopyAbort time.Time
}

func (r *runner) runTxn(ctx, drain context.Context, proc, index int, rate float64, topics []string) {
	w := &txnWorker{r: r, proc: proc, tid: fmt.Sprintf("%stxn-%d", r.cfg.TopicPrefix, index),
		rng: rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(proc))), topics: topics}
	w.log = r.cfg.Logger.With(slog.Int("process", proc), slog.String("transactional_id", w.tid))
	defer w.close()
	if !w.init(ctx) {
		return
	}
	pace := newPacer(rate / 3) // three records per transaction on average
	for ctx.Err() == nil {
		if w.g != nil {
			if w.copyOnce(ctx, pace) > 0 {
				w.r.copied()
			}
		} else if !pace.wait(ctx) {
			break
		}
		if n := pace.due(time.Now()); n > 0 && ctx.Err() == nil {
			w.writeTxn(ctx, min(n*3, 12))
		}
		if w.p == nil && !w.init(ctx) {
			return
		}
	}
	if w.g == nil {
		return
	}
	// Quiet phase: keep copying until the input is drained (the runner
	// ends drain when no copier has copied anything for a while).
	for drain.Err() == nil {
		if w.p == nil && !w.init(drain) {
			return
		}
		if w.copyOnce(drain, nil) > 0 {
			w.r.copied()
		}
	}
}

// init creates the producer (and the copy group's consumer) and registers
// the transactional id, retrying until ctx ends.
func (w *txnWorker) init(ctx context.Context) bool {
	for ctx.Err() == nil {
		if w.p == nil {
			w.p = w.r.cl.NewProducer(client.ProducerConfig{TransactionalID: w.tid, Acks: client.AcksAll,
				TransactionTimeout: 10 * time.Second, Linger: 2 * time.Millisecond, DeliveryTimeout: 30 * time.Second})
		}
		start := w.r.now()
		ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := w.p.InitTransactions(ictx)
		cancel()
		in := check.Init{Process: w.proc, TransactionalID: w.tid, Start: start, End: w.r.now(), Outcome: outcomeOf(err),
			ProducerID: -1, Epoch: -1}
		if err == nil {
			in.ProducerID, in.Epoch, _ = w.p.ProducerIdentity()
		}
		w.r.rec.Init(in)
		if err == nil {
			break
		}
		w.log.Warn("init transactions failed; retrying", slog.Any("err", err))
		w.resetProducer()
		sleep(ctx, 500*time.Millisecond)
	}
	if ctx.Err() != nil {
		return false
	}
	if w.r.copy != nil && w.g == nil {
		w.g = w.r.newGroup(w.r.copy.group, client.GroupProtocolClassic, w.proc, []string{w.r.copy.in}, true)
	}
	return true
}

// resetProducer closes the producer; the next init makes a new one with the
// same transactional id, which fences and aborts whatever the old one left
// open.
func (w *txnWorker) resetProducer() {
	if w.p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.p.Close(ctx) // the producer is being replaced; its errors are recorded per transaction
	w.p = nil
}

func (w *txnWorker) close() {
	if w.g != nil {
		w.g.close()
		w.g = nil
	}
	w.resetProducer()
}

// txnOp is a transaction in progress.
type txnOp struct {
	t   check.Txn
	mu  sync.Mutex
	wg  sync.WaitGroup
	err error // the first produce error
}

func (w *txnWorker) begin() *txnOp {
	op := &txnOp{t: check.Txn{Process: w.proc, Start: w.r.now(), TransactionalID: w.tid, Idempotent: true, Epoch: -1}}
	if pid, epoch, ok := w.p.ProducerIdentity(); ok {
		op.t.ProducerID, op.t.Epoch = pid, epoch
	}
	return op
}

// send produces one record in the transaction, noting its offset when
// acknowledged.
func (w *txnWorker) send(ctx context.Context, op *txnOp, topic string, part int32, key, value string) error {
	op.mu.Lock()
	i := len(op.t.Sends)
	op.t.Sends = append(op.t.Sends, check.Send{Topic: topic, Partition: part, Key: key, Value: value, Offset: check.NoOffset})
	op.mu.Unlock()
	op.wg.Add(1)
	err := w.p.Produce(ctx, &client.Record{Topic: topic, Partition: part, Key: []byte(key), Value: []byte(value)}, func(res client.Result) {
		defer op.wg.Done()
		op.mu.Lock()
		defer op.mu.Unlock()
		if res.Err == nil {
			op.t.Sends[i].Acked, op.t.Sends[i].Offset = true, res.Offset
		} else if op.err == nil {
			op.err = res.Err
		}
	})
	if err != nil {
		op.wg.Done()
	}
	return err
}

// end commits (or aborts) the transaction and records it. It returns
// whether the transaction ended as asked; after an unknown outcome the
// producer is replaced (w.p is nil).
func (w *txnWorker) end(ctx context.Context, op *txnOp, commit bool) bool {
	// Not ctx: a transaction begun before the workload ended still ends
	// cleanly, so the quiet phase leaves none open.
	ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op.t.CommitStart = w.r.now()
	var err error
	if commit {
		err = w.p.CommitTransaction(ectx)
	} else {
		err = w.p.AbortTransaction(ectx)
	}
	op.t.End = w.r.now()
	op.t.Commit = commit
	op.t.Outcome = outcomeOf(err)
	waitGroup(&op.wg, 5*time.Second)
	op.mu.Lock()
	t := op.t
	t.Sends = append([]check.Send(nil), op.t.Sends...)
	op.mu.Unlock()
	w.r.rec.Txn(t)
	if err == nil {
		return true
	}
	if ctx.Err() == nil {
		w.log.Warn("ending transaction failed", slog.Bool("commit", commit), slog.Any("err", err))
	}
	if commit && t.Outcome == check.Fail {
		// Refused before EndTxn went out: abort it (the abort changes
		// nothing the history claims: the transaction did not commit).
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		aerr := w.p.AbortTransaction(actx)
		acancel()
		if aerr == nil {
			return false
		}
	}
	// The outcome is unknown: start over with a new producer, whose
	// InitProducerId finishes or aborts what this one left.
	w.resetProducer()
	return false
}

// abandon ends a transaction that failed before it could commit: it asks
// to abort and records the transaction as never asked to commit.
func (w *txnWorker) abandon(ctx context.Context, op *txnOp, cause error) {
	if ctx.Err() == nil {
		w.log.Warn("transaction failed before commit; aborting", slog.Any("err", cause))
	}
	w.end(context.Background(), op, false)
}

// writeTxn writes n records over random partitions of the worker's topics
// in one transaction; one in five is aborted on purpose.
func (w *txnWorker) writeTxn(ctx context.Context, n int) {
	if w.p == nil {
		return
	}
	if err := w.p.BeginTransaction(); err != nil {
		w.log.Warn("begin transaction", slog.Any("err", err))
		w.resetProducer()
		return
	}
	op := w.begin()
	n = max(1, n/2+w.rng.IntN(n+1))
	for range n {
		topic, part, key := w.r.target(w.rng, w.topics)
		w.seq++
		if err := w.send(ctx, op, topic, part, key, fmt.Sprintf("%d-%d", w.proc, w.seq)); err != nil {
			w.abandon(ctx, op, err)
			return
		}
	}
	w.end(ctx, op, w.rng.IntN(5) != 0)
}

// copyOnce polls the copy group once (waiting up to the next due write
// transaction, or a second with pace nil) and copies what it got in one
// transaction, with the consumed offsets. It returns the records copied.
func (w *txnWorker) copyOnce(ctx context.Context, pace *pacer) int {
	wait := time.Second
	if pace != nil {
		wait = min(max(time.Until(pace.next), 50*time.Millisecond), time.Second)
	}
	recs := w.g.poll(ctx, wait)
	if len(recs) == 0 || w.p == nil {
		return 0
	}
	// One purposeful abort every 10 s at most: the same records are then
	// copied again in the next transaction, as an application retrying a
	// failed batch would.
	if time.Since(w.lastCopyAbort) > 10*time.Second && w.rng.IntN(10) == 0 {
		w.lastCopyAbort = time.Now()
		if !w.copyTxn(ctx, recs, false) {
			w.restartCopy()
			return 0
		}
	}
	if !w.copyTxn(ctx, recs, true) {
		// Not known to be committed: read again from the committed offsets.
		w.restartCopy()
		return 0
	}
	return len(recs)
}

// copyTxn copies records to the output topic and commits their offsets in
// one transaction (or aborts it when commit is false). It returns whether
// the transaction ended as asked.
func (w *txnWorker) copyTxn(ctx context.Context, recs []*client.ConsumedRecord, commit bool) bool {
	if w.p == nil {
		return false
	}
	if err := w.p.BeginTransaction(); err != nil {
		w.log.Warn("begin transaction", slog.Any("err", err))
		w.resetProducer()
		return false
	}
	op := w.begin()
	next := map[client.TopicPartition]int64{}
	for _, rec := range recs {
		w.seq++
		// The copy's value names the input value after the colon, and
		// is unique itself, so a retried copy is a new value and a
		// duplicated one is caught by the copy check.
		value := fmt.Sprintf("%d.%d:%s", w.proc, w.seq, rec.Value)
		if err := w.send(ctx, op, w.r.copy.out, rec.Partition%w.r.cfg.Partitions, string(rec.Key), value); err != nil {
			w.abandon(ctx, op, err)
			return false
		}
		next[client.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}] = rec.Offset + 1
	}
	meta := w.g.gc.GroupMetadata()
	octx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := w.p.SendOffsetsToTransaction(octx, next, meta)
	cancel()
	if err != nil {
		w.abandon(ctx, op, err)
		return false
	}
	for tp, off := range next {
		op.t.Offsets = append(op.t.Offsets, check.OffsetCommit{Group: meta.GroupID, Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	return w.end(ctx, op, commit) && w.p != nil
}

// restartCopy replaces the copy group's consumer, so reading resumes from
// the group's committed offsets.
func (w *txnWorker) restartCopy() {
	if w.g != nil {
		w.g.close()
	}
	w.g = w.r.newGroup(w.r.copy.group, client.GroupProtocolClassic, w.proc, []string{w.r.copy.in}, true)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// copyValueInput maps a copy's value to the input value it copies.
func copyValueInput(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		return v[i+1:]
	}
	return v
}
