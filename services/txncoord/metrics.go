package txncoord

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics are the role's instruments.
type metrics struct {
	ended         metric.Int64Counter
	markerRetries metric.Int64Counter
	loadTime      metric.Float64Histogram
}

func newMetrics(m metric.Meter, r *TransactionCoordinator) *metrics {
	out := &metrics{}
	// Errors from instrument creation only come from invalid names, which
	// these are not.
	out.ended, _ = m.Int64Counter("sluice.txn.ended",
		metric.WithDescription("Transactions whose outcome was decided, by outcome (commit, abort) and whether the abort fenced the producer (a timeout, a new producer, an operator)."))
	out.markerRetries, _ = m.Int64Counter("sluice.txn.marker.retries",
		metric.WithDescription("Rounds of transaction markers retried because a partition's leader did not write them."))
	out.loadTime, _ = m.Float64Histogram("sluice.txn.coordinator.load.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to replay a __transaction_state partition before serving it."))
	_, _ = m.Int64ObservableGauge("sluice.txn.ongoing", metric.WithDescription("Open transactions coordinated here."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			n, _ := r.ongoing()
			o.Observe(int64(n))
			return nil
		}))
	_, _ = m.Float64ObservableGauge("sluice.txn.ongoing.max_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest open transaction coordinated here (0 without any): a hanging transaction shows here before its timeout aborts it."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			_, age := r.ongoing()
			o.Observe(age)
			return nil
		}))
	return out
}

// ongoing counts the open transactions of every loaded shard and the age
// of the oldest, in seconds.
func (r *TransactionCoordinator) ongoing() (n int, maxAge float64) {
	now := r.now().UnixMilli()
	for _, s := range r.loadedShards() {
		s.mu.Lock()
		for _, m := range s.txns {
			if m.state == kmsg.TransactionStateOngoing {
				n++
				if m.startMs >= 0 {
					maxAge = max(maxAge, float64(now-m.startMs)/1000)
				}
			}
		}
		s.mu.Unlock()
	}
	return n, maxAge
}

// decided counts a transaction whose outcome was persisted.
func (m *metrics) decided(t *txnMeta) {
	if m == nil {
		return
	}
	outcome := "abort"
	if t.state == kmsg.TransactionStatePrepareCommit {
		outcome = "commit"
	}
	m.ended.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome), attribute.Bool("fenced", t.fenced)))
}

func (m *metrics) markerRetry() {
	if m != nil {
		m.markerRetries.Add(context.Background(), 1)
	}
}

func (m *metrics) loaded(seconds float64) {
	if m != nil {
		m.loadTime.Record(context.Background(), seconds)
	}
}
