package kafka_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/quota"
)

func TestProduceQuotaThrottlesAndMutes(t *testing.T) {
	const window = 300 * time.Millisecond
	qm := quota.NewManager(quota.Options{WindowNum: 2, WindowSize: window})
	qm.SetTable(quota.NewTable([]quota.Entry{{
		Entity: []quota.Component{{Type: quota.EntityClientID, Name: "test-client"}},
		Values: map[string]float64{quota.ProducerByteRate: 1000},
	}}), 1)
	mux := kafka.NewMux()
	mux.Handle(0, 3, 7, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		return kafka.Now(req.Msg.(*kmsg.ProduceRequest).ResponseKind()), nil
	})
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		return kafka.Now(req.Msg.ResponseKind()), nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{Quotas: qm})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})

	produce := func() *kmsg.ProduceRequest {
		r := kmsg.NewPtrProduceRequest()
		r.Acks, r.TimeoutMillis = 1, 1000
		tp := kmsg.NewProduceRequestTopic()
		tp.Topic = "t"
		p := kmsg.NewProduceRequestTopicPartition()
		p.Records = make([]byte, 5000) // the handler never reads it
		tp.Partitions = append(tp.Partitions, p)
		r.Topics = append(r.Topics, tp)
		return r
	}

	// 5 KB in one sample's span is over 16x the 1000 B/s quota: throttled
	// for the cap, the window of two samples.
	// The mute starts when the server reads the produce request, after
	// sent; a clock started at the produce response's arrival instead
	// lost the time that response took to arrive (over 50 ms on a loaded
	// machine).
	c := dial(t, s)
	sent := time.Now()
	c.send(produce(), 7)
	c.send(heartbeat("g"), 4) // pipelined: held by the mute
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 7
	c.recv(resp, false)
	require.Equal(t, int32(2*window.Milliseconds())+1, resp.ThrottleMillis)
	recvHeartbeat(t, c, 4)
	require.GreaterOrEqual(t, time.Since(sent), 2*window,
		"the request after a throttled one waits for the throttle time")

	// Another client id has no quota.
	other := dial(t, s)
	other.f = kmsg.NewRequestFormatter(kmsg.FormatterClientID("other"))
	other.send(produce(), 7)
	resp = kmsg.NewPtrProduceResponse()
	resp.Version = 7
	other.recv(resp, false)
	require.Zero(t, resp.ThrottleMillis)
}

func TestFetchQuotaThrottles(t *testing.T) {
	qm := quota.NewManager(quota.Options{WindowNum: 2, WindowSize: 200 * time.Millisecond})
	qm.SetTable(quota.NewTable([]quota.Entry{{
		Entity: []quota.Component{{Type: quota.EntityUser, Default: true}},
		Values: map[string]float64{quota.ConsumerByteRate: 1000},
	}}), 1)
	mux := kafka.NewMux()
	mux.Handle(1, 4, 11, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		resp := req.Msg.(*kmsg.FetchRequest).ResponseKind().(*kmsg.FetchResponse)
		tp := kmsg.NewFetchResponseTopic()
		tp.Topic = "t"
		p := kmsg.NewFetchResponseTopicPartition()
		p.RecordBatches = make([]byte, 300)
		tp.Partitions = append(tp.Partitions, p)
		resp.Topics = append(resp.Topics, tp)
		return kafka.Now(resp), nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{Quotas: qm})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	c := dial(t, s)
	fetch := func() int32 {
		c.send(kmsg.NewPtrFetchRequest(), 11)
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = 11
		c.recv(resp, false)
		return resp.ThrottleMillis
	}
	// The default user quota applies to User:ANONYMOUS: 300 bytes in a
	// 200 ms span is 1500 B/s, over 1000 B/s.
	require.Equal(t, int32(101), fetch(), "(1500-1000)/1000 * 200 ms")
}
