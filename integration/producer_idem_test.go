package integration

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
)

// dropAnswers is a client stream interceptor that loses the answer to
// every nth produce request after the leader has appended it: it cancels
// the stream instead of handing the answer over, so every request in
// flight on the stream fails as if the connection had broken.
type dropAnswers struct {
	every   int64
	answers atomic.Int64
	dropped atomic.Int64
}

func (d *dropAnswers) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != "/sluice.storage.v1.StorageService/ProduceStream" {
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx, cancel := context.WithCancel(ctx)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &droppingStream{ClientStream: s, d: d, cancel: cancel}, nil
}

type droppingStream struct {
	grpc.ClientStream
	d      *dropAnswers
	cancel context.CancelFunc
}

func (s *droppingStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		s.cancel()
		return err
	}
	if s.d.answers.Add(1)%s.d.every == 0 {
		s.d.dropped.Add(1)
		s.cancel()
		return status.Error(codes.Unavailable, "answer lost on purpose")
	}
	return nil
}

// Produce answers lost after the leader appended (a connection that breaks
// at the wrong moment) make the producer resend batches the log already
// holds. With idempotence (the default) a real storage node recognises
// each resend and answers with the original offsets: every record is in
// the log once, in send order, at the offset it was acknowledged at, with
// up to 5 requests in flight per partition. The same run without
// idempotence writes duplicates, which shows the test can see them.
func TestIdempotentProducerLostAnswers(t *testing.T) {
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	admin := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		cfg  client.ProducerConfig
	}{
		{"idempotent", client.ProducerConfig{}},
		{"plain", client.ProducerConfig{DisableIdempotence: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "lost-answers-" + tc.name
			const partitions, n = int32(3), 30000
			_, err := admin.CreateTopic(ctx, topic, partitions, 1, nil)
			require.NoError(t, err)
			drop := &dropAnswers{every: 5}
			cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(drop.intercept)}})
			require.NoError(t, err)
			defer func() { _ = cl.Close() }()
			cfg := tc.cfg
			cfg.Linger, cfg.BatchBytes, cfg.RetryBackoff = time.Millisecond, 4<<10, 5*time.Millisecond
			cfg.MaxBatchBytes = cfg.BatchBytes // many small batches, so many answers to drop
			p := cl.NewProducer(cfg)
			var mu sync.Mutex
			var acked []ack
			failed := 0
			for seq := range int64(n) {
				key := "k-" + strconv.Itoa(int(seq)%100)
				rec := &client.Record{Topic: topic, Partition: -1, Key: []byte(key), Value: []byte(strconv.FormatInt(seq, 10))}
				require.NoError(t, p.Produce(ctx, rec, func(r client.Result) {
					mu.Lock()
					defer mu.Unlock()
					if r.Err != nil {
						failed++
						if failed < 5 {
							t.Logf("record %d: %v", seq, r.Err)
						}
						return
					}
					acked = append(acked, ack{key: key, seq: seq, part: r.Partition, offset: r.Offset})
				}))
			}
			require.NoError(t, p.Close(ctx))
			require.Zero(t, failed)
			require.Len(t, acked, n)
			require.Positive(t, drop.dropped.Load())

			read := readAll(t, ctx, admin, topic, partitions)
			dups := checkHistory(t, acked, read)
			total := 0
			for _, recs := range read {
				total += len(recs)
			}
			t.Logf("%s: %d records, %d answers dropped, %d read back, %d duplicates", tc.name, n, drop.dropped.Load(), total, dups)
			if tc.name == "plain" {
				require.Positive(t, dups, "without idempotence the resends are written again")
				return
			}
			require.Zero(t, dups)
			require.Equal(t, n, total)
			// Each partition holds its records in send order.
			for part, recs := range read {
				for i := 1; i < len(recs); i++ {
					require.Greater(t, recs[i].seq, recs[i-1].seq, "partition %d: %d after %d", part, recs[i].seq, recs[i-1].seq)
				}
			}
		})
	}
}
