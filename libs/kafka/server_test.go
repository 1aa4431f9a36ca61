package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/libs/kafka"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves mux on a loopback port until the test ends.
func startServer(t *testing.T, cfg kafka.Config, mux *kafka.Mux) *kafka.Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(cfg, mux, lis, kafka.ServerOptions{})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s
}

// client speaks the wire protocol with kmsg's own request formatter.
type client struct {
	t    *testing.T
	nc   net.Conn
	corr int32
	f    *kmsg.RequestFormatter
}

func dial(t *testing.T, s *kafka.Server) *client {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client"))}
}

// send writes req at version and returns its correlation id.
func (c *client) send(req kmsg.Request, version int16) int32 {
	c.t.Helper()
	req.SetVersion(version)
	c.corr++
	_, err := c.nc.Write(c.f.AppendRequest(nil, req, c.corr))
	require.NoError(c.t, err)
	return c.corr
}

// writeRaw writes b as it is.
func (c *client) writeRaw(b []byte) {
	c.t.Helper()
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

// recv reads one response frame and decodes it as resp (its version set):
// header v1 when flexibleHeader, else v0.
func (c *client) recv(resp kmsg.Response, flexibleHeader bool) int32 {
	c.t.Helper()
	frame, err := c.readFrame(5 * time.Second)
	require.NoError(c.t, err)
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if flexibleHeader {
		require.Equal(c.t, byte(0), body[0], "response header tags")
		body = body[1:]
	}
	require.NoError(c.t, resp.ReadFrom(body))
	return corr
}

func (c *client) readFrame(timeout time.Duration) ([]byte, error) {
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(timeout)))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.nc, frame)
	return frame, err
}

// requireClosed waits until the server closes the connection, with no
// response written before.
func (c *client) requireClosed() {
	c.t.Helper()
	_, err := c.readFrame(5 * time.Second)
	require.Error(c.t, err)
	require.False(c.t, errors.Is(err, os.ErrDeadlineExceeded), "the server did not close the connection: %v", err)
}

func TestApiVersionsV0AndFlexibleV3(t *testing.T) {
	mux := kafka.NewMux()
	mux.Handle(0, 3, 11, func(context.Context, *kafka.Request) (kafka.Reply, error) { return kafka.Reply{}, nil })
	s := startServer(t, kafka.Config{}, mux)
	c := dial(t, s)

	want := []kmsg.ApiVersionsResponseApiKey{{ApiKey: 0, MinVersion: 3, MaxVersion: 11}, {ApiKey: 18, MinVersion: 0, MaxVersion: 4}}
	for _, v := range []int16{0, 3, 4} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
		corr := c.send(req, v)
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(v)
		// ApiVersions answers with response header v0 at every version.
		require.Equal(t, corr, c.recv(resp, false))
		require.Zero(t, resp.ErrorCode, "v%d", v)
		require.Equal(t, want, resp.ApiKeys, "v%d", v)
	}
}

func TestApiVersionsUnsupportedVersion(t *testing.T) {
	mux := kafka.NewMux()
	mux.Handle(0, 3, 11, func(context.Context, *kafka.Request) (kafka.Reply, error) { return kafka.Reply{}, nil })
	s := startServer(t, kafka.Config{}, mux)
	c := dial(t, s)
	corr := c.send(kmsg.NewPtrApiVersionsRequest(), 5)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	require.Equal(t, corr, c.recv(resp, false))
	require.Equal(t, int16(35), resp.ErrorCode) // UNSUPPORTED_VERSION
	// Only ApiVersions' own entry, as Kafka answers: the version to retry with.
	require.Equal(t, []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 4}}, resp.ApiKeys)

	// The connection stays open: the client retries with a version both know.
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
	corr = c.send(req, 4)
	resp = kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(4)
	require.Equal(t, corr, c.recv(resp, false))
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.ApiKeys, 2)
}

func TestApiVersionsBadClientSoftware(t *testing.T) {
	s := startServer(t, kafka.Config{}, kafka.NewMux())
	c := dial(t, s)
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "-bad name", "1"
	c.send(req, 3)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	c.recv(resp, false)
	require.Equal(t, int16(42), resp.ErrorCode) // INVALID_REQUEST
}

// heartbeat is a request whose group id says what the test handler does.
func heartbeat(group string) *kmsg.HeartbeatRequest {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Group, r.MemberID = group, "m"
	return r
}

func recvHeartbeat(t *testing.T, c *client, version int16) (int32, *kmsg.HeartbeatResponse) {
	t.Helper()
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(version)
	corr := c.recv(resp, version >= 4)
	return corr, resp
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	release := make(chan struct{})
	handled := make(chan string, 16)
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		r := req.Msg.(*kmsg.HeartbeatRequest)
		handled <- r.Group
		resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ThrottleMillis = int32(len(r.Group))
		if r.Group == "slow" {
			// Answered later: the connection goes on meanwhile.
			return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return resp
			}}, nil
		}
		return kafka.Now(resp), nil
	})
	s := startServer(t, kafka.Config{}, mux)
	for _, v := range []int16{1, 4} { // header v1 / v2 (flexible)
		c := dial(t, s)
		groups := []string{"slow", "a", "bb", "ccc"}
		var corrs []int32
		for _, g := range groups {
			corrs = append(corrs, c.send(heartbeat(g), v))
		}
		// Every request is handled while the first one still waits.
		for _, g := range groups {
			require.Equal(t, g, <-handled)
		}
		release <- struct{}{}
		for i, g := range groups {
			corr, resp := recvHeartbeat(t, c, v)
			require.Equal(t, corrs[i], corr, "v%d response %d", v, i)
			require.Equal(t, int32(len(g)), resp.ThrottleMillis)
		}
	}
}

func TestNoResponseReply(t *testing.T) {
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		r := req.Msg.(*kmsg.HeartbeatRequest)
		if r.Group == "quiet" {
			return kafka.Reply{}, nil // as Produce with acks=0
		}
		return kafka.Now(r.ResponseKind()), nil
	})
	c := dial(t, startServer(t, kafka.Config{}, mux))
	c.send(heartbeat("quiet"), 4)
	c.send(heartbeat("quiet"), 4)
	corr := c.send(heartbeat("loud"), 4)
	got, _ := recvHeartbeat(t, c, 4)
	require.Equal(t, corr, got)
}

func TestOversizedFrameClosesBeforeAllocating(t *testing.T) {
	c := dial(t, startServer(t, kafka.Config{MaxRequestBytes: 1 << 20}, kafka.NewMux()))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var frame [4]byte
	binary.BigEndian.PutUint32(frame[:], 1<<20+1)
	c.writeRaw(frame[:])
	c.requireClosed()
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(512<<10), "bytes allocated while refusing a 1 MiB + 1 frame")

	for _, size := range []int32{-1, -1 << 31, 3} {
		c := dial(t, startServer(t, kafka.Config{}, kafka.NewMux()))
		binary.BigEndian.PutUint32(frame[:], uint32(size))
		c.writeRaw(frame[:])
		c.requireClosed()
	}
}

func TestUnsupportedKeyOrVersionCloses(t *testing.T) {
	mux := kafka.NewMux()
	mux.Handle(12, 1, 3, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		return kafka.Now(req.Msg.ResponseKind()), nil
	})
	s := startServer(t, kafka.Config{}, mux)

	c := dial(t, s)
	c.send(heartbeat("g"), 2)
	recvHeartbeat(t, c, 2)
	c.send(heartbeat("g"), 4) // above the range served
	c.requireClosed()

	c = dial(t, s)
	c.send(heartbeat("g"), 0) // below it
	c.requireClosed()

	c = dial(t, s)
	c.send(kmsg.NewPtrMetadataRequest(), 12) // known to Kafka, not registered
	c.requireClosed()

	c = dial(t, s)
	// API key 999 does not exist.
	c.writeRaw([]byte{0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	c.requireClosed()
}

func TestHandlerErrorOrPanicCloses(t *testing.T) {
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		switch req.Msg.(*kmsg.HeartbeatRequest).Group {
		case "error":
			return kafka.Reply{}, errors.New("protocol violation")
		case "panic":
			panic("handler bug")
		case "wrong-type":
			return kafka.Now(kmsg.NewPtrMetadataResponse()), nil
		case "wait-panic":
			return kafka.Reply{Wait: func(context.Context) kmsg.Response { panic("wait bug") }}, nil
		}
		return kafka.Now(req.Msg.ResponseKind()), nil
	})
	s := startServer(t, kafka.Config{}, mux)
	for _, g := range []string{"error", "panic", "wrong-type", "wait-panic"} {
		c := dial(t, s)
		c.send(heartbeat(g), 4)
		c.requireClosed()
	}
}

func TestIdleConnectionCloses(t *testing.T) {
	release := make(chan struct{})
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		resp := req.Msg.ResponseKind()
		return kafka.Reply{Wait: func(context.Context) kmsg.Response { <-release; return resp }}, nil
	})
	s := startServer(t, kafka.Config{IdleTimeout: 100 * time.Millisecond}, mux)

	// The clock starts before the dial: the server's idle timer starts at
	// accept, which can come before dial returns (a start taken after the
	// dial once measured 99.8 ms).
	start := time.Now()
	c := dial(t, s)
	c.requireClosed()
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)

	// A connection waiting on its own response is not idle.
	c = dial(t, s)
	corr := c.send(heartbeat("g"), 4)
	time.Sleep(300 * time.Millisecond) // three idle timeouts pass while the response is pending
	close(release)
	got, _ := recvHeartbeat(t, c, 4)
	require.Equal(t, corr, got)
	c.requireClosed() // idle again
}

func TestPendingResponsesAreBounded(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		calls.Add(1)
		resp := req.Msg.ResponseKind()
		return kafka.Reply{Wait: func(context.Context) kmsg.Response { <-release; return resp }}, nil
	})
	c := dial(t, startServer(t, kafka.Config{MaxPendingResponses: 2}, mux))
	for range 20 {
		c.send(heartbeat("g"), 4)
	}
	// One response the writer waits on, two queued, one handled and
	// waiting for room: no more requests are read.
	require.Eventually(t, func() bool { return calls.Load() == 4 }, 5*time.Second, time.Millisecond)
	require.Never(t, func() bool { return calls.Load() > 4 }, 200*time.Millisecond, 10*time.Millisecond)
	close(release)
	for range 20 {
		recvHeartbeat(t, c, 4)
	}
	require.Equal(t, int32(20), calls.Load())
}

func TestRequestContextHasTheRequestTimeout(t *testing.T) {
	deadlines := make(chan time.Duration, 1)
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
		d, ok := ctx.Deadline()
		require.True(t, ok)
		deadlines <- time.Until(d)
		require.Equal(t, "test-client", req.ClientID)
		require.Equal(t, "User:ANONYMOUS", req.Conn.Principal)
		return kafka.Now(req.Msg.ResponseKind()), nil
	})
	c := dial(t, startServer(t, kafka.Config{RequestTimeout: 7 * time.Second}, mux))
	c.send(heartbeat("g"), 4)
	recvHeartbeat(t, c, 4)
	d := <-deadlines
	require.Greater(t, d, 6*time.Second)
	require.LessOrEqual(t, d, 7*time.Second)
}

func TestStopWritesPendingResponsesThenCloses(t *testing.T) {
	release := make(chan struct{})
	waiting := make(chan struct{})
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		resp := req.Msg.ResponseKind()
		return kafka.Reply{Wait: func(context.Context) kmsg.Response { close(waiting); <-release; return resp }}, nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
	require.NoError(t, s.Start(context.Background()))
	c := dial(t, s)
	corr := c.send(heartbeat("g"), 4)
	<-waiting
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	// No new connection is accepted once stopping.
	require.Eventually(t, func() bool {
		nc, err := net.Dial("tcp", lis.Addr().String())
		if err == nil {
			_ = nc.Close()
		}
		return err != nil
	}, 5*time.Second, 5*time.Millisecond)
	close(release)
	got, _ := recvHeartbeat(t, c, 4)
	require.Equal(t, corr, got)
	c.requireClosed()
	require.NoError(t, <-stopped)
}

func TestStopDeadlineCancelsRequests(t *testing.T) {
	waiting := make(chan struct{})
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		resp := req.Msg.ResponseKind()
		return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response { close(waiting); <-ctx.Done(); return resp }}, nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
	require.NoError(t, s.Start(context.Background()))
	c := dial(t, s)
	c.send(heartbeat("g"), 4)
	<-waiting
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
	c.requireClosed()
}

func TestQueuedRequestBytesAreBoundedAcrossConnections(t *testing.T) {
	release := make(chan struct{})
	handled := make(chan string, 8)
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		r := req.Msg.(*kmsg.HeartbeatRequest)
		handled <- r.MemberID
		resp := r.ResponseKind()
		if r.MemberID == "a" {
			// Holds its frame's bytes until released.
			return kafka.Reply{Wait: func(context.Context) kmsg.Response { <-release; return resp }}, nil
		}
		return kafka.Now(resp), nil
	})
	s := startServer(t, kafka.Config{MaxRequestBytes: 1 << 10, MaxQueuedRequestBytes: 1500}, mux)
	big := func(member string) *kmsg.HeartbeatRequest {
		r := heartbeat(string(make([]byte, 700)))
		r.MemberID = member
		return r
	}
	a, b := dial(t, s), dial(t, s)
	corrA := a.send(big("a"), 4)
	require.Equal(t, "a", <-handled)
	// About 730 of 1500 bytes are held: b's first request fits, its second
	// waits for a's to be answered.
	b.send(big("b1"), 4)
	require.Equal(t, "b1", <-handled)
	recvHeartbeat(t, b, 4)
	a.send(big("a"), 4)
	require.Equal(t, "a", <-handled)
	corrB := b.send(big("b2"), 4)
	require.Never(t, func() bool { return len(handled) > 0 }, 200*time.Millisecond, 10*time.Millisecond)
	close(release)
	require.Equal(t, "b2", <-handled)
	got, _ := recvHeartbeat(t, b, 4)
	require.Equal(t, corrB, got)
	got, _ = recvHeartbeat(t, a, 4)
	require.Equal(t, corrA, got)
}
