package client

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// groupTelemetry records spans for joins, syncs and heartbeats that start
// a rebalance, and rebalance metrics.
type groupTelemetry struct {
	tracer     trace.Tracer
	rebalances metric.Int64Counter
	duration   metric.Float64Histogram
	attrs      metric.MeasurementOption
}

func newGroupTelemetry(tel *Telemetry, cfg GroupConsumerConfig) groupTelemetry {
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	t := groupTelemetry{tracer: tracenoop.NewTracerProvider().Tracer("")}
	if tel != nil {
		t.tracer = tel.Tracer("github.com/sluice-io/sluice/libs/client")
		if tel.MeterProvider != nil {
			mp = tel.MeterProvider
		}
	}
	meter := mp.Meter("github.com/sluice-io/sluice/libs/client")
	// Instrument creation fails only on invalid names; the noop
	// instruments returned alongside are safe to use.
	t.rebalances, _ = meter.Int64Counter("sluice.client.group.rebalances",
		metric.WithDescription("Rebalances this member completed."))
	t.duration, _ = meter.Float64Histogram("sluice.client.group.rebalance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a rebalance to the new assignment in use."))
	t.attrs = metric.WithAttributes(attribute.String("group", cfg.GroupID), attribute.String("protocol", cfg.Protocol.String()))
	return t
}

// span starts a client span for a group call.
func (t groupTelemetry) span(ctx context.Context, name, group string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{attribute.String("group", group)}, attrs...)...))
}

// rebalanced records one completed rebalance.
func (t groupTelemetry) rebalanced(ctx context.Context, started time.Time) {
	t.rebalances.Add(ctx, 1, t.attrs)
	t.duration.Record(ctx, time.Since(started).Seconds(), t.attrs)
}

// endSpan ends a span, recording err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
