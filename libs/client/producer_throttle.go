package client

import (
	"sync/atomic"
	"time"
)

// A node answers a produce request of a client over its quota
// (producer_byte_rate, request_percentage) with throttle_time_ms, and
// reads that client's next request only once the time has passed. The
// producer honours it as Kafka clients do (KIP-219): it sends nothing more
// to that node until then, so its requests wait in its own queue rather
// than in the network.

// throttleStats counts the throttles a producer was answered.
type throttleStats struct {
	count atomic.Int64
	total atomic.Int64 // ns
}

// Throttled returns how many produce responses told the producer to back
// off because its client was over a quota, and the sum of their throttle
// times.
func (p *Producer) Throttled() (count int64, total time.Duration) {
	return p.throttle.count.Load(), time.Duration(p.throttle.total.Load())
}

// throttled notes a response's throttle time.
func (c *prodConn) throttled(ms int32) {
	if ms <= 0 {
		return
	}
	d := time.Duration(ms) * time.Millisecond
	c.p.throttle.count.Add(1)
	c.p.throttle.total.Add(int64(d))
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.throttledUntil.Load()
		if cur >= until || c.throttledUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitThrottle waits until the node's throttle ends or the producer
// closes.
func (c *prodConn) waitThrottle() {
	d := time.Until(time.Unix(0, c.throttledUntil.Load()))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.p.ctx.Done():
	}
}
