package faults

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

// countingHealth is a real gRPC service on loopback that counts the unary
// calls it serves and streams three answers per Watch.
type countingHealth struct {
	healthpb.UnimplementedHealthServer
	checks atomic.Int64
}

func (s *countingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.checks.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *countingHealth) Watch(_ *healthpb.HealthCheckRequest, st grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	for range 3 {
		if err := st.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return nil
}

// serve starts the service on a loopback port and returns its address.
func serve(t *testing.T) (string, *countingHealth) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	h := &countingHealth{}
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }() // ends with Stop
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), h
}

// client dials addr through a wire.Pool with the links' interceptors, as
// sluiced does with --unsafe.fault-injection.
func client(t *testing.T, l *Links, addr string) healthpb.HealthClient {
	pool := wire.NewPool(wire.ClientOptions{Extra: l.DialOptions()})
	t.Cleanup(func() { _ = pool.Close() })
	cc, err := pool.Get(addr)
	require.NoError(t, err)
	return healthpb.NewHealthClient(cc)
}

// timeCheck returns how long one Check takes.
func timeCheck(t *testing.T, c healthpb.HealthClient) time.Duration {
	start := time.Now()
	_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	return time.Since(start)
}

func TestLinkDelaysUnaryCallsToItsPeerOnly(t *testing.T) {
	addr, _ := serve(t)
	other, _ := serve(t)
	l := NewLinks(1)
	c, co := client(t, l, addr), client(t, l, other)
	timeCheck(t, c) // connect first: the delay is what is measured
	timeCheck(t, co)
	// Undelayed calls are bounded well below the 300 ms a delayed one
	// takes, not near a loopback round trip: a loaded machine stalls a
	// call for tens of milliseconds.
	const undelayed = 250 * time.Millisecond
	require.Less(t, timeCheck(t, c), undelayed, "no fault yet")

	remove := l.Add(LinkRule{Peer: addr, Delay: 150 * time.Millisecond, Jitter: 50 * time.Millisecond})
	// The request and the answer both cross the link.
	took := timeCheck(t, c)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 2*time.Second)
	require.Less(t, timeCheck(t, co), undelayed, "a call to another peer must not wait")

	// A method filter that does not match leaves the call alone.
	remove()
	l.Add(LinkRule{Peer: faultapi.AnyPeer, MethodContains: "Watch", Delay: time.Second})
	require.Less(t, timeCheck(t, c), undelayed, "Check does not contain Watch")
	require.Equal(t, 1, l.Clear())
	delayed, _ := l.Counts()
	require.EqualValues(t, 2, delayed)

	// A caller that gives up while its request waits gets its deadline.
	l.Add(LinkRule{Peer: faultapi.AnyPeer, Delay: time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	require.ErrorContains(t, err, "DeadlineExceeded")
}

func TestLinkDuplicatesUnaryRequests(t *testing.T) {
	addr, h := serve(t)
	l := NewLinks(1)
	c := client(t, l, addr)
	l.Add(LinkRule{Peer: addr, Duplicate: 1})
	const calls = 5
	for range calls {
		resp, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), "the caller gets the original's answer")
	}
	// The copies are sent once the originals were answered: each arrives
	// at the server.
	require.Eventually(t, func() bool { return h.checks.Load() == 2*calls }, 5*time.Second, 10*time.Millisecond,
		"the server saw %d calls", h.checks.Load())
	_, dup := l.Counts()
	require.EqualValues(t, calls, dup)

	// Half the requests, drawn from the seed: some but not all.
	l.Clear()
	h.checks.Store(0)
	l.Add(LinkRule{Peer: addr, Duplicate: 0.5})
	for range 40 {
		timeCheck(t, c)
	}
	_, dup = l.Counts()
	require.Eventually(t, func() bool { return h.checks.Load() == 40+dup-calls }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, dup-calls, int64(5))
	require.Less(t, dup-calls, int64(35))
}

func TestLinkDelaysStreamMessagesOfOpenStreams(t *testing.T) {
	addr, _ := serve(t)
	l := NewLinks(1)
	c := client(t, l, addr)
	// Opened before the fault, like a follower's fetch stream.
	st, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = st.Recv()
	require.NoError(t, err)
	l.Add(LinkRule{Peer: addr, MethodContains: "Health/Watch", Delay: 100 * time.Millisecond})
	start := time.Now()
	for range 2 {
		_, err = st.Recv()
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "each received message waits")
	require.Equal(t, 1, l.Clear())
}

func TestLinkEndpoint(t *testing.T) {
	l := NewLinks(1)
	h := New(Deps{Links: l})
	post := func(body string) (int, faultapi.Response) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, faultapi.PathPrefix+"link", stringsReader(body)))
		return rec.Code, decodeResponse(t, rec)
	}
	for _, c := range []struct{ body, want string }{
		{`{}`, "peer: required"},
		{`{"peer": "storage-1", "delay": "1s"}`, "not host:port"},
		{`{"peer": "127.0.0.1:0", "delay": "1s"}`, "not host:port"},
		{`{"peer": "*", "delay": "soon"}`, `delay: "soon" is not a duration`},
		{`{"peer": "*", "jitter": "-1s"}`, "negative"},
		{`{"peer": "*", "delay": "2m"}`, "at most 1m0s"},
		{`{"peer": "*", "duplicate": 1.5}`, "not a probability"},
		{`{"peer": "*"}`, "needs at least one"},
		{`{"peer": "*", "delay": "1s", "duration": "x"}`, "duration"},
		{`{"peer": "*", "dealy": "1s"}`, `unknown field "dealy"`},
	} {
		code, resp := post(c.body)
		require.Equal(t, http.StatusBadRequest, code, c.body)
		require.Contains(t, resp.Error, c.want, c.body)
	}
	require.Nil(t, l.active.Load(), "a refused request must not add a fault")

	code, resp := post(`{"peer": "10.0.0.2:7001", "method_contains": "FollowerFetch", "delay": "100ms", "jitter": "20ms", "duplicate": 0.5, "duration": "50ms"}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	require.Contains(t, resp.Detail, "10.0.0.2:7001")
	require.Len(t, l.match("passthrough:///10.0.0.2:7001", "/sluice.replication.v1.ReplicationService/FollowerFetch"), 1)
	require.Empty(t, l.match("passthrough:///10.0.0.3:7001", "/sluice.replication.v1.ReplicationService/FollowerFetch"))
	require.Eventually(t, func() bool { return l.active.Load() == nil }, 5*time.Second, 10*time.Millisecond, "the fault ends after its duration")

	code, _ = post(`{"peer": "*", "duplicate": 1}`)
	require.Equal(t, http.StatusOK, code)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, faultapi.PathPrefix+"clear", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "1 link fault(s)")
	require.Nil(t, l.active.Load(), "clear removes link faults")

	code, resp = (func() (int, faultapi.Response) {
		rec := httptest.NewRecorder()
		New(Deps{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, faultapi.PathPrefix+"link", stringsReader(`{"peer":"*","delay":"1s"}`)))
		return rec.Code, decodeResponse(t, rec)
	})()
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, resp.Error, "no role-to-role connections")
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

func decodeResponse(t *testing.T, rec *httptest.ResponseRecorder) faultapi.Response {
	t.Helper()
	var resp faultapi.Response
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp), "answer %q", rec.Body.String())
	return resp
}
