package kafka_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-io/sluice/libs/kafka"
)

func TestSpansAndMetrics(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		return kafka.Now(req.Msg.ResponseKind()), nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{Meter: mp, Tracer: tp})
	require.NoError(t, s.Start(context.Background()))
	c := dial(t, s)
	c.send(heartbeat("g"), 4)
	recvHeartbeat(t, c, 4)
	c.send(kmsg.NewPtrMetadataRequest(), 12) // not served: closes
	c.requireClosed()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))

	ended := spans.Ended()
	require.Len(t, ended, 1)
	require.Equal(t, "kafka.Heartbeat", ended[0].Name())
	attrs := attribute.NewSet(ended[0].Attributes()...)
	v, _ := attrs.Value("kafka.api_version")
	require.Equal(t, int64(4), v.AsInt64())
	v, _ = attrs.Value("kafka.client_id")
	require.Equal(t, "test-client", v.AsString())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	requests := map[string]int64{}
	var conns int64 = -1
	var in, out int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "sluice.kafka.requests":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					api, _ := dp.Attributes.Value("api")
					outcome, _ := dp.Attributes.Value("outcome")
					requests[api.AsString()+"/"+outcome.AsString()] = dp.Value
				}
			case "sluice.kafka.connections":
				conns = m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
			case "sluice.kafka.received":
				in = m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
			case "sluice.kafka.sent":
				out = m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
			}
		}
	}
	require.Equal(t, map[string]int64{"Heartbeat/ok": 1, "Metadata/unsupported": 1}, requests)
	require.Zero(t, conns, "every connection closed")
	require.Positive(t, in)
	require.Positive(t, out)
}
