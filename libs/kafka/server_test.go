package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
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
	s := startServer(t, kafka.Config{}, kafka.NewMux())
	c := dial(t, s)
	corr := c.send(kmsg.NewPtrApiVersionsRequest(), 5)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	require.Equal(t, corr, c.recv(resp, false))
	require.Equal(t, int16(35), resp.ErrorCode) // UNSUPPORTED_VERSION
	require.Equal(t, []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 4}}, resp.ApiKeys)

	// The connection stays open: the client retries with a version both know.
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-test", "1.0.0"
	corr = c.send(req, 4)
	resp = kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(4)
	require.Equal(t, corr, c.recv(resp, false))
	require.Zero(t, resp.ErrorCode)
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
