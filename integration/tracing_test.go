package integration

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// collector is an OTLP trace receiver that keeps every span it gets.
type collector struct {
	collectorv1.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []recvSpan
}

type recvSpan struct {
	service, name string
	traceID       string
	links         []string
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
				r := recvSpan{service: service, name: s.GetName(), traceID: fmt.Sprintf("%x", s.GetTraceId())}
				for _, l := range s.GetLinks() {
					r.links = append(r.links, fmt.Sprintf("%x", l.GetTraceId()))
				}
				c.spans = append(c.spans, r)
			}
		}
	}
	return &collectorv1.ExportTraceServiceResponse{}, nil
}

func (c *collector) find(pred func(recvSpan) bool) []recvSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []recvSpan
	for _, s := range c.spans {
		if pred(s) {
			out = append(out, s)
		}
	}
	return out
}

// One acks=all produce is one trace across processes: the client's span,
// the leader's produce and replicate spans, and each follower's append; a
// consumer's span links to it through the record's headers.
func TestProduceTraceSpansClientLeaderAndFollowers(t *testing.T) {
	col := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	collectorv1.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	endpoint := "http://" + lis.Addr().String()

	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3,
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=100"}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The client exports to the same collector.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	tel, err := telemetry.Setup(ctx, telemetry.Config{SampleRatio: 1}, "test-client")
	require.NoError(t, err)
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), Telemetry: tel})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.CreateTopic(ctx, "traced", 1, 3, map[string]string{"min.insync.replicas": "2"})
	require.NoError(t, err)

	appCtx, appSpan := tp.Tracer("test").Start(ctx, "application")
	traceID := appSpan.SpanContext().TraceID().String()
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	res, err := p.ProduceSync(appCtx, &client.Record{Topic: "traced", Partition: 0, Value: []byte("hello")})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res[0].Offset, int64(0))
	appSpan.End()
	require.NoError(t, p.Close(ctx))

	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	k.Assign(client.TopicPartition{Topic: "traced", Partition: 0})
	recs, err := k.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	got := trace.SpanContextFromContext(client.RecordContext(ctx, recs[0]))
	require.Equal(t, traceID, got.TraceID().String(), "the record carries the producer's trace")
	require.NoError(t, tel.Shutdown(ctx)) // flush the client's spans

	inTrace := func(service, name string) func(recvSpan) bool {
		return func(s recvSpan) bool { return s.traceID == traceID && s.service == service && s.name == name }
	}
	require.Eventually(t, func() bool {
		return len(col.find(inTrace("sluice-client", "produce"))) == 1 &&
			len(col.find(inTrace("sluice-storage-node", "produce"))) == 1 &&
			len(col.find(inTrace("sluice-storage-node", "replicate"))) == 1 &&
			len(col.find(inTrace("sluice-replication", "replica append"))) >= 1
	}, 30*time.Second, 100*time.Millisecond, "spans of the produce's trace: %+v", col.find(func(s recvSpan) bool { return s.traceID == traceID }))
	consume := col.find(func(s recvSpan) bool { return s.service == "sluice-client" && s.name == "consume" })
	require.NotEmpty(t, consume)
	require.Contains(t, consume[0].links, traceID, "the consumer's span links to the producer's trace")
	t.Logf("trace %s: %d spans across client, leader and followers", traceID, len(col.find(func(s recvSpan) bool { return s.traceID == traceID })))
}
