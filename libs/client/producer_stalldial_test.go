package client

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

// When the watchdog gives up on a node whose connection never comes up
// (it drops packets) because the partition moved, the requests queued
// behind the one being dialled leave with it: none of them opens a stream
// of its own to that node and waits to be abandoned in turn (about a
// second and a quarter each).
func TestProducerAbandonsRequestsQueuedBehindAStalledDial(t *testing.T) {
	var oldStreams atomic.Int64
	c, err := New(Config{Bootstrap: []string{"boot:1"}, DialOptions: []grpc.DialOption{
		// Every connection hangs, as one to a host that drops packets.
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { <-ctx.Done(); return nil, ctx.Err() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if strings.Contains(cc.Target(), "old:1") && strings.HasSuffix(method, "/ProduceStream") {
				oldStreams.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	p := c.NewProducer(ProducerConfig{DisableIdempotence: true})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	// Metadata already names the partition's new leader.
	p.md.mu.Lock()
	p.md.topics["t"] = &topicMeta{partitions: []partMeta{{leader: 2, epoch: 5, addr: "new:1"}}, fetched: time.Now()}
	p.md.mu.Unlock()
	pc := p.conn("old:1")
	for range 4 {
		p.mu.Lock()
		p.partition(tpKey{"t", 0}).inflight++
		p.inflight++
		p.mu.Unlock()
		pc.enqueue(&storagev1.ProduceRequest{}, []*prodBatch{{tp: tpKey{"t", 0}, created: time.Now(), seq: -1}})
	}
	require.Eventually(t, func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		return len(pc.queue) == 0 && (pc.cur == nil || len(pc.cur.pending) == 0)
	}, 20*time.Second, 10*time.Millisecond, "requests still wait for old:1")
	require.EqualValues(t, 1, oldStreams.Load(), "streams opened to the node the partition left")
}
