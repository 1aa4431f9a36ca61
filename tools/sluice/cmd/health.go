package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func newHealthCmd(g *globals) *cobra.Command {
	var service string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [ADDRESS]",
		Short: "Ask one process whether it is serving (gRPC health), for orchestrators' health checks",
		Long: `Call grpc.health.v1.Health/Check on one sluiced process: ADDRESS (host:port),
or the first --bootstrap address. The empty service (the default) is the
process as a whole, SERVING once every role it runs has started; --service
asks about one gRPC service, such as sluice.storage.v1.StorageService.

Exits 0 when the answer is SERVING and 1 otherwise, saying why: the status
answered, or that the process could not be reached. The --tls-* flags apply.
Container images use it as their health check, since they have no shell:

  HEALTHCHECK CMD ["/sluice", "health", "127.0.0.1:9090"]`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr := ""
			if len(args) == 1 {
				addr = args[0]
			} else if first, _, _ := strings.Cut(g.bootstrap, ","); strings.TrimSpace(first) != "" {
				addr = strings.TrimSpace(first)
			}
			if addr == "" {
				return errors.New("health: no address: pass ADDRESS or --bootstrap")
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout must be positive, got %v", timeout)
			}
			creds := insecure.NewCredentials()
			tlsCfg, err := g.clientTLS()
			if err != nil {
				return err
			}
			if tlsCfg != nil {
				creds = credentials.NewTLS(tlsCfg)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := checkHealth(ctx, addr, service, grpc.WithTransportCredentials(creds))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", healthSubject(addr, service), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&service, "service", "", "gRPC service to ask about; empty means the whole process.")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "How long to wait for the answer, connecting included.")
	return cmd
}

// checkHealth asks addr for the health of service and returns SERVING, or
// an error that says what was answered instead or why nothing was.
func checkHealth(ctx context.Context, addr, service string, opts ...grpc.DialOption) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return 0, fmt.Errorf("health: %s: %w", addr, err)
	}
	defer conn.Close() // the answer is what matters; a close error says nothing about health
	// Wait for the connection (within ctx) rather than failing at the
	// first refused dial: a process that is starting is worth the wait.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	subject := healthSubject(addr, service)
	switch {
	case status.Code(err) == codes.NotFound:
		return 0, fmt.Errorf("%s: unknown service: the process does not serve it (does it run the role that does?)", subject)
	case status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil:
		return 0, fmt.Errorf("%s: no answer in time (is the process running and listening there?): %s", subject, status.Convert(err).Message())
	case err != nil:
		return 0, fmt.Errorf("%s: %s", subject, describeErr(err))
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return st, fmt.Errorf("%s: %s (reachable, but not ready to serve)", subject, st)
	}
	return resp.GetStatus(), nil
}

// healthSubject names what was asked about, for messages.
func healthSubject(addr, service string) string {
	if service == "" {
		return addr
	}
	return addr + " service " + service
}
