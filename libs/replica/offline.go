package replica

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/storage"
)

// A replica goes offline when its log fails an I/O operation (storage.Log
// logs the failure at ERROR with the file and the cause). Kafka then keeps
// the log directory offline until the broker restarts. Here, when the cause
// can pass (a full disk, an I/O error: storage.Transient), the manager
// reopens the log in the background with exponential backoff, through the
// log's crash recovery (storage.Log.Reopen), and the replica rejoins as it
// was: a leader serves again, a follower's fetcher appends again and the
// leader takes it back into the ISR once it has caught up. Offline replicas
// are retried one at a time, so a disk that stays full costs one attempt
// per replica per backoff period.

// offlineTracker is the manager's record of offline replicas.
type offlineTracker struct {
	wake chan struct{} // buffered(1): a replica went offline
	// states is owned by the recovery goroutine.
	states map[*Partition]*offlineState
	// Counters, set by RegisterMetrics (nil until then).
	wentOffline, cameBack metric.Int64Counter
}

type offlineState struct {
	since    time.Time
	next     time.Time // next reopen attempt
	backoff  time.Duration
	attempts int
	gaveUp   bool // the cause is not transient: reported once, not retried
}

// noteOffline is every log's OnOffline hook. It runs inside the failing
// log call (possibly under the log's locks), so it only counts and wakes
// the recovery loop; the log's own ERROR carries topic, partition, path and
// cause.
func (m *Manager) noteOffline(error) {
	if c := m.off.wentOffline; c != nil {
		c.Add(context.Background(), 1)
	}
	select {
	case m.off.wake <- struct{}{}:
	default:
	}
}

// runRecovery reopens offline replicas until ctx ends.
func (m *Manager) runRecovery(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := m.retryOffline(ctx)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-m.off.wake:
		case <-timer.C:
		}
	}
}

// retryOffline tries to reopen every offline replica that is due and
// returns how long until the next one is.
func (m *Manager) retryOffline(ctx context.Context) time.Duration {
	now := time.Now()
	wait := time.Hour
	live := map[*Partition]bool{}
	for _, p := range m.Partitions() {
		live[p] = true
		cause := p.log.Err()
		if cause == nil || ctx.Err() != nil {
			continue
		}
		st := m.off.states[p]
		if st == nil {
			st = &offlineState{since: now, next: now.Add(m.cfg.OfflineRetryMin), backoff: m.cfg.OfflineRetryMin}
			m.off.states[p] = st
		}
		attrs := []any{log.TopicPartition(p.tp.Topic, p.tp.Partition), slog.String("path", p.dir), log.Err(cause)}
		if !storage.Transient(cause) {
			if !st.gaveUp {
				st.gaveUp = true
				m.logger.Error("replica offline until restart: the failure is not one that passes", attrs...)
			}
			continue
		}
		if now.Before(st.next) {
			wait = min(wait, st.next.Sub(now))
			continue
		}
		if st.attempts == 0 {
			m.logger.Warn("replica offline; reopening it in the background once the disk is writable", attrs...)
		}
		st.attempts++
		if err := p.log.Reopen(); err != nil {
			st.backoff = min(2*st.backoff, m.cfg.OfflineRetryMax)
			st.next = time.Now().Add(st.backoff)
			wait = min(wait, st.backoff)
			if !storage.Transient(p.log.Err()) {
				continue // reported as given up on the next pass
			}
			m.logger.Warn("replica still offline", log.TopicPartition(p.tp.Topic, p.tp.Partition), slog.String("path", p.dir),
				log.Err(err), slog.Int("attempts", st.attempts), slog.Duration("retry_in", st.backoff))
			continue
		}
		delete(m.off.states, p)
		if c := m.off.cameBack; c != nil {
			c.Add(context.Background(), 1)
		}
		p.mu.Lock()
		role := "follower"
		if p.isLeader {
			role = "leader"
			p.tryAdvanceHWLocked()
			p.advanceDurableLocked()
		}
		p.wakeLocked()
		p.mu.Unlock()
		m.logger.Info("replica back online", log.TopicPartition(p.tp.Topic, p.tp.Partition), slog.String("path", p.dir),
			slog.String("role", role), slog.Duration("offline_for", time.Since(st.since)), slog.Int("attempts", st.attempts),
			log.Offset(p.log.LogEndOffset()))
		// Fetchers wait on role changes; this wakes them to resume at once.
		m.mu.Lock()
		m.signal()
		m.mu.Unlock()
	}
	for p := range m.off.states {
		if !live[p] {
			delete(m.off.states, p)
		}
	}
	return wait
}
