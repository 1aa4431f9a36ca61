package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
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

// startCollector serves an OTLP trace collector on loopback and returns it
// with its endpoint URL.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	col := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	collectorv1.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return col, "http://" + lis.Addr().String()
}

// services returns the service names of the collected spans.
func (c *collector) services() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, s := range c.spans {
		out[s.service]++
	}
	return out
}

// One acks=all produce is one trace across processes: the client's span,
// the leader's produce and replicate spans, and each follower's append; a
// consumer's span links to it through the record's headers.
func TestProduceTraceSpansClientLeaderAndFollowers(t *testing.T) {
	// The collector outlives the cluster, whose nodes flush their spans
	// to it when they stop.
	col, endpoint := startCollector(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3,
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=100"}})
	started := time.Now()
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
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), Telemetry: tel.Client("client")})
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
	t.Logf("produced and consumed %v after the cluster started", time.Since(started).Round(time.Millisecond))
	waitFrom := time.Now()
	complete := func() bool {
		return len(col.find(inTrace("sluice-client", "produce"))) == 1 &&
			len(col.find(inTrace("sluice-storage-node", "produce"))) == 1 &&
			len(col.find(inTrace("sluice-storage-node", "replicate"))) == 1 &&
			len(col.find(inTrace("sluice-replication", "replica append"))) >= 1
	}
	for !complete() {
		if time.Since(waitFrom) > 60*time.Second {
			// What did arrive tells an exporter that sent nothing from one
			// that sent the spans of another trace.
			t.Fatalf("spans of the produce's trace: %+v; spans per service: %v",
				col.find(func(s recvSpan) bool { return s.traceID == traceID }), col.services())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the servers' spans arrived %v after the client's", time.Since(waitFrom).Round(time.Millisecond))
	consume := col.find(func(s recvSpan) bool { return s.service == "sluice-client" && s.name == "consume" })
	require.NotEmpty(t, consume)
	require.Contains(t, consume[0].links, traceID, "the consumer's span links to the producer's trace")
	t.Logf("trace %s: %d spans across client, leader and followers", traceID, len(col.find(func(s recvSpan) bool { return s.traceID == traceID })))
}

// On SIGTERM a process with several roles flushes every role's spans, also
// those of its last requests: spans leave here only with the shutdown flush.
func TestSpansOfEveryRoleSurviveSIGTERM(t *testing.T) {
	col, endpoint := startCollector(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, Combined: true,
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=600000"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := cluster.Client(t, c)
	_, err := cl.CreateTopic(ctx, "last", 1, 1, nil)
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	_, err = p.ProduceSync(ctx, &client.Record{Topic: "last", Partition: 0, Value: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	require.Empty(t, col.services(), "nothing is exported before the shutdown flush")

	require.NoError(t, c.Processes()[0].Stop(30*time.Second))
	got := col.services()
	for _, svc := range []string{"sluice-controller", "sluice-storage-node", "sluiced"} {
		require.Positive(t, got[svc], "spans of %s reach the collector; got %v", svc, got)
	}
	require.NotContains(t, got, "sluice-sluiced")
	require.NotEmpty(t, col.find(func(s recvSpan) bool { return s.service == "sluice-storage-node" && s.name == "produce" }),
		"the last produce's span")
}

// The CLI traces when OTEL_EXPORTER_OTLP_ENDPOINT is set: each command has
// a root span, and the servers' spans of its calls are in its trace.
func TestCLICommandIsOneTraceWithTheServers(t *testing.T) {
	col, endpoint := startCollector(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, Combined: true,
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=100"}})
	run := func(stdin string, args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ",")}, args...)...)
		cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	run("", "topic", "create", "cli-traced", "--partitions", "1", "--replication-factor", "1")
	run("a\nb\nc\n", "produce", "cli-traced")

	// The CLI flushed its spans before exiting.
	root := func(name string) recvSpan {
		s := col.find(func(s recvSpan) bool { return s.service == "sluice-cli" && s.name == name })
		require.Len(t, s, 1, "one root span %q; services seen: %v", name, col.services())
		return s[0]
	}
	create, produce := root("sluice topic create"), root("sluice produce")
	require.NotEqual(t, create.traceID, produce.traceID, "a trace per command")
	inTrace := func(traceID, service, name string) func() bool {
		return func() bool {
			return len(col.find(func(s recvSpan) bool { return s.traceID == traceID && s.service == service && s.name == name })) > 0
		}
	}
	require.Eventually(t, inTrace(create.traceID, "sluice-controller", "sluice.controller.v1.ControllerService/CreateTopics"),
		20*time.Second, 50*time.Millisecond, "the controller's span of the create is in the CLI's trace: %+v",
		col.find(func(s recvSpan) bool { return s.traceID == create.traceID }))
	require.Eventually(t, inTrace(produce.traceID, "sluice-storage-node", "produce"),
		20*time.Second, 50*time.Millisecond, "the leader's produce span is in the CLI's trace: %+v",
		col.find(func(s recvSpan) bool { return s.traceID == produce.traceID }))
}
