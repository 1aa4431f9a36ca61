package telemetry_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/telemetry"
)

// collector is an OTLP trace receiver that counts spans per service.name.
type collector struct {
	collectorv1.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string][]string
}

func (c *collector) Export(_ context.Context, req *collectorv1.ExportTraceServiceRequest) (*collectorv1.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[service] = append(c.spans[service], s.GetName())
			}
		}
	}
	return &collectorv1.ExportTraceServiceResponse{}, nil
}

func (c *collector) got() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for k, v := range c.spans {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	col := &collector{spans: map[string][]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	collectorv1.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return col, "http://" + lis.Addr().String()
}

// Spans that every role of a multi-role process ends just before the
// process shuts down reach the collector: the roles' providers share one
// exporter, which must outlive all of their final flushes.
func TestShutdownFlushesEveryRole(t *testing.T) {
	col, endpoint := startCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	// Spans leave only with the shutdown flush.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tel, err := telemetry.Setup(ctx, telemetry.Config{SampleRatio: 1, Service: "sluiced"}, "node-1")
	require.NoError(t, err)
	want := map[string][]string{}
	for _, r := range []string{"controller", "storage-node", "replication", "group-coordinator", telemetry.Process} {
		_, span := tel.Tracer(r).Tracer("test").Start(ctx, "last "+r)
		span.End()
		name := telemetry.ServiceName(r)
		if r == telemetry.Process {
			name = "sluiced"
		}
		want[name] = []string{"last " + r}
	}
	require.NoError(t, tel.Shutdown(ctx))
	require.Equal(t, want, col.got())
	require.NoError(t, tel.Shutdown(ctx), "a second shutdown does nothing")
}

func TestServiceNames(t *testing.T) {
	col, endpoint := startCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Config{SampleRatio: 1, Service: "sluice-storage-node"}, "node-4")
	require.NoError(t, err)
	for _, r := range []string{"storage-node", telemetry.Process} {
		_, span := tel.Tracer(r).Tracer("test").Start(ctx, r)
		span.End()
	}
	require.NoError(t, tel.Shutdown(ctx))
	got := col.got()
	require.Len(t, got, 1, "one service name for a one-role process: %v", got)
	require.ElementsMatch(t, []string{"storage-node", "process"}, got["sluice-storage-node"])
}
