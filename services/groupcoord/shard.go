package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/replica"
)

// shard is this process's coordinator for one partition of the offsets
// topic, loaded in one leader epoch. Its mutex guards every group of the
// partition; writes are appended under it (so the log order is the order of
// validation) and applied when acknowledged.
type shard struct {
	c     *GroupCoordinator
	id    int32
	p     *replica.Partition
	epoch int32

	ctx    context.Context // ends when the shard is unloaded
	cancel context.CancelFunc

	mu      sync.Mutex
	loaded  bool
	groups  map[string]*group
	builder *record.Builder
	// nextExpiry is when offsets of empty groups are next checked.
	nextExpiry time.Time
}

func newShard(c *GroupCoordinator, id int32, p *replica.Partition, epoch int32) *shard {
	ctx, cancel := context.WithCancel(context.Background())
	return &shard{c: c, id: id, p: p, epoch: epoch, ctx: ctx, cancel: cancel,
		groups: map[string]*group{}, builder: record.NewBuilder(record.CodecNone)}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false
	for _, g := range s.groups {
		if g.classic != nil {
			g.classic.abortWaiters(errs.New(errs.NotCoordinator, "group %q: this node stopped coordinating it; find the coordinator again", g.id))
		}
	}
	s.groups = map[string]*group{}
}

// load replays the partition from its log start to the log end it has when
// loading starts, after waiting for the high watermark to reach that end:
// everything a previous coordinator acknowledged is then applied, and
// nothing it did not. Only then does the shard serve.
func (s *shard) load(ctx context.Context) {
	start := s.c.now()
	err := s.replay(ctx)
	if err != nil {
		if s.ctx.Err() == nil && ctx.Err() == nil {
			s.c.logger.Error("group coordinator shard failed to load; it stays unloaded until leadership changes", log.TopicPartition(OffsetsTopic, s.id), log.Err(err))
		}
		return
	}
	now := s.c.now()
	s.mu.Lock()
	if s.ctx.Err() != nil {
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
	s.nextExpiry = now.Add(s.c.cfg.RetentionCheckInterval)
	n := len(s.groups)
	s.mu.Unlock()
	s.c.m.loadTime.Record(context.Background(), now.Sub(start).Seconds())
	s.c.logger.Info("group coordinator shard loaded", log.TopicPartition(OffsetsTopic, s.id), log.Epoch(s.epoch),
		groupsAttr(n), durationAttr(now.Sub(start)))
}

func (s *shard) replay(ctx context.Context) error {
	v := s.p.View()
	target := v.LogEnd
	// Wait for the high watermark to cover the log end: records above it
	// were written by the previous leader and are not known to be
	// acknowledged until then.
	for {
		v = s.p.View()
		if !v.IsLeader || v.LeaderEpoch != s.epoch {
			return errors.New("leadership moved while loading")
		}
		if v.HighWatermark >= target {
			break
		}
		ch := s.p.Changed()
		if s.p.View().HighWatermark >= target {
			break
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		case <-s.ctx.Done():
			return s.ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var it record.Iterator
	offset := v.LogStart
	epoch := s.epoch
	for offset < target {
		res, _, _, err := s.p.ReadForConsumer(offset, 1<<20, &epoch, nil)
		if err != nil {
			return fmt.Errorf("reading %s-%d at %d: %w", OffsetsTopic, s.id, offset, err)
		}
		buf := res.AppendTo(nil)
		next := res.NextOffset
		res.Release()
		if next <= offset {
			return fmt.Errorf("reading %s-%d at %d: no progress (log start %d, end %d)", OffsetsTopic, s.id, offset, v.LogStart, target)
		}
		it.Reset(buf)
		s.mu.Lock()
		for it.Next() {
			if it.Batch().Attributes.Control() {
				continue
			}
			r := it.Record()
			if err := s.applyRecordLocked(r.Key, r.Value, r.Offset); err != nil {
				s.c.logger.Warn("offsets topic record skipped", log.TopicPartition(OffsetsTopic, s.id), log.Offset(r.Offset), log.Err(err))
			}
		}
		s.mu.Unlock()
		if err := it.Err(); err != nil {
			return fmt.Errorf("decoding %s-%d at %d: %w", OffsetsTopic, s.id, offset, err)
		}
		offset = next
	}
	return nil
}

// kv is one record to write.
type kv struct{ key, value []byte }

// writeLocked appends records with acks=all in the shard's leader epoch and
// returns a function that waits for the acknowledgement and then, under the
// shard's lock, runs apply (with the first record's offset) unless the
// write failed. The wait outlives the caller's context (apply runs whenever
// the acknowledgement comes, so memory never lags an acknowledged write);
// the caller may stop waiting earlier. Called with s.mu held.
func (s *shard) writeLocked(recs []kv, apply func(base int64), failed func(err *errs.Error)) <-chan *errs.Error {
	done := make(chan *errs.Error, 1)
	fail := func(e *errs.Error) {
		if failed != nil {
			failed(e)
		}
		done <- e
	}
	s.builder.Reset()
	now := s.c.now().UnixMilli()
	for _, r := range recs {
		if err := s.builder.Append(&record.Record{Timestamp: now, Key: r.key, Value: r.value}); err != nil {
			fail(errs.New(errs.UnknownServerError, "encoding offsets topic records: %v", err))
			return done
		}
	}
	batch, err := s.builder.Build()
	if err != nil {
		fail(errs.New(errs.UnknownServerError, "encoding offsets topic batch: %v", err))
		return done
	}
	batch = append([]byte(nil), batch...)
	epoch := s.epoch
	res, appendedIn, err := s.p.Append(batch, replica.AcksAll, &epoch, record.FromCoordinator)
	if err != nil {
		fail(s.writeError(err))
		return done
	}
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		err := s.p.AwaitAck(ctx, res, appendedIn, replica.AcksAll)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			fail(s.writeError(err))
			return
		}
		if s.ctx.Err() != nil {
			fail(errs.New(errs.NotCoordinator, "this node stopped coordinating %s-%d", OffsetsTopic, s.id))
			return
		}
		apply(res.FirstOffset)
		done <- nil
	}()
	return done
}

// writeError maps a failed append as Kafka's coordinator does: a lost
// leadership means NOT_COORDINATOR (find the new one), a write that could
// not reach its replicas COORDINATOR_NOT_AVAILABLE (retry), anything else
// an unknown server error.
func (s *shard) writeError(err error) *errs.Error {
	switch errs.CodeOf(err) {
	case errs.NotLeaderOrFollower, errs.FencedLeaderEpoch, errs.UnknownLeaderEpoch:
		return errs.New(errs.NotCoordinator, "this node no longer leads %s-%d: %v", OffsetsTopic, s.id, err)
	case errs.NotEnoughReplicas, errs.NotEnoughReplicasAfterAppend, errs.RequestTimedOut, errs.UnknownTopicOrPartition, errs.StorageError:
		return errs.New(errs.CoordinatorNotAvailable, "writing %s-%d: %v", OffsetsTopic, s.id, err)
	}
	if s.ctx.Err() != nil {
		return errs.New(errs.NotCoordinator, "this node stopped coordinating %s-%d", OffsetsTopic, s.id)
	}
	return errs.New(errs.UnknownServerError, "writing %s-%d: %v", OffsetsTopic, s.id, err)
}

// await waits for a write's outcome or for ctx. A write still pending when
// ctx ends is answered REQUEST_TIMED_OUT: its outcome is unknown.
func await(ctx context.Context, done <-chan *errs.Error) *errs.Error {
	select {
	case e := <-done:
		return e
	case <-ctx.Done():
		return errs.New(errs.RequestTimedOut, "the write to the offsets topic was not acknowledged before the call ended; it may still apply")
	}
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
