package wire

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry is what the SDK takes of OpenTelemetry: API types only. The
// application chooses the OTel SDK and its exporters (OpenTelemetry's rule
// for instrumentation libraries), so a program that imports the SDK links
// neither. A nil field falls back to the global provider.
type Telemetry struct {
	// TracerProvider records client spans.
	TracerProvider trace.TracerProvider
	// MeterProvider records gRPC client metrics.
	MeterProvider metric.MeterProvider
	// Propagator injects trace context into calls and record headers.
	Propagator propagation.TextMapPropagator
}

// Tracer returns the named tracer of t's provider.
func (t *Telemetry) Tracer(name string) trace.Tracer {
	if t.TracerProvider == nil {
		return otel.GetTracerProvider().Tracer(name)
	}
	return t.TracerProvider.Tracer(name)
}

// TextMapPropagator returns t's propagator.
func (t *Telemetry) TextMapPropagator() propagation.TextMapPropagator {
	if t.Propagator == nil {
		return otel.GetTextMapPropagator()
	}
	return t.Propagator
}

func (t *Telemetry) meterProvider() metric.MeterProvider {
	if t.MeterProvider == nil {
		return otel.GetMeterProvider()
	}
	return t.MeterProvider
}
