package controller

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
)

// reconcileLoop runs while this controller is active. On every metadata
// change, and at least every 200 ms, it fences nodes whose session expired
// and brings every partition in line with the nodes' states (leaders on
// fenced or stopping nodes replaced from the ISR, dead members out of ISRs,
// finished reassignments completed). Being level-triggered, it needs no
// memory of what a previous controller was doing: a new active controller
// simply reconciles what it finds.
func (c *Controller) reconcileLoop(t *term) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastRebalance := time.Now()
	for {
		changed := c.cache.Changed()
		c.expireSessions(t)
		preferred := c.cfg.LeaderImbalanceCheckInterval > 0 && time.Since(lastRebalance) >= c.cfg.LeaderImbalanceCheckInterval
		if preferred {
			lastRebalance = time.Now()
		}
		if err := c.reconcilePartitions(t, preferred && c.imbalanced()); err != nil && t.ctx.Err() == nil && !errors.Is(err, errConflict) {
			c.logger.Warn("reconciling partitions failed; will retry", log.Err(err))
		}
		select {
		case <-t.ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// partitionWrite is one computed partition change.
type partitionWrite struct {
	topic   string
	p       int32
	modRev  int64
	rec     *metastorev1.PartitionRecord
	why     string
	unclean bool // an out-of-sync replica was elected
}

// reconcilePartition computes the change the current state calls for in
// one partition: a finished reassignment completed, then the partition rules
// (reconcileOrUnclean) with the topic's min.insync.replicas and
// unclean.leader.election.enable. It returns nil when nothing changes.
func (s *state) reconcilePartition(topic string, p int32, r *versioned[*metastorev1.PartitionRecord], preferred bool) *partitionWrite {
	minISR := s.minISR(topic)
	rec := r.val
	why := ""
	if done := finishReassignment(rec, s.live, minISR, false); done != nil {
		rec, why = done, "reassignment complete"
	}
	next, changed, unclean := reconcileOrUnclean(rec.GetState(), s.live, minISR, preferred, s.uncleanElection(topic))
	if changed {
		cp := proto.Clone(rec).(*metastorev1.PartitionRecord)
		cp.State = next
		rec = cp
		switch {
		case unclean:
			why = "unclean leader election"
		case why == "":
			why = "node state"
		}
	}
	if rec == r.val {
		return nil
	}
	return &partitionWrite{topic: topic, p: p, modRev: r.modRev, rec: rec, why: why, unclean: unclean}
}

// reconcilePartitions computes and writes every partition change the
// current state calls for, in transactions of at most maxTxnOps partitions.
// With preferred set it also moves leadership back to preferred replicas.
func (c *Controller) reconcilePartitions(t *term, preferred bool) error {
	c.mu.RLock()
	var writes []partitionWrite
	st := c.st
	st.eachPartition(func(topic string, p int32, r *versioned[*metastorev1.PartitionRecord]) {
		if w := st.reconcilePartition(topic, p, r, preferred); w != nil {
			w.rec.ControllerEpoch = t.epoch
			writes = append(writes, *w)
		}
	})
	c.mu.RUnlock()
	for len(writes) > 0 {
		n := min(len(writes), maxTxnOps)
		batch := writes[:n]
		writes = writes[n:]
		x := &txn{}
		for _, w := range batch {
			c.put(x, metastore.PartitionKey(w.topic, w.p), w.modRev, w.rec)
		}
		if _, err := c.commit(t.ctx, t, x); err != nil {
			return err
		}
		for _, w := range batch {
			s := w.rec.GetState()
			c.logger.Info("partition state changed", log.TopicPartition(w.topic, w.p), slog.String("why", w.why),
				slog.Int("leader", int(s.GetLeaderId())), log.Epoch(s.GetLeaderEpoch()), slog.Any("isr", s.GetIsr()),
				slog.Any("elr", s.GetEligibleLeaderReplicas()))
			if w.unclean {
				// Like the admin path (ElectLeaders with ELECTION_TYPE_UNCLEAN):
				// whatever the old in-sync replicas had above the new
				// leader's log end is gone once they return and truncate.
				c.logger.Warn("unclean leader election: an out-of-sync replica leads; records the new leader does not have are lost",
					log.TopicPartition(w.topic, w.p), slog.Int("new_leader", int(s.GetLeaderId())), log.Epoch(s.GetLeaderEpoch()),
					slog.String("lost_range", "above the new leader's log end offset"),
					slog.String("config", "unclean.leader.election.enable=true"))
			}
			if s.GetLeaderId() < 0 {
				c.logger.Warn("partition has no leader: no in-sync or eligible replica is alive", log.TopicPartition(w.topic, w.p),
					slog.Any("isr", s.GetIsr()))
			}
		}
	}
	return nil
}

// imbalanced reports whether some node leads fewer of its preferred
// partitions than leader.imbalance.per.broker.percentage allows.
func (c *Controller) imbalanced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	preferredOf := map[int32]int{}
	notLeading := map[int32]int{}
	c.st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
		s := r.val.GetState()
		pref := firstReplica(s)
		if pref < 0 {
			return
		}
		preferredOf[pref]++
		if s.GetLeaderId() != pref && c.st.live(pref) == nodeAlive {
			notLeading[pref]++
		}
	})
	for id, n := range preferredOf {
		if float64(notLeading[id])*100/float64(n) > float64(c.cfg.LeaderImbalancePercentage) {
			return true
		}
	}
	return false
}

// waitPartitions polls until pred holds for the view or ctx ends.
func (c *Controller) waitReconciled(ctx context.Context, pred func(st *state) bool) bool {
	for {
		changed := c.cache.Changed()
		c.mu.RLock()
		ok := pred(c.st)
		c.mu.RUnlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
