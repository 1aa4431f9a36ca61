// Package groupcoord is the group-coordinator role. It manages consumer groups: rebalances, assignment and committed offsets.
package groupcoord

import (
	"context"
	"flag"
	"log/slog"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the group-coordinator role.
type Config struct{}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(*flag.FlagSet) {}

// Validate checks the configuration.
func (c *Config) Validate() error { return nil }

// GroupCoordinator is the group-coordinator role. Its RPCs answer UNIMPLEMENTED until they are built.
type GroupCoordinator struct {
	groupv1.UnimplementedGroupCoordinatorServiceServer

	cfg    Config
	deps   service.Deps
	logger *slog.Logger
}

// New builds the role and registers its gRPC service on deps.Server.
func New(cfg Config, deps service.Deps) *GroupCoordinator {
	r := &GroupCoordinator{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("group-coordinator"))}
	groupv1.RegisterGroupCoordinatorServiceServer(deps.Server.GRPC, r)
	return r
}

// Name implements service.Service.
func (r *GroupCoordinator) Name() string { return "group-coordinator" }

// HealthServices implements service.HealthReporter.
func (r *GroupCoordinator) HealthServices() []string {
	return []string{groupv1.GroupCoordinatorService_ServiceDesc.ServiceName}
}

// Start implements service.Service.
func (r *GroupCoordinator) Start(context.Context) error { return nil }

// Stop implements service.Service.
func (r *GroupCoordinator) Stop(context.Context) error { return nil }
