package quota

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics records quota enforcement: the throttle times answered and the
// quantities recorded per matched entity (whose rate a dashboard derives).
type Metrics struct {
	throttle metric.Float64Histogram
	recorded metric.Float64Counter

	mu    sync.Mutex
	attrs map[[2]string]metric.MeasurementOption
}

// NewMetrics returns the quota metrics of mp; nil mp records nothing.
func NewMetrics(mp metric.MeterProvider) *Metrics {
	if mp == nil {
		return nil
	}
	meter := mp.Meter("github.com/sluice-io/sluice/libs/quota")
	m := &Metrics{attrs: map[[2]string]metric.MeasurementOption{}}
	// Instrument creation fails only for invalid names, fixed here.
	m.throttle, _ = meter.Float64Histogram("sluice.quota.throttle_time",
		metric.WithUnit("s"), metric.WithDescription("Throttle time answered to clients over a quota (zero within it), by quota key and entity."),
		metric.WithExplicitBucketBoundaries(0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	m.recorded, _ = meter.Float64Counter("sluice.quota.recorded",
		metric.WithDescription("Quantity recorded against a quota by entity: bytes for producer_byte_rate and consumer_byte_rate, percent-seconds of handler time for request_percentage; its rate is the entity's measured rate."))
	return m
}

func (m *Metrics) observe(key, entity string, v float64, throttle time.Duration) {
	k := [2]string{key, entity}
	m.mu.Lock()
	opt, ok := m.attrs[k]
	if !ok {
		opt = metric.WithAttributeSet(attribute.NewSet(attribute.String("quota.key", key), attribute.String("quota.entity", entity)))
		m.attrs[k] = opt
	}
	m.mu.Unlock()
	ctx := context.Background()
	m.recorded.Add(ctx, v, opt)
	m.throttle.Record(ctx, throttle.Seconds(), opt)
}
