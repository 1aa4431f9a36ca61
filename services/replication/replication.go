// Package replication is the replication role. It keeps follower replicas in sync with their leaders: follower fetch, ISR changes, high-watermark advance and truncation by leader epoch.
package replication

import (
	"context"
	"flag"
	"log/slog"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// Config configures the replication role.
type Config struct{}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(*flag.FlagSet) {}

// Validate checks the configuration.
func (c *Config) Validate() error { return nil }

// Deps are the role's collaborators.
type Deps struct {
	Logger    *slog.Logger
	Telemetry *telemetry.Providers
	Server    *grpcx.Server
	Node      config.Node
	// Metadata is the node's view of the cluster.
	Metadata *metadata.Cache
	// Member is the node's registration with the controller.
	Member *membership.Member
	// Pool holds connections to other nodes.
	Pool *grpcx.Pool
}

// Replication is the replication role. Its RPCs answer UNIMPLEMENTED until they are built.
type Replication struct {
	replicationv1.UnimplementedReplicationServiceServer

	cfg    Config
	deps   Deps
	logger *slog.Logger
}

// New builds the role and registers its gRPC service on deps.Server.
func New(cfg Config, deps Deps) *Replication {
	r := &Replication{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("replication"))}
	replicationv1.RegisterReplicationServiceServer(deps.Server.GRPC, r)
	return r
}

// Name implements service.Service.
func (r *Replication) Name() string { return "replication" }

// HealthServices implements service.HealthReporter.
func (r *Replication) HealthServices() []string {
	return []string{replicationv1.ReplicationService_ServiceDesc.ServiceName}
}

// Start implements service.Service.
func (r *Replication) Start(context.Context) error { return nil }

// Stop implements service.Service.
func (r *Replication) Stop(context.Context) error { return nil }
