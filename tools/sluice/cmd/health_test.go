package cmd

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// runHealth runs `sluice health args...` as the CLI does and returns its
// output and error.
func runHealth(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("SLUICE_CONFIG", "") // no client configuration file
	root, _ := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"health"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// sluice health against a real gRPC health server: SERVING exits 0, any
// other answer (or none) exits non-zero saying what was answered.
func TestHealth(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }() // ends with srv.Stop
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	const svc = "sluice.storage.v1.StorageService"

	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	_, err = runHealth(t, addr)
	require.ErrorContains(t, err, "NOT_SERVING")

	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	out, err := runHealth(t, addr)
	require.NoError(t, err)
	require.Equal(t, addr+": SERVING\n", out)

	// The address may come from --bootstrap instead.
	_, err = runHealth(t, "--bootstrap", addr+",127.0.0.1:1")
	require.NoError(t, err)

	// One service: unknown, then not serving, then serving.
	_, err = runHealth(t, addr, "--service", svc)
	require.ErrorContains(t, err, "unknown service")
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	_, err = runHealth(t, addr, "--service", svc)
	require.ErrorContains(t, err, svc+": NOT_SERVING")
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	_, err = runHealth(t, addr, "--service", svc)
	require.NoError(t, err)

	// Nobody listening: an error within --timeout, not a hang.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	_, err = runHealth(t, deadAddr, "--timeout", "300ms")
	require.ErrorContains(t, err, "no answer in time")

	// TLS flags apply: a CA file that does not exist is refused before
	// anything is dialled.
	_, err = runHealth(t, addr, "--tls-ca", t.TempDir()+"/missing.pem")
	require.Error(t, err)
}
