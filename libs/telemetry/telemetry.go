// Package telemetry sets up OpenTelemetry once per process: a tracer provider
// per role (so spans name the role that made them, even when several roles
// share a process), one meter provider exported in Prometheus format, and the
// W3C trace-context propagator. The process owns one span exporter, shared
// by the roles' providers, and shuts it down once, after every provider has
// flushed. Spans are exported over OTLP/gRPC only when
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
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sluice-io/sluice/libs/client/wire"
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
	// Service is the service.name of the process's own spans and metrics,
	// those no single role owns (see Process). Not a flag: the program
	// sets it. Empty means "sluiced".
	Service string
}

// Process, passed to Tracer, names the process itself rather than one of
// its roles: its spans carry Config.Service as service.name.
const Process = "process"

// ServiceName is the service.name of a role's spans: "sluice-" and the
// role's name.
func ServiceName(roleName string) string { return "sluice-" + roleName }

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
	service  string
	sampler  sdktrace.Sampler
	exporter sdktrace.SpanExporter

	mu      sync.Mutex
	tracers map[string]*sdktrace.TracerProvider
	meter   *sdkmetric.MeterProvider
	down    bool
}

// Setup builds the providers for a process. instance identifies the process
// (its node id or address); it becomes service.instance.id.
func Setup(ctx context.Context, cfg Config, instance string) (*Providers, error) {
	p := &Providers{
		Registry:   prometheus.NewRegistry(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		base:       []attribute.KeyValue{semconv.ServiceNamespace("sluice"), semconv.ServiceInstanceID(instance)},
		service:    cfg.Service,
		sampler:    sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio)),
		tracers:    map[string]*sdktrace.TracerProvider{},
	}
	if p.service == "" {
		p.service = "sluiced"
	}
	// The scheduler latency and GC pause histograms (runtime/metrics) show
	// where a latency tail comes from: time runnable goroutines wait for a
	// CPU, and stop-the-world pauses (docs/performance.md, "Tail latency").
	p.Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/(latencies|pauses/total/gc):seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

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
	res, err := resource.New(ctx, resource.WithAttributes(append(p.base, semconv.ServiceName(p.service))...))
	if err != nil {
		return nil, fmt.Errorf("building resource: %w", err)
	}
	p.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(promExp), sdkmetric.WithResource(res))
	p.Meter = p.meter
	return p, nil
}

// Tracer returns the tracer provider for one role; its resource's
// service.name is ServiceName(roleName), or Config.Service for Process.
// Providers are created on first use and share the process's exporter.
// After Shutdown it records nothing.
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
	if p.down {
		return noop.NewTracerProvider()
	}
	name := ServiceName(roleName)
	if roleName == Process {
		name = p.service
	}
	attrs := append(append([]attribute.KeyValue{}, p.base...), semconv.ServiceName(name))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
		sdktrace.WithSampler(p.sampler),
		// A batch span processor shuts its exporter down with it; the
		// roles' providers share one, so each gets a view whose Shutdown
		// does nothing and Shutdown below closes the exporter itself,
		// once, after every provider has flushed.
		sdktrace.WithBatcher(sharedExporter{p.exporter}),
	)
	p.tracers[roleName] = tp
	return tp
}

// Client returns the telemetry a gRPC client or the SDK uses for calls
// made by one role.
func (p *Providers) Client(roleName string) *wire.Telemetry {
	return &wire.Telemetry{TracerProvider: p.Tracer(roleName), MeterProvider: p.Meter, Propagator: p.Propagator}
}

// Exporting reports whether spans leave the process.
func (p *Providers) Exporting() bool { return p.exporter != nil }

// Shutdown flushes and stops every provider, then the exporter they share.
// The process calls it once, after every role has stopped; later calls do
// nothing.
func (p *Providers) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return nil
	}
	p.down = true
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

// sharedExporter is one provider's view of the process's exporter: it
// exports through it but leaves shutting it down to Providers.Shutdown.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }
