// Package txncoord is the transaction-coordinator role. It manages producer ids, epochs and transactions with two-phase commit markers.
package txncoord

import (
	"context"
	"flag"
	"log/slog"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the transaction-coordinator role.
type Config struct{}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(*flag.FlagSet) {}

// Validate checks the configuration.
func (c *Config) Validate() error { return nil }

// TransactionCoordinator is the transaction-coordinator role. Its RPCs answer UNIMPLEMENTED until they are built.
type TransactionCoordinator struct {
	txnv1.UnimplementedTransactionCoordinatorServiceServer

	cfg    Config
	deps   service.Deps
	logger *slog.Logger
}

// New builds the role and registers its gRPC service on deps.Server.
func New(cfg Config, deps service.Deps) *TransactionCoordinator {
	r := &TransactionCoordinator{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("transaction-coordinator"))}
	txnv1.RegisterTransactionCoordinatorServiceServer(deps.Server.GRPC, r)
	return r
}

// Name implements service.Service.
func (r *TransactionCoordinator) Name() string { return "transaction-coordinator" }

// HealthServices implements service.HealthReporter.
func (r *TransactionCoordinator) HealthServices() []string {
	return []string{txnv1.TransactionCoordinatorService_ServiceDesc.ServiceName}
}

// Start implements service.Service.
func (r *TransactionCoordinator) Start(context.Context) error { return nil }

// Stop implements service.Service.
func (r *TransactionCoordinator) Stop(context.Context) error { return nil }
