// Package telemetry sets up OpenTelemetry once per process: a tracer provider
// per role (so spans name the role that made them, even when several roles
// share a process), one meter provider exported in Prometheus format, and the
// W3C trace-context propagator. Spans are exported over OTLP/gRPC only when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set;
// otherwise tracing stays in-process and costs almost nothing.
//
// Nothing here touches OpenTelemetry's globals: providers are passed down
// explicitly.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config tunes tracing.
type Config struct {
	// SampleRatio is the fraction of new traces sampled (parent-based: a
	// sampled caller's trace is always continued).
	SampleRatio float64
}

// RegisterFlags registers the telemetry flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.SampleRatio, "tracing.sample-ratio", 1.0,
		"Fraction of new traces to sample, 0 to 1. Spans are exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("tracing.sample-ratio: %v is not between 0 and 1", c.SampleRatio)
	}
	return nil
}

// Providers holds a process's telemetry.
type Providers struct {
	// Meter is the process's meter provider.
	Meter metric.MeterProvider
	// Registry is the Prometheus registry the meter provider exports to;
	// serve it with promhttp.
	Registry *prometheus.Registry
	// Propagator injects and extracts trace context (W3C traceparent and
	// baggage), in gRPC metadata and in record headers.
	Propagator propagation.TextMapPropagator

	base     []attribute.KeyValue
	sampler  sdktrace.Sampler
	exporter sdktrace.SpanExporter

	mu      sync.Mutex
	tracers map[string]*sdktrace.TracerProvider
	meter   *sdkmetric.MeterProvider
}

// Setup builds the providers for a process. instance identifies the process
// (its node id or address); it becomes service.instance.id.
func Setup(ctx context.Context, cfg Config, instance string) (*Providers, error) {
	p := &Providers{
		Registry:   prometheus.NewRegistry(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		base:       []attribute.KeyValue{semconv.ServiceNamespace("sluice"), semconv.ServiceInstanceID(instance)},
		sampler:    sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio)),
		tracers:    map[string]*sdktrace.TracerProvider{},
	}
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracegrpc.New(ctx) // reads the standard OTEL_EXPORTER_OTLP_* variables
		if err != nil {
			return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
		}
		p.exporter = exp
	}

	promExp, err := otelprom.New(otelprom.WithRegisterer(p.Registry))
	if err != nil {
		return nil, fmt.Errorf("creating Prometheus exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(append(p.base, semconv.ServiceName("sluiced"))...))
	if err != nil {
		return nil, fmt.Errorf("building resource: %w", err)
	}
	p.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(promExp), sdkmetric.WithResource(res))
	p.Meter = p.meter
	return p, nil
}

// Tracer returns the tracer provider for one role; its resource's
// service.name is "sluice-<role>". Providers are created on first use and
// share one exporter.
func (p *Providers) Tracer(roleName string) trace.TracerProvider {
	if p.exporter == nil {
		// Nothing would leave the process: record nothing. A no-op span
		// carries its parent's context, so a trace still passes through
		// this process unchanged to the next one that exports.
		return noop.NewTracerProvider()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tp, ok := p.tracers[roleName]; ok {
		return tp
	}
	attrs := append(append([]attribute.KeyValue{}, p.base...), semconv.ServiceName("sluice-"+roleName))
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
		sdktrace.WithSampler(p.sampler),
	}
	if p.exporter != nil {
		opts = append(opts, sdktrace.WithBatcher(p.exporter))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	p.tracers[roleName] = tp
	return tp
}

// Exporting reports whether spans leave the process.
func (p *Providers) Exporting() bool { return p.exporter != nil }

// Shutdown flushes and stops every provider.
func (p *Providers) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, tp := range p.tracers {
		errs = append(errs, tp.Shutdown(ctx))
	}
	if p.exporter != nil {
		errs = append(errs, p.exporter.Shutdown(ctx))
	}
	errs = append(errs, p.meter.Shutdown(ctx))
	return errors.Join(errs...)
}
