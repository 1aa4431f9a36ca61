package groupcoord

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/replica"
)

// shard is this process's coordinator for one partition of the offsets
// topic. Its mutex guards every group of the partition; writes are appended
// under it (so the log order is the order of validation) and applied when
// acknowledged.
type shard struct {
	c   *GroupCoordinator
	id  int32
	log coordinator.Log
	// local and epoch identify a shard on a partition led here (the
	// replica and the leader epoch it loaded in); remote shards have
	// local nil and revision, the metadata revision they took over at.
	local       *replica.Partition
	epoch       int32
	revision    int64
	brokerEpoch int64
	// stale is set when the leader refused a write because a later
	// coordinator fenced the partition: the next reconcile reloads it.
	stale atomic.Bool

	ctx    context.Context // ends when the shard is unloaded
	cancel context.CancelFunc

	mu     sync.Mutex
	loaded bool
	groups map[string]*group
	writer *coordinator.Writer
	// txns are the producers' open transactions with offsets here, and
	// ended the last transaction of each producer a marker ended
	// (txnoffsets.go).
	txns  map[int64]*openTxn
	ended map[int64]endedTxn
	// checks are the producers' transactions being checked with their
	// transaction coordinator before offsets open them here; a marker
	// withdraws the producer's (txnoffsets.go).
	checks map[int64]*txnCheck
	// nextExpiry is when offsets of empty groups are next checked.
	nextExpiry time.Time
}

func newLocalShard(c *GroupCoordinator, id int32, p *replica.Partition, epoch int32) *shard {
	s := newShard(c, id, coordinator.NewLocalLog(OffsetsTopic, p, epoch))
	s.local, s.epoch = p, epoch
	return s
}

func newRemoteShard(c *GroupCoordinator, id int32, revision int64) *shard {
	s := newShard(c, id, coordinator.NewRemoteLog(c.env(), OffsetsTopic, groupCoordinatorRole, id, revision))
	s.revision = revision
	return s
}

func newShard(c *GroupCoordinator, id int32, l coordinator.Log) *shard {
	ctx, cancel := context.WithCancel(context.Background())
	s := &shard{c: c, id: id, log: l, ctx: ctx, cancel: cancel, groups: map[string]*group{}, txns: map[int64]*openTxn{}, ended: map[int64]endedTxn{},
		checks: map[int64]*txnCheck{}}
	s.writer = &coordinator.Writer{Topic: OffsetsTopic, Partition: id, Log: l, Mu: &s.mu, Ctx: ctx, Now: c.now,
		Fenced: func(e *errs.Error) {
			if s.local == nil {
				s.stale.Store(true)
				c.logger.Warn("group coordinator shard fenced by a later coordinator; reloading", log.TopicPartition(OffsetsTopic, s.id), log.Err(e))
			}
		}}
	return s
}

func (s *shard) isLoaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// unload stops the shard: waiting calls answer NOT_COORDINATOR, and members
// find the new coordinator.
func (s *shard) unload() {
	s.cancel()
	s.log.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false
	for _, g := range s.groups {
		if g.classic != nil {
			g.classic.abortWaiters(errs.New(errs.NotCoordinator, "group %q: this node stopped coordinating it; find the coordinator again", g.id))
		}
	}
	s.groups = map[string]*group{}
	for _, t := range s.txns {
		if t.idle != nil {
			close(t.idle) // a waiting marker finds the shard unloaded
			t.idle = nil
		}
	}
	s.txns, s.ended, s.checks = map[int64]*openTxn{}, map[int64]endedTxn{}, map[int64]*txnCheck{}
}

// load replays the partition from its log start to the end the log has
// once earlier coordinators are fenced and their writes committed:
// everything a previous coordinator acknowledged is then applied, and
// nothing it did not. Only then does the shard serve.
func (s *shard) load() {
	start := s.c.now()
	ctx := s.ctx
	from, to, err := s.log.Open(ctx)
	if err == nil {
		err = s.log.ReplayAll(ctx, from, to, func(r *coordinator.LogRecord) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err := s.applyLogRecordLocked(r); err != nil {
				s.c.logger.Warn("offsets topic record skipped", log.TopicPartition(OffsetsTopic, s.id), log.Offset(r.Offset), log.Err(err))
			}
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			s.c.logger.Error("group coordinator shard failed to load; it stays unloaded until its ownership changes", log.TopicPartition(OffsetsTopic, s.id), log.Err(err))
		}
		return
	}
	now := s.c.now()
	s.mu.Lock()
	if ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	// Restored members get a full session from now to show up.
	for _, g := range s.groups {
		if g.classic != nil {
			g.classic.restoreSessions(now)
		}
	}
	s.loaded = true
	s.logTxnStateLocked()
	s.nextExpiry = now.Add(s.c.cfg.RetentionCheckInterval)
	n := len(s.groups)
	s.mu.Unlock()
	s.c.m.loadTime.Record(context.Background(), now.Sub(start).Seconds())
	s.c.logger.Info("group coordinator shard loaded", log.TopicPartition(OffsetsTopic, s.id), log.Epoch(s.epoch),
		groupsAttr(n), durationAttr(now.Sub(start)), log.Offset(to))
}

// kv is one record to write.
type kv struct{ key, value []byte }

// writeLocked appends records with acks=all in the shard's leader epoch and
// returns a channel that gets the outcome; once acknowledged, apply runs
// under the shard's lock (coordinator.Writer). Called with s.mu held.
func (s *shard) writeLocked(recs []kv, apply func(base int64), failed func(err *errs.Error)) <-chan *errs.Error {
	out := make([]coordinator.KV, len(recs))
	for i, r := range recs {
		out[i] = coordinator.KV{Key: r.key, Value: r.value}
	}
	return s.writer.WriteLocked(out, apply, failed)
}

// await waits for a write's outcome or for ctx (coordinator.Await).
func await(ctx context.Context, done <-chan *errs.Error) *errs.Error {
	return coordinator.Await(ctx, OffsetsTopic, done)
}

// tick runs timers: session expiry, rebalance deadlines and, at the
// retention check interval, expiry of offsets of empty groups.
func (s *shard) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return
	}
	for _, g := range s.groups {
		if g.classic != nil {
			s.classicTickLocked(g, now)
		}
		if g.consumer != nil {
			s.consumerTickLocked(g, now)
		}
	}
	if !now.Before(s.nextExpiry) {
		s.nextExpiry = now.Add(s.c.cfg.RetentionCheckInterval)
		s.expireOffsetsLocked(now)
	}
}
