// Package txncoord is the transaction-coordinator role. It hands out
// producer ids (in blocks allocated by the controller) and epochs, and runs
// transactions across partitions with two-phase commit markers, keeping
// their state in the internal topic __transaction_state.
package txncoord

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"time"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the transaction-coordinator role. Names follow Kafka's
// broker configs.
type Config struct {
	// MaxTimeout is transaction.max.timeout.ms: the longest transaction
	// timeout a producer may ask for.
	MaxTimeout time.Duration
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.MaxTimeout, "txn.max-timeout", 15*time.Minute,
		"Longest transaction timeout a producer may ask for (transaction.max.timeout.ms); longer ones get INVALID_TRANSACTION_TIMEOUT.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MaxTimeout < time.Millisecond || c.MaxTimeout.Milliseconds() > math.MaxInt32 {
		return fmt.Errorf("txn.max-timeout: %v must be between 1ms and %d ms", c.MaxTimeout, math.MaxInt32)
	}
	return nil
}

// TransactionCoordinator is the transaction-coordinator role.
type TransactionCoordinator struct {
	txnv1.UnimplementedTransactionCoordinatorServiceServer

	cfg    Config
	deps   service.Deps
	logger *slog.Logger
	pids   *pidManager
}

// New builds the role and registers its gRPC service on deps.Server.
func New(cfg Config, deps service.Deps) *TransactionCoordinator {
	r := &TransactionCoordinator{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("transaction-coordinator"))}
	r.pids = newPIDManager(r.allocateProducerIDs, r.logger)
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
func (r *TransactionCoordinator) Stop(context.Context) error {
	r.pids.close()
	return nil
}

// pidWait bounds how long InitProducerId waits for a block of producer ids
// before it answers a retriable error, so a client is not held for its
// whole deadline while the controller is away.
const pidWait = 5 * time.Second

// InitProducerId returns a producer id and epoch. Without a transactional
// id (an idempotent producer) every call gets a new producer id with epoch
// 0, as Kafka's does, whatever producer id and epoch the request carries:
// the old id's sequence state on the partitions stays the old producer's.
func (r *TransactionCoordinator) InitProducerId(ctx context.Context, req *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
	if e := r.validateInit(req); e != nil {
		return &txnv1.InitProducerIdResponse{Error: e.Proto(), ProducerId: -1, ProducerEpoch: -1}, nil
	}
	if req.GetTransactionalId() != "" {
		return nil, errs.New(errs.Unimplemented, "transactional ids are not served yet")
	}
	id, err := r.newProducerID(ctx)
	if err != nil {
		return &txnv1.InitProducerIdResponse{Error: errs.From(err).Proto(), ProducerId: -1, ProducerEpoch: -1}, nil
	}
	return &txnv1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}, nil
}

// validateInit checks an InitProducerId request; nothing changes on a bad
// one.
func (r *TransactionCoordinator) validateInit(req *txnv1.InitProducerIdRequest) *errs.Error {
	tid, timeout := req.GetTransactionalId(), req.GetTransactionTimeoutMs()
	switch {
	case len(tid) > coordinator.MaxTransactionalIDBytes:
		return errs.Invalid(errs.InvalidRequest, "transactional_id", "the transactional id has %d bytes, more than the %d allowed",
			len(tid), coordinator.MaxTransactionalIDBytes)
	case timeout < 0:
		return errs.Invalid(errs.InvalidTransactionTimeout, "transaction_timeout_ms", "%d is negative", timeout)
	case tid != "" && timeout == 0:
		return errs.Invalid(errs.InvalidTransactionTimeout, "transaction_timeout_ms", "a transactional producer needs a positive transaction timeout")
	case tid != "" && int64(timeout) > r.cfg.MaxTimeout.Milliseconds():
		return errs.Invalid(errs.InvalidTransactionTimeout, "transaction_timeout_ms", "%d ms is above the maximum of %d ms (txn.max-timeout)",
			timeout, r.cfg.MaxTimeout.Milliseconds())
	case (req.GetProducerId() < 0) != (req.GetProducerEpoch() < 0):
		return errs.Invalid(errs.InvalidRequest, "producer_epoch", "producer id %d and epoch %d must both be set or both be -1",
			req.GetProducerId(), req.GetProducerEpoch())
	case req.GetProducerId() < -1 || req.GetProducerEpoch() < -1 || req.GetProducerEpoch() > math.MaxInt16:
		return errs.Invalid(errs.InvalidRequest, "producer_epoch", "producer id %d and epoch %d: the id must be -1 or more and the epoch -1..%d",
			req.GetProducerId(), req.GetProducerEpoch(), math.MaxInt16)
	}
	return nil
}

// newProducerID returns a producer id never handed out before. While the
// controller cannot be reached it answers a retriable error after pidWait.
func (r *TransactionCoordinator) newProducerID(ctx context.Context) (int64, error) {
	wctx, cancel := context.WithTimeout(ctx, pidWait)
	defer cancel()
	id, err := r.pids.next(wctx)
	if err == nil {
		return id, nil
	}
	e := errs.From(err)
	if e.Retriable() || e.Code == errs.StaleBrokerEpoch || e.Code == errs.NotController {
		// Passing on: this process re-registers, the controller moves.
		return -1, errs.New(errs.CoordinatorLoadInProgress, "no producer id to hand out yet: %v", err)
	}
	return -1, err
}

// allocateProducerIDs asks the active controller for a block of producer
// ids, as this process (its node id and current broker epoch).
func (r *TransactionCoordinator) allocateProducerIDs(ctx context.Context) (pidBlock, error) {
	if r.deps.Member == nil || r.deps.Member.Epoch() == 0 {
		return pidBlock{}, errs.New(errs.NodeNotReady, "node %d is not registered with the controller yet", r.deps.Node.ID)
	}
	epoch := r.deps.Member.Epoch()
	addr := r.deps.Metadata.Load().ControllerAddress()
	if addr == "" {
		return pidBlock{}, errs.New(errs.NotController, "no active controller is known")
	}
	conn, err := r.deps.Pool.Get(addr)
	if err != nil {
		return pidBlock{}, err
	}
	resp, err := controllerv1.NewControllerServiceClient(conn).AllocateProducerIds(ctx, &controllerv1.AllocateProducerIdsRequest{
		BrokerId: int32(r.deps.Node.ID), BrokerEpoch: epoch,
	})
	if err != nil {
		return pidBlock{}, errs.From(err)
	}
	if e := errs.FromProto(resp.GetError()); e != nil {
		return pidBlock{}, e
	}
	start := resp.GetProducerIdStart()
	return pidBlock{start: start, next: start, end: start + int64(resp.GetProducerIdLen())}, nil
}
