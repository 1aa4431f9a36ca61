package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/kafka"
)

// releases counts the calls of each Reply.Release handed out.
type releases struct {
	mu    sync.Mutex
	calls []*atomic.Int32
}

// next returns a Release that counts its calls and then runs then (if set).
func (r *releases) next(then func()) func() {
	n := new(atomic.Int32)
	r.mu.Lock()
	r.calls = append(r.calls, n)
	r.mu.Unlock()
	return func() {
		n.Add(1)
		if then != nil {
			then()
		}
	}
}

// counts returns how many Releases were handed out and how many were
// called once, and fails if any was called more than once.
func (r *releases) counts(t *testing.T) (handed, once int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range r.calls {
		switch c := n.Load(); {
		case c > 1:
			require.Failf(t, "Release called more than once", "release %d: %d calls", i, c)
		case c == 1:
			once++
		}
	}
	return len(r.calls), once
}

// requireAllOnce waits until every Release handed out (at least min) has
// been called, each exactly once.
func (r *releases) requireAllOnce(t *testing.T, min int) {
	t.Helper()
	require.Eventually(t, func() bool {
		handed, once := r.counts(t)
		return handed >= min && once == handed
	}, 5*time.Second, time.Millisecond)
}

// fetchResponse is a Fetch response of two partitions: batches (sent by
// reference when large) and a small one (copied).
func fetchResponse(req *kafka.Request, batches []byte) *kmsg.FetchResponse {
	resp := req.Msg.ResponseKind().(*kmsg.FetchResponse)
	t := kmsg.NewFetchResponseTopic()
	t.Topic = "t"
	for i, b := range [][]byte{batches, []byte("small")} {
		p := kmsg.NewFetchResponseTopicPartition()
		p.Partition, p.HighWatermark, p.RecordBatches = int32(i), 42, b
		t.Partitions = append(t.Partitions, p)
	}
	resp.Topics = append(resp.Topics, t)
	return resp
}

func lent(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// A Fetch response's large batches are written from the memory the
// handler lent, and Release comes after they are written: the Release
// here overwrites the lent bytes, which the client must never see.
func TestFetchBatchesWrittenBeforeRelease(t *testing.T) {
	var rel releases
	for _, wait := range []bool{false, true} {
		mux := kafka.NewMux()
		mux.Handle(1, 4, 16, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
			b := lent(300 << 10)
			resp := fetchResponse(req, b)
			release := rel.next(func() { clear(b) })
			if wait {
				return kafka.Reply{Wait: func(context.Context) kmsg.Response { return resp }, Release: release}, nil
			}
			return kafka.Reply{Msg: resp, Release: release}, nil
		})
		s := startServer(t, kafka.Config{}, mux)
		c := dial(t, s)
		want := lent(300 << 10)
		for _, v := range []int16{4, 11, 12, 16} {
			// Pipelined, so responses queue behind each other.
			corrs := []int32{c.send(kmsg.NewPtrFetchRequest(), v), c.send(kmsg.NewPtrFetchRequest(), v)}
			for _, corr := range corrs {
				resp := kmsg.NewPtrFetchResponse()
				resp.SetVersion(v)
				require.Equal(t, corr, c.recv(resp, v >= 12))
				ps := resp.Topics[0].Partitions
				require.True(t, bytes.Equal(want, ps[0].RecordBatches), "v%d: batches changed before they were written", v)
				require.Equal(t, "small", string(ps[1].RecordBatches))
				require.Equal(t, int64(42), ps[1].HighWatermark)
			}
		}
	}
	rel.requireAllOnce(t, 16)
}

// Every way a reply can end calls its Release exactly once.
func TestReleaseCalledOnceOnEveryPath(t *testing.T) {
	cases := []struct {
		name string
		// reply answers a Heartbeat.
		reply func(ctx context.Context, resp kmsg.Response, release func()) (kafka.Reply, error)
		// closes: the server closes the connection instead of answering.
		closes bool
		silent bool // no response at all
	}{
		{name: "copied response", reply: func(_ context.Context, resp kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Msg: resp, Release: release}, nil
		}},
		{name: "copied response after Wait", reply: func(_ context.Context, resp kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Wait: func(context.Context) kmsg.Response { return resp }, Release: release}, nil
		}},
		{name: "no response", silent: true, reply: func(_ context.Context, _ kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Release: release}, nil
		}},
		{name: "handler error", closes: true, reply: func(_ context.Context, resp kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Msg: resp, Release: release}, errors.New("protocol violation")
		}},
		{name: "response of another key", closes: true, reply: func(_ context.Context, _ kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Msg: kmsg.NewPtrFetchResponse(), Release: release}, nil
		}},
		{name: "Wait answers nothing", closes: true, reply: func(_ context.Context, _ kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Wait: func(context.Context) kmsg.Response { return nil }, Release: release}, nil
		}},
		{name: "Wait panics", closes: true, reply: func(_ context.Context, _ kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Wait: func(context.Context) kmsg.Response { panic("bug") }, Release: release}, nil
		}},
		{name: "Release panics", reply: func(_ context.Context, resp kmsg.Response, release func()) (kafka.Reply, error) {
			return kafka.Reply{Msg: resp, Release: func() { release(); panic("bug") }}, nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rel releases
			mux := kafka.NewMux()
			mux.Handle(12, 0, 4, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
				return tc.reply(ctx, req.Msg.ResponseKind(), rel.next(nil))
			})
			c := dial(t, startServer(t, kafka.Config{}, mux))
			corr := c.send(heartbeat("g"), 4)
			switch {
			case tc.closes:
				c.requireClosed()
			case tc.silent:
			default:
				got, _ := recvHeartbeat(t, c, 4)
				require.Equal(t, corr, got)
			}
			rel.requireAllOnce(t, 1)
		})
	}
}

// Responses not yet written when the connection ends, the one being
// written included, are released once: the client goes away without
// reading the large Fetch responses it asked for, or while answers wait.
func TestReleaseCalledOnceWhenTheConnectionCloses(t *testing.T) {
	var rel releases
	handled := make(chan struct{}, 64)
	mux := kafka.NewMux()
	mux.Handle(1, 4, 16, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		handled <- struct{}{}
		b := lent(4 << 20)
		return kafka.Reply{Msg: fetchResponse(req, b), Release: rel.next(func() { clear(b) })}, nil
	})
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		handled <- struct{}{}
		resp := req.Msg.ResponseKind()
		return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response { <-ctx.Done(); return resp }, Release: rel.next(nil)}, nil
	})
	s := startServer(t, kafka.Config{MaxPendingResponses: 4}, mux)

	// Never read: the socket fills, the writer blocks, more queue up and
	// the reader waits for room in the queue.
	c := dial(t, s)
	for range 12 {
		c.send(kmsg.NewPtrFetchRequest(), 12)
	}
	for range 6 {
		<-handled
	}
	require.NoError(t, c.nc.Close())
	rel.requireAllOnce(t, 6)

	// Answers waiting behind a Wait that only the close ends.
	c = dial(t, s)
	c.send(heartbeat("g"), 4)
	c.send(kmsg.NewPtrFetchRequest(), 12)
	c.send(heartbeat("g"), 4)
	for range 3 {
		<-handled
	}
	before, _ := rel.counts(t)
	require.NoError(t, c.nc.Close())
	rel.requireAllOnce(t, before)
}

// A stop whose deadline passes drops what waits, and releases it.
func TestReleaseCalledOnceWhenTheServerStops(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		var rel releases
		waiting := make(chan struct{}, 8)
		mux := kafka.NewMux()
		mux.Handle(1, 4, 16, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
			resp := fetchResponse(req, lent(64<<10))
			return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
				waiting <- struct{}{}
				if !graceful {
					<-ctx.Done()
				}
				return resp
			}, Release: rel.next(nil)}, nil
		})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
		require.NoError(t, s.Start(context.Background()))
		c := dial(t, s)
		c.send(kmsg.NewPtrFetchRequest(), 16)
		c.send(kmsg.NewPtrFetchRequest(), 16)
		<-waiting
		<-waiting
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		require.NoError(t, s.Stop(ctx))
		cancel()
		if graceful {
			for range 2 {
				resp := kmsg.NewPtrFetchResponse()
				resp.SetVersion(16)
				c.recv(resp, true)
				require.Len(t, resp.Topics[0].Partitions[0].RecordBatches, 64<<10)
			}
		}
		c.requireClosed()
		// Stop returned: every goroutine of the server is done.
		handed, once := rel.counts(t)
		require.Equal(t, 2, handed)
		require.Equal(t, 2, once, "graceful=%v", graceful)
	}
}

// A client that stops reading a response written from lent memory gets
// the request timeout, not the idle timeout, to take it: then the
// connection closes and the memory is given back.
func TestLentResponseToAStalledClientIsReleasedAtTheRequestTimeout(t *testing.T) {
	var rel releases
	mux := kafka.NewMux()
	mux.Handle(1, 4, 16, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		return kafka.Reply{Msg: fetchResponse(req, lent(8<<20)), Release: rel.next(nil)}, nil
	})
	// The timeout leaves the listener time to read all three requests
	// before the first response's write gives up and the connection
	// closes (200 ms was not enough on a loaded machine: a request never
	// read is never handed a Release).
	s := startServer(t, kafka.Config{RequestTimeout: time.Second, IdleTimeout: time.Hour}, mux)
	c := dial(t, s)
	for range 3 {
		c.send(kmsg.NewPtrFetchRequest(), 12)
	}
	rel.requireAllOnce(t, 3)
}
