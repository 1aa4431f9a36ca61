package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client quotas on the Kafka listener (ServerOptions.Quotas).
//
// A Produce request's frame size counts against producer_byte_rate when it
// is read, a Fetch response's record bytes against consumer_byte_rate when
// it is ready, and the time the handler takes to answer (its synchronous
// part: waiting for replication is not handling) against
// request_percentage. A client over any of them is told to back off in the
// response's throttle_time_ms, which is answered at once, and the
// connection is muted for that time: the next request it sends is read but
// not handled until the throttle time has passed (KIP-219). A client that
// honours throttle_time_ms waits before sending it and never notices the
// mute; one that does not is held all the same.

const (
	produceKey int16 = 0
	fetchKey   int16 = 1
)

// quotaExempt reports whether requests of key are outside
// request_percentage: the connection's own handshake.
func quotaExempt(key int16) bool {
	return key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey
}

// throttler is a response with a throttle_time_ms field.
type throttler interface {
	Throttle() (int32, bool)
	SetThrottle(int32)
}

// fetchBytes is the record bytes a Fetch response carries.
func fetchBytes(resp *kmsg.FetchResponse) int {
	n := 0
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			n += len(resp.Topics[i].Partitions[j].RecordBatches)
		}
	}
	return n
}

// applyThrottle sets d as resp's throttle time (keeping a longer one the
// handler set) and mutes the connection for it.
func (c *conn) applyThrottle(resp kmsg.Response, d time.Duration) {
	if d <= 0 {
		return
	}
	ms := int32(min(d.Milliseconds()+1, 1<<31-1))
	if t, ok := resp.(throttler); ok {
		if cur, _ := t.Throttle(); cur < ms {
			t.SetThrottle(ms)
		}
	}
	c.mute(d)
}

// mute holds the connection's next request for d.
func (c *conn) mute(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.mutedUntil.Load()
		if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
}

// waitMuted holds the reader while the connection is muted. It reports
// false when the connection closes or the server stops meanwhile.
func (c *conn) waitMuted() bool {
	d := time.Until(time.Unix(0, c.mutedUntil.Load()))
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	case <-c.stop:
		return false
	}
}
