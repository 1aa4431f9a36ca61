package txncoord

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
)

// stateTopic is the internal topic of transaction state, named as Kafka
// names it.
const stateTopic = metadata.TransactionStateTopic

// shard is this process's transaction coordinator for one partition of
// __transaction_state: the state of every transactional id hashed onto it.
// Its mutex guards that state; every change is written (acks=all) before it
// is applied and answered, and at most one change per id is in flight
// (pending), so each is validated against the state its predecessor left.
type shard struct {
	r   *TransactionCoordinator
	id  int32
	log coordinator.Log
	// local and epoch identify a shard on a partition led here; remote
	// shards have local nil and revision, the metadata revision they took
	// over at, and the broker session they loaded in.
	local       *replica.Partition
	epoch       int32
	revision    int64
	brokerEpoch int64
	// coordEpoch is the coordinator epoch markers carry: the partition's
	// leader epoch when the shard loaded.
	coordEpoch int32
	// stale is set when a later coordinator fenced the partition.
	stale atomic.Bool

	ctx    context.Context // ends when the shard is unloaded
	cancel context.CancelFunc
	writer *coordinator.Writer

	mu      sync.Mutex
	loaded  bool
	txns    map[string]*txnMeta
	pending map[string]bool
	// changed is closed (and replaced) whenever a write is applied or
	// fails, for calls waiting for an id to settle.
	changed chan struct{}
}

func newShard(r *TransactionCoordinator, id int32, l coordinator.Log) *shard {
	ctx, cancel := context.WithCancel(context.Background())
	s := &shard{r: r, id: id, log: l, ctx: ctx, cancel: cancel, txns: map[string]*txnMeta{}, pending: map[string]bool{},
		changed: make(chan struct{})}
	s.writer = &coordinator.Writer{Topic: stateTopic, Partition: id, Log: l, Mu: &s.mu, Ctx: ctx, Now: r.now,
		Fenced: func(e *errs.Error) {
			if s.local == nil {
				s.stale.Store(true)
				r.logger.Warn("transaction coordinator shard fenced by a later coordinator; reloading", log.TopicPartition(stateTopic, id), log.Err(e))
			}
		}}
	return s
}

func (s *shard) isLoaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// unload stops the shard; marker writers stop and the next coordinator
// resumes them from the log.
func (s *shard) unload() {
	s.cancel()
	s.log.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false
	s.txns = map[string]*txnMeta{}
}

// load replays the partition completely, then serves, and resumes writing
// the markers of every transaction whose outcome was decided but not
// completed (the previous coordinator died in between).
func (s *shard) load() {
	start := s.r.now()
	ctx := s.ctx
	from, to, err := s.log.Open(ctx)
	if err == nil {
		err = s.log.Replay(ctx, from, to, func(key, value []byte, offset int64) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err := s.applyRecordLocked(key, value); err != nil {
				s.r.logger.Warn("transaction state record skipped", log.TopicPartition(stateTopic, s.id), log.Offset(offset), log.Err(err))
			}
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			s.r.logger.Error("transaction coordinator shard failed to load; it stays unloaded until its ownership changes",
				log.TopicPartition(stateTopic, s.id), log.Err(err))
		}
		return
	}
	s.mu.Lock()
	if ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.loaded = true
	var resume []*txnMeta
	for _, m := range s.txns {
		if m.preparing() {
			resume = append(resume, m)
		}
	}
	n := len(s.txns)
	s.mu.Unlock()
	for _, m := range resume {
		go s.completeTxn(m)
	}
	s.r.m.loaded(s.r.now().Sub(start).Seconds())
	s.r.logger.Info("transaction coordinator shard loaded", log.TopicPartition(stateTopic, s.id), log.Epoch(s.epoch),
		slog.Int("transactional_ids", n), slog.Int("resumed", len(resume)), slog.Duration("duration", s.r.now().Sub(start)), log.Offset(to))
}

// applyRecordLocked applies one record of the partition.
func (s *shard) applyRecordLocked(key, value []byte) error {
	tid, err := decodeTxnKey(key)
	if err != nil {
		return err
	}
	if value == nil {
		delete(s.txns, tid)
		return nil
	}
	m, err := decodeTxn(tid, value)
	if err != nil {
		return err
	}
	s.txns[tid] = m
	return nil
}

// writeLocked persists next as tid's state; once acknowledged it replaces
// the state in memory and then runs after (if set), under the lock. The id
// is pending until then. Called with s.mu held.
func (s *shard) writeLocked(next *txnMeta, after func(m *txnMeta)) <-chan *errs.Error {
	tid := next.tid
	s.pending[tid] = true
	return s.writer.WriteLocked([]coordinator.KV{{Key: txnKey(tid), Value: encodeTxn(next)}}, func(int64) {
		delete(s.pending, tid)
		s.txns[tid] = next
		s.notifyLocked()
		if after != nil {
			after(next)
		}
	}, func(*errs.Error) {
		delete(s.pending, tid)
		s.notifyLocked()
	})
}

// notifyLocked wakes the calls waiting in settle. Called with s.mu held.
func (s *shard) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// settleWait bounds how long a call waits for a transactional id to
// settle before it answers CONCURRENT_TRANSACTIONS.
const settleWait = 2 * time.Second

// settle waits (up to settleWait or ctx) until tid has no write in flight
// and no transaction ending: the next transaction's first
// AddPartitionsToTxn usually arrives while the previous one's markers are
// being written, and holding it for the few milliseconds that takes spares
// the client a CONCURRENT_TRANSACTIONS and a retry after its backoff.
func (s *shard) settle(ctx context.Context, tid string) {
	timer := time.NewTimer(settleWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		m := s.txns[tid]
		busy := s.pending[tid] || (m != nil && m.preparing())
		ch := s.changed
		s.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// expireLocked removes tid: a tombstone is written, and the id is
// forgotten once it is acknowledged. Called with s.mu held.
func (s *shard) expireLocked(tid string) {
	s.pending[tid] = true
	s.writer.WriteLocked([]coordinator.KV{{Key: txnKey(tid)}}, func(int64) {
		delete(s.pending, tid)
		delete(s.txns, tid)
		s.notifyLocked()
	}, func(*errs.Error) {
		delete(s.pending, tid)
		s.notifyLocked()
	})
}

// prepareLocked persists the end of m's open transaction and, once it is
// persisted, starts writing its markers. Called with s.mu held.
func (s *shard) prepareLocked(next *txnMeta) <-chan *errs.Error {
	return s.writeLocked(next, func(m *txnMeta) {
		s.r.m.decided(m)
		go s.completeTxn(m)
	})
}

// completeTxn writes the markers of a Prepare* state to every partition of
// its transaction, retrying until each is written, and then persists
// Complete*. It gives up only when the shard unloads (its successor resumes
// from the log).
func (s *shard) completeTxn(m *txnMeta) {
	if !s.r.markers.writeAll(s.ctx, s, m) {
		return
	}
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		s.mu.Lock()
		cur, ok := s.txns[m.tid]
		if !ok || cur.state != m.state || cur.lastProducerID != m.lastProducerID || cur.lastEpoch != m.lastEpoch {
			s.mu.Unlock()
			return // completed already (a concurrent resume)
		}
		if s.pending[m.tid] {
			s.mu.Unlock()
		} else {
			done := s.writeLocked(cur.complete(s.r.now()), nil)
			s.mu.Unlock()
			e := coordinator.Await(s.ctx, stateTopic, done)
			if e == nil {
				return
			}
			if e.Code == errs.NotCoordinator {
				return
			}
			s.r.logger.Warn("transaction completion not persisted; retrying", slog.String("transactional_id", m.tid), log.Err(e))
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// withPID runs fn with s.mu held. When fn needs a producer id never
// handed out (a new transactional id, an exhausted epoch) and pid is -1, it
// returns true without changing anything; withPID then gets one outside the
// lock (it may wait on the controller) and runs fn again with it. An id
// fetched but not used is skipped for good, never reused.
func (s *shard) withPID(ctx context.Context, fn func(pid int64) (needPID bool)) *errs.Error {
	pid := int64(-1)
	for range 3 {
		s.mu.Lock()
		need := fn(pid)
		s.mu.Unlock()
		if !need {
			return nil
		}
		var err error
		if pid, err = s.r.newProducerID(ctx); err != nil {
			return errs.From(err)
		}
	}
	return errs.New(errs.ConcurrentTransactions, "the transactional id kept changing while a producer id was fetched; retry")
}

// timedOut reports whether m's open transaction has run past its timeout.
func timedOut(m *txnMeta, now time.Time) bool {
	return m.state == kmsg.TransactionStateOngoing && m.startMs >= 0 && now.UnixMilli()-m.startMs > int64(m.timeoutMs)
}

// expired reports whether m is a transactional id without an open
// transaction that has not changed for longer than after.
func expired(m *txnMeta, now time.Time, after time.Duration) bool {
	switch m.state {
	case kmsg.TransactionStateEmpty, kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort:
		return after > 0 && now.UnixMilli()-m.lastUpdateMs > after.Milliseconds()
	}
	return false
}

// tick aborts transactions open longer than their timeout
// (transaction.timeout.ms): the abort bumps the epoch, so the producer that
// hung is fenced. It also removes transactional ids idle past
// transactional.id.expiration.ms.
func (s *shard) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return
	}
	for tid, m := range s.txns {
		if s.pending[tid] {
			continue
		}
		if expired(m, now, s.r.cfg.IDExpiration) {
			s.r.logger.Info("transactional id expired", slog.String("transactional_id", tid), slog.Int64("producer_id", m.producerID))
			s.expireLocked(tid)
			continue
		}
		if !timedOut(m, now) {
			continue
		}
		s.r.logger.Info("transaction timed out; aborting it", slog.String("transactional_id", tid),
			slog.Int64("producer_id", m.producerID), slog.Int("producer_epoch", int(m.epoch)), slog.Int64("open_ms", now.UnixMilli()-m.startMs))
		if !needsNewPID(m.epoch) {
			s.prepareLocked(m.fence(now, nil))
			continue
		}
		go func() {
			_ = s.withPID(s.ctx, func(pid int64) bool { // failures: the next tick tries again
				m, ok := s.txns[tid]
				if !ok || !timedOut(m, now) || s.pending[tid] {
					return false
				}
				if pid < 0 {
					return true
				}
				s.prepareLocked(m.fence(now, func() int64 { return pid }))
				return false
			})
		}()
	}
}
