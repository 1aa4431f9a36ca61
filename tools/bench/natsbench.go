package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream side of the comparison: the same record sizes and counts as
// Sluice's runs, published and consumed with nats.go against a file-store,
// one-replica stream.

type natsFlags struct {
	url, stream string
}

func (f *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "nats://127.0.0.1:4222", "server URL")
	fs.StringVar(&f.stream, "stream", "BENCH", "stream name; its subjects are <stream>.>")
}

func (f *natsFlags) connect(opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(f.url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// createStream makes a fresh file-store stream with one replica.
func (f *natsFlags) createStream(ctx context.Context, js jetstream.JetStream) error {
	if err := js.DeleteStream(ctx, f.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: f.stream, Subjects: []string{f.stream + ".>"}, Storage: jetstream.FileStorage, Replicas: 1,
	})
	return err
}

func natsPublish(args []string) error {
	fs := flag.NewFlagSet("nats-pub", flag.ExitOnError)
	var nf natsFlags
	nf.register(fs)
	count := fs.Int("count", 1_000_000, "messages")
	size := fs.Int("size", 1024, "message bytes")
	window := fs.Int("max-pending", 4096, "async publishes awaiting their ack")
	_ = fs.Parse(args) // ExitOnError
	var failed atomic.Int64
	nc, js, err := nf.connect(jetstream.WithPublishAsyncMaxPending(*window),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx := context.Background()
	if err := nf.createStream(ctx, js); err != nil {
		return err
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte('A' + i%26)
	}
	subject := nf.stream + ".p"
	start := time.Now()
	for range *count {
		if err := publishAsync(js, subject, payload); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return errors.New("publish acks did not all arrive within 5 minutes")
	}
	sec := time.Since(start).Seconds()
	return printFigures(figures{
		"records_per_s": float64(*count) / sec, "mb_per_s": float64(*count) * float64(*size) / sec / 1e6,
		"errors": float64(failed.Load()),
	})
}

// publishAsync publishes without waiting for the ack. When the window of
// unacknowledged messages stays full past nats.go's stall wait (as with an
// fsync per message), it tries again rather than failing: the window
// throttles the publisher, as Sluice's producer buffer does.
func publishAsync(js jetstream.JetStream, subject string, data []byte) error {
	for {
		_, err := js.PublishAsync(subject, data)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
	}
}

func natsConsume(args []string) error {
	fs := flag.NewFlagSet("nats-consume", flag.ExitOnError)
	var nf natsFlags
	nf.register(fs)
	count := fs.Int("count", 1_000_000, "messages to read from the start of the stream")
	_ = fs.Parse(args) // ExitOnError
	nc, js, err := nf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx := context.Background()
	start := time.Now()
	cons, err := js.OrderedConsumer(ctx, nf.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	var n, bytes atomic.Int64
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		bytes.Add(int64(len(m.Data())))
		if n.Add(1) == int64(*count) {
			close(done)
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("read %d of %d messages within 5 minutes", n.Load(), *count)
	}
	sec := time.Since(start).Seconds()
	return printFigures(figures{"records_per_s": float64(n.Load()) / sec, "mb_per_s": float64(bytes.Load()) / sec / 1e6})
}

// natsE2E publishes at a fixed rate with the send time in each payload and
// measures send-to-receipt latency on an ordered consumer started first.
func natsE2E(args []string) error {
	fs := flag.NewFlagSet("nats-e2e", flag.ExitOnError)
	var nf natsFlags
	nf.register(fs)
	count := fs.Int("count", 100_000, "messages")
	size := fs.Int("size", 1024, "message bytes (at least 16)")
	rate := fs.Float64("rate", 10_000, "messages per second")
	_ = fs.Parse(args) // ExitOnError
	if *size < 16 {
		return errors.New("--size must be at least 16")
	}
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3) }
	e2e, acks := newHist(), newHist()
	var mu sync.Mutex
	var failed atomic.Int64
	nc, js, err := nf.connect(
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) {
			d := time.Now().UnixNano() - int64(binary.BigEndian.Uint64(m.Data))
			mu.Lock()
			_ = acks.RecordValue(min(max(d/1000, 1), acks.HighestTrackableValue())) // clamped into range
			mu.Unlock()
		}))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx := context.Background()
	if err := nf.createStream(ctx, js); err != nil {
		return err
	}
	// The consumer has a connection of its own, as a separate application's
	// would.
	nc2, js2, err := nf.connect()
	if err != nil {
		return err
	}
	defer nc2.Close()
	cons, err := js2.OrderedConsumer(ctx, nf.stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return err
	}
	var got atomic.Int64
	all := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d := time.Now().UnixNano() - int64(binary.BigEndian.Uint64(m.Data()))
		mu.Lock()
		_ = e2e.RecordValue(min(max(d/1000, 1), e2e.HighestTrackableValue())) // clamped into range
		mu.Unlock()
		if got.Add(1) == int64(*count) {
			close(all)
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	time.Sleep(200 * time.Millisecond) // let the consumer's subscription settle
	subject := nf.stream + ".e"
	start := time.Now()
	for sent := 0; sent < *count; {
		due := min(int(time.Since(start).Seconds()**rate)+1, *count)
		for ; sent < due; sent++ {
			v := make([]byte, *size)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			binary.BigEndian.PutUint64(v[8:], uint64(sent))
			if err := publishAsync(js, subject, v); err != nil {
				return err
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	sendSec := time.Since(start).Seconds()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
	}
	select {
	case <-all:
	case <-time.After(15 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	ms := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return printFigures(figures{
		"records_per_s": float64(*count) / sendSec,
		"lat_p50_ms":    ms(e2e, 50), "lat_p99_ms": ms(e2e, 99), "lat_p999_ms": ms(e2e, 99.9), "lat_max_ms": float64(e2e.Max()) / 1000,
		"ack_p50_ms": ms(acks, 50), "ack_p99_ms": ms(acks, 99), "ack_p999_ms": ms(acks, 99.9),
		"errors": float64(failed.Load() + int64(*count) - got.Load()),
	})
}
