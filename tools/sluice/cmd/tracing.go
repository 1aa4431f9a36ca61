package cmd

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/libs/telemetry"
)

// cliService is the service.name of the CLI's own spans.
const cliService = "sluice-cli"

// tracing is a command's OpenTelemetry setup: when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, each command runs under a root span of its own, its gRPC calls carry
// that trace to the servers, and its spans are flushed before the process
// exits. Without an endpoint nothing is set up.
type tracing struct {
	tel  *telemetry.Providers
	span trace.Span
}

func tracingWanted() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// start sets up tracing for cmd and returns the context its work runs in.
// `sluice dev` supervises servers for as long as it runs: it gets no span
// (its servers trace themselves).
func (t *tracing) start(cmd *cobra.Command) (context.Context, error) {
	ctx := cmd.Context()
	if !tracingWanted() || cmd.Name() == "dev" {
		return ctx, nil
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{SampleRatio: 1, Service: cliService}, fmt.Sprintf("pid-%d", os.Getpid()))
	if err != nil {
		return ctx, fmt.Errorf("setting up tracing (OTEL_EXPORTER_OTLP_ENDPOINT is set): %w", err)
	}
	t.tel = tel
	ctx, t.span = tel.Tracer(telemetry.Process).Tracer("github.com/sluice-io/sluice/tools/sluice").Start(ctx, cmd.CommandPath(),
		trace.WithSpanKind(trace.SpanKindClient))
	return ctx, nil
}

// end ends the command's span with its outcome and flushes every span; it
// waits at most a few seconds for an unreachable collector.
func (t *tracing) end(err error) {
	if t.tel == nil {
		return
	}
	if t.span != nil {
		if err != nil {
			t.span.RecordError(err)
			t.span.SetStatus(codes.Error, describeErr(err))
		}
		t.span.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := t.tel.Shutdown(ctx); serr != nil {
		fmt.Fprintf(os.Stderr, "sluice: flushing spans: %v\n", serr)
	}
}
