package kafka

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const instrumentation = "github.com/sluice-io/sluice/libs/kafka"

// Outcomes of a request, the "outcome" attribute of sluice.kafka.requests.
const (
	// outcomeOK: answered (per-item errors are inside the response).
	outcomeOK = "ok"
	// outcomeNoResponse: the request wants no response (Produce acks=0).
	outcomeNoResponse = "no_response"
	// outcomeUnsupported: unknown key or version; the connection closes
	// (ApiVersions is answered UNSUPPORTED_VERSION instead).
	outcomeUnsupported = "unsupported"
	// outcomeInvalid: the frame did not decode; the connection closes.
	outcomeInvalid = "invalid"
	// outcomeError: the handler failed (a protocol violation) or panicked;
	// the connection closes.
	outcomeError = "error"
	// outcomeCanceled: the connection closed or the server stopped before
	// the response was written.
	outcomeCanceled = "canceled"
	// outcomeUnauthenticated: a request other than ApiVersions and the
	// SASL ones before SASL authentication, or after its session expired;
	// the connection closes.
	outcomeUnauthenticated = "unauthenticated"
)

// metrics are the listener's instruments.
type metrics struct {
	requests metric.Int64Counter
	duration metric.Float64Histogram
	conns    metric.Int64UpDownCounter
	bytesIn  metric.Int64Counter
	bytesOut metric.Int64Counter

	mu    sync.Mutex
	attrs map[attrKey]metric.MeasurementOption
}

type attrKey struct {
	key     int16
	outcome string
}

func newMetrics(mp metric.MeterProvider) *metrics {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(instrumentation)
	out := &metrics{attrs: map[attrKey]metric.MeasurementOption{}}
	// Creating an instrument fails only on an invalid name; these are
	// constants, and a failed one is a no-op instrument.
	out.requests, _ = m.Int64Counter("sluice.kafka.requests",
		metric.WithDescription("Kafka requests by API and outcome (ok, no_response, unsupported, invalid, error, canceled)."))
	out.duration, _ = m.Float64Histogram("sluice.kafka.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a Kafka request's arrival until its response is ready, waits included."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	out.conns, _ = m.Int64UpDownCounter("sluice.kafka.connections", metric.WithDescription("Open Kafka client connections."))
	out.bytesIn, _ = m.Int64Counter("sluice.kafka.received", metric.WithUnit("By"),
		metric.WithDescription("Bytes of Kafka request frames received, size prefixes included."))
	out.bytesOut, _ = m.Int64Counter("sluice.kafka.sent", metric.WithUnit("By"),
		metric.WithDescription("Bytes of Kafka response frames sent, size prefixes included."))
	return out
}

// attrsFor returns the attribute set of key and outcome, built once.
func (m *metrics) attrsFor(key int16, outcome string) metric.MeasurementOption {
	if kmsg.RequestForKey(key) == nil {
		key = -1 // one entry for every unknown key
	}
	k := attrKey{key, outcome}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.attrs[k]; ok {
		return o
	}
	set := []attribute.KeyValue{attribute.String("api", apiName(key))}
	if outcome != "" {
		set = append(set, attribute.String("outcome", outcome))
	}
	o := metric.WithAttributeSet(attribute.NewSet(set...))
	m.attrs[k] = o
	return o
}

// request records one finished request.
func (m *metrics) request(key int16, outcome string, seconds float64) {
	ctx := context.Background()
	m.requests.Add(ctx, 1, m.attrsFor(key, outcome))
	if seconds >= 0 {
		m.duration.Record(ctx, seconds, m.attrsFor(key, ""))
	}
}

// apiName names key as Kafka does ("Produce"); keys kmsg does not know are
// "Unknown" so that a hostile client cannot grow the metric's label set.
func apiName(key int16) string {
	if kmsg.RequestForKey(key) == nil {
		return "Unknown"
	}
	return kmsg.NameForKey(key)
}

// tracerOf returns a tracer of tp, or a no-op one.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return tp.Tracer(instrumentation)
}
