// Package storagenode is the storage-node role. It owns partition replicas on local disk, appends record batches and serves fetches straight from the page cache.
package storagenode

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// Config configures the storage-node role.
type Config struct {
	// ControlledShutdownTimeout bounds how long a stopping node waits for
	// its leaderships to move.
	ControlledShutdownTimeout time.Duration
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ControlledShutdownTimeout, "storage.controlled-shutdown-timeout", 15*time.Second,
		"How long a stopping storage node waits for its partition leaderships to move to other replicas.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.ControlledShutdownTimeout < 0 {
		return fmt.Errorf("storage.controlled-shutdown-timeout: %v is negative", c.ControlledShutdownTimeout)
	}
	return nil
}

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

// StorageNode is the storage-node role. Its RPCs answer UNIMPLEMENTED until they are built.
type StorageNode struct {
	storagev1.UnimplementedStorageServiceServer

	cfg    Config
	deps   Deps
	logger *slog.Logger
}

// New builds the role and registers its gRPC service on deps.Server.
func New(cfg Config, deps Deps) *StorageNode {
	r := &StorageNode{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("storage-node"))}
	storagev1.RegisterStorageServiceServer(deps.Server.GRPC, r)
	registerValidators(deps.Server.Validators)
	return r
}

// Name implements service.Service.
func (r *StorageNode) Name() string { return "storage-node" }

// HealthServices implements service.HealthReporter.
func (r *StorageNode) HealthServices() []string {
	return []string{storagev1.StorageService_ServiceDesc.ServiceName}
}

// Start implements service.Service.
func (r *StorageNode) Start(context.Context) error { return nil }

// Stop moves this node's leaderships to other in-sync replicas (controlled
// shutdown) before the node stops serving, so producers and consumers move
// over without waiting for a session to expire.
func (r *StorageNode) Stop(ctx context.Context) error {
	if r.deps.Member == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ControlledShutdownTimeout)
	defer cancel()
	if err := r.deps.Member.ControlledShutdown(sctx); err != nil {
		r.logger.Warn("controlled shutdown incomplete; stopping anyway", log.Err(err))
	}
	return nil
}
