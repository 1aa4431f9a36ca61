package replica

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// maxTraced bounds the traced appends a partition remembers.
const maxTraced = 64

// tracedAppend is a traced produce waiting for replication: its span gets
// an event as each follower catches up to it, and followers' appends of
// its records join its trace through the chunk that carries them.
type tracedAppend struct {
	last     int64
	span     trace.Span
	carrier  map[string]string
	notified map[int32]bool
}

// TraceAppend registers a traced append that ends at offset last. The
// caller ends the span, and calls the returned function when done waiting.
// A follower woken before it is registered sends the records without the
// trace: AppendTraced registers as it appends.
func (p *Partition) TraceAppend(last int64, span trace.Span, carrier map[string]string) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.traceAppendLocked(last, span, carrier)
}

func (p *Partition) traceAppendLocked(last int64, span trace.Span, carrier map[string]string) func() {
	t := &tracedAppend{last: last, span: span, carrier: carrier, notified: map[int32]bool{}}
	p.traced = append(p.traced, t)
	if len(p.traced) > maxTraced {
		p.traced = p.traced[len(p.traced)-maxTraced:]
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.traced {
			if x == t {
				p.traced = append(p.traced[:i], p.traced[i+1:]...)
				return
			}
		}
	}
}

// traceFollowerLocked adds an event to every traced append a follower has
// just replicated.
func (p *Partition) traceFollowerLocked(replica int32, leo int64) {
	for _, t := range p.traced {
		if leo > t.last && !t.notified[replica] {
			t.notified[replica] = true
			t.span.AddEvent("replicated", trace.WithAttributes(attribute.Int("replica", int(replica)), attribute.Int64("log_end_offset", leo)))
		}
	}
}

// traceContextFor returns the trace context of the newest traced append
// whose records lie in [from, to).
func (p *Partition) traceContextFor(from, to int64) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.traced) - 1; i >= 0; i-- {
		if t := p.traced[i]; t.last >= from && t.last < to {
			return t.carrier
		}
	}
	return nil
}
