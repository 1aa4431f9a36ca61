package replica

import (
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/topicconfig"
)

// Reassignment traffic is throttled where follower fetches are served: the
// leader knows from metadata which of its followers a reassignment is
// adding, and this side works the same whether the follower's node fetches
// for itself or a replication worker fetches on its behalf. One token
// bucket per node is shared by every replica being added that the node's
// leaders serve, so leader.replication.throttled.rate bounds what one node
// sends; a node receiving replicas from several leaders receives up to that
// rate from each. Followers in the replica set before the reassignment are
// never throttled: the ISR and acks=all latency do not depend on the
// throttle.

// throttleBurst is how much unused rate the bucket keeps: a short burst
// after an idle spell, not a second's worth that would blur the limit.
const throttleBurst = 100 * time.Millisecond

// minThrottledChunk keeps chunks of a throttled replica large enough that
// a very low rate does not turn into a message per record.
const minThrottledChunk = 16 << 10

// throttle is a token bucket over bytes. A chunk is charged whole once it
// is read, so the balance may go below zero; nothing more is sent until it
// is back at zero. Over any span the bytes sent are at most the rate times
// the span, plus the burst and one chunk.
type throttle struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	now    func() time.Time
}

func (t *throttle) refillLocked(rate float64) {
	now := t.now()
	if !t.last.IsZero() {
		t.tokens += rate * now.Sub(t.last).Seconds()
	}
	t.last = now
	if burst := rate * throttleBurst.Seconds(); t.tokens > burst {
		t.tokens = burst
	}
}

// wait returns how long until the next chunk may be read (0: now).
func (t *throttle) wait(rate float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refillLocked(rate)
	if t.tokens >= 0 {
		return 0
	}
	return time.Duration(-t.tokens / rate * float64(time.Second))
}

// take charges n bytes sent.
func (t *throttle) take(n int, rate float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refillLocked(rate)
	t.tokens -= float64(n)
}

// throttledChunk is the chunk size for a throttled replica: a tenth of a
// second's worth of the rate, so one chunk never runs far past the limit.
func throttledChunk(rate float64, chunk int) int {
	return min(chunk, max(minThrottledChunk, int(rate*throttleBurst.Seconds())))
}

// reassignmentRate returns the throttle that applies to what this node
// sends replica for tp: the cluster's leader.replication.throttled.rate
// when a reassignment is adding replica to tp, else 0 (no throttle).
func (m *Manager) reassignmentRate(replica int32, tp TP) float64 {
	img := m.cache.Load()
	rate := topicconfig.ThrottledRate(img.ClusterConfigs)
	if rate == 0 {
		return 0
	}
	ps, ok := img.Partition(tp.Topic, tp.Partition)
	if !ok || !slices.Contains(ps.GetAddingReplicas(), replica) {
		return 0
	}
	return rate
}

// after returns a channel closed after d.
func after(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
