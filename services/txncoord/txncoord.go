// Package txncoord is the transaction-coordinator role. It hands out
// producer ids (in blocks allocated by the controller) and epochs, and runs
// transactions across partitions with two-phase commit markers, keeping
// their state in the internal topic __transaction_state.
//
// Each transactional id belongs to one partition of __transaction_state
// (Kafka's hash) and is coordinated by the process metadata names for that
// partition, with the machinery the group coordinator uses too
// (libs/coordinator): a shard replays its partition before it serves,
// writes every state change with acks=all before it answers, and is fenced
// when a later coordinator takes the partition over.
//
// A transaction moves Empty → Ongoing (AddPartitionsToTxn,
// AddOffsetsToTxn) → PrepareCommit / PrepareAbort (EndTxn, a timeout, an
// InitProducerId that fences the producer, AbortTransaction) →
// CompleteCommit / CompleteAbort once its markers are written. Ending a
// transaction bumps the producer epoch (KIP-890), so nothing the producer
// sent with the old epoch can join a later transaction.
package txncoord

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	client "github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the transaction-coordinator role. Names follow Kafka's
// broker configs.
type Config struct {
	// MaxTimeout is transaction.max.timeout.ms: the longest transaction
	// timeout a producer may ask for.
	MaxTimeout time.Duration
	// IDExpiration is transactional.id.expiration.ms: a transactional id
	// without an open transaction and without a change for this long is
	// removed (a tombstone in __transaction_state).
	IDExpiration time.Duration
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.MaxTimeout, "txn.max-timeout", 15*time.Minute,
		"Longest transaction timeout a producer may ask for (transaction.max.timeout.ms); longer ones get INVALID_TRANSACTION_TIMEOUT.")
	fs.DurationVar(&c.IDExpiration, "txn.id-expiration", 7*24*time.Hour,
		"How long a transactional id without an open transaction is kept after its last change (transactional.id.expiration.ms).")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MaxTimeout < time.Millisecond || c.MaxTimeout.Milliseconds() > math.MaxInt32 {
		return fmt.Errorf("txn.max-timeout: %v must be between 1ms and %d ms", c.MaxTimeout, math.MaxInt32)
	}
	if c.IDExpiration < time.Second {
		return fmt.Errorf("txn.id-expiration: %v must be at least 1s", c.IDExpiration)
	}
	return nil
}

// TransactionCoordinator is the transaction-coordinator role.
type TransactionCoordinator struct {
	txnv1.UnimplementedTransactionCoordinatorServiceServer

	cfg     Config
	deps    service.Deps
	logger  *slog.Logger
	now     func() time.Time
	pids    *pidManager
	markers *markerWriter
	m       *metrics // nil in tests that build the role by hand
	// session is the node's broker session with the controller
	// (membership.Member.Session); nil in a process without membership.
	session coordinator.Session

	mu     sync.Mutex
	shards map[int32]*shard
	client *client.Client

	cancel context.CancelFunc
	done   chan struct{}
}

// New builds the role and registers its gRPC service on deps.Server and
// its Kafka APIs on deps.Kafka.
func New(cfg Config, deps service.Deps) *TransactionCoordinator {
	r := &TransactionCoordinator{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("transaction-coordinator")),
		now: deps.Clock(), shards: map[int32]*shard{}}
	r.pids = newPIDManager(r.allocateProducerIDs, r.logger)
	r.markers = &markerWriter{send: r.sendMarkers, logger: r.logger}
	if deps.Member != nil {
		r.session = deps.Member.Session
	}
	if deps.Telemetry != nil {
		r.m = newMetrics(deps.Telemetry.Meter.Meter("github.com/sluice-io/sluice/services/txncoord"), r)
	}
	r.markers.m = r.m
	txnv1.RegisterTransactionCoordinatorServiceServer(deps.Server.GRPC, r)
	r.registerKafka(deps.Kafka)
	return r
}

// Name implements service.Service.
func (r *TransactionCoordinator) Name() string { return "transaction-coordinator" }

// HealthServices implements service.HealthReporter.
func (r *TransactionCoordinator) HealthServices() []string {
	return []string{txnv1.TransactionCoordinatorService_ServiceDesc.ServiceName}
}

// Start follows this process's share of __transaction_state: it loads a
// shard for each partition metadata says it coordinates and drops the
// others, and aborts transactions that time out.
func (r *TransactionCoordinator) Start(context.Context) error {
	r.pids.warmUp()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		coordinator.Run(ctx, r.deps.Metadata, r.deps.Replicas, r.now, timeoutScan, r.reconcile, func(now time.Time) {
			for _, s := range r.loadedShards() {
				s.tick(now)
			}
		})
	}()
	return nil
}

// timeoutScan is how often shards look for transactions past their
// timeout.
const timeoutScan = time.Second

// Stop unloads every shard (marker writing stops; the next coordinator
// resumes it from the log) and stops fetching producer ids.
func (r *TransactionCoordinator) Stop(ctx context.Context) error {
	r.pids.close()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	shards := r.shards
	r.shards = map[int32]*shard{}
	c := r.client
	r.mu.Unlock()
	for _, s := range shards {
		s.unload()
	}
	if c != nil {
		_ = c.Close() // closing idle connections; nothing to report
	}
	return nil
}

func (r *TransactionCoordinator) loadedShards() []*shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*shard, 0, len(r.shards))
	for _, s := range r.shards {
		out = append(out, s)
	}
	return out
}

// txnRole is the role that coordinates __transaction_state.
const txnRole = string(role.TransactionCoordinator)

// reconcile loads a shard for every partition of __transaction_state
// metadata says this process coordinates, and unloads the others
// (coordinator.Wanted and coordinator.Reconcile, as the group coordinator).
func (r *TransactionCoordinator) reconcile() {
	img := r.deps.Metadata.Load()
	me := int32(r.deps.Node.ID)
	// A coordinator of its own holds a partition only within one broker
	// session: one that lost its session may have lost the partition.
	myEpoch := img.Brokers[me].GetBrokerEpoch()
	wanted := coordinator.Wanted(img, r.deps.Replicas, stateTopic, txnRole, me)
	r.mu.Lock()
	drop, start := coordinator.Reconcile(r.shards, wanted, func(s *shard, w coordinator.Placement) bool {
		return w.Local == s.local && w.Epoch == s.epoch && !s.stale.Load() && (s.local != nil || s.brokerEpoch == myEpoch)
	}, func(id int32, w coordinator.Placement) *shard {
		var s *shard
		if w.Local != nil {
			s = newShard(r, id, coordinator.NewLocalLog(stateTopic, w.Local, w.Epoch))
			s.local, s.epoch = w.Local, w.Epoch
		} else {
			s = newShard(r, id, coordinator.NewRemoteLog(r.env(), stateTopic, txnRole, id, img.Revision))
			s.revision, s.brokerEpoch = img.Revision, myEpoch
		}
		if ps, ok := img.Partition(stateTopic, id); ok {
			s.coordEpoch = ps.GetLeaderEpoch()
		}
		return s
	})
	r.mu.Unlock()
	for _, s := range drop {
		r.logger.Info("transaction coordinator shard unloaded", log.TopicPartition(stateTopic, s.id), log.Epoch(s.epoch))
		s.unload()
	}
	for _, s := range start {
		r.logger.Info("transaction coordinator shard loading", log.TopicPartition(stateTopic, s.id), log.Epoch(s.epoch),
			slog.Bool("at_leader", s.local != nil), log.Revision(s.revision))
		go s.load()
	}
}

// shardFor returns the loaded shard that coordinates tid, or the error to
// answer: NOT_COORDINATOR with a hint, COORDINATOR_LOAD_IN_PROGRESS while
// the shard replays, COORDINATOR_NOT_AVAILABLE while nobody can.
func (r *TransactionCoordinator) shardFor(tid string) (*shard, *errs.Error) {
	if e := validTransactionalID(tid); e != nil {
		return nil, e
	}
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[stateTopic]
	if !ok || len(t.Partitions) == 0 {
		return nil, errs.New(errs.CoordinatorNotAvailable, "%s does not exist yet; FindCoordinator creates it", stateTopic)
	}
	pid := coordinator.PartitionFor(tid, int32(len(t.Partitions)))
	r.mu.Lock()
	s := r.shards[pid]
	r.mu.Unlock()
	if s == nil {
		return nil, coordinator.NotLoaded(img, stateTopic, txnRole, int32(r.deps.Node.ID), tid, fmt.Sprintf("transactional id %q", tid), pid)
	}
	if !s.isLoaded() {
		return nil, errs.New(errs.CoordinatorLoadInProgress, "transactional id %q: the coordinator is replaying %s-%d", tid, stateTopic, pid)
	}
	// A shard another process may have taken over answers nothing from
	// memory (coordinator.SessionError).
	if e := coordinator.SessionError(r.session, stateTopic, pid, s.local == nil, s.brokerEpoch, fmt.Sprintf("transactional id %q", tid)); e != nil {
		return nil, e
	}
	return s, nil
}

func validTransactionalID(tid string) *errs.Error {
	switch {
	case tid == "":
		return errs.Invalid(errs.InvalidRequest, "transactional_id", "the transactional id is empty")
	case len(tid) > coordinator.MaxTransactionalIDBytes:
		return errs.Invalid(errs.InvalidRequest, "transactional_id", "the transactional id has %d bytes, more than the %d allowed",
			len(tid), coordinator.MaxTransactionalIDBytes)
	}
	return nil
}

// env is what the shared coordinator machinery needs of this process.
func (r *TransactionCoordinator) env() coordinator.Env {
	return coordinator.Env{NodeID: int32(r.deps.Node.ID), Metadata: r.deps.Metadata, Pool: r.deps.Pool, Logger: r.logger, Client: r.sdk}
}

// sdk returns the process's client, for remote shards' replay.
func (r *TransactionCoordinator) sdk() *client.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		// client.New fails only on an empty bootstrap list.
		r.client, _ = client.New(client.Config{Bootstrap: []string{r.deps.Node.AdvertiseAddr()}, ClientID: "sluice-transaction-coordinator", Logger: r.logger})
	}
	return r.client
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
	if e := authorizeInit(ctx, r.deps.Authorizer(), r.deps.Metadata, req); e != nil {
		return nil, e
	}
	if req.GetTransactionalId() != "" {
		return r.initTransactional(ctx, req), nil
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
	case tid != "" && timeout < 0:
		// Without a transactional id the timeout means nothing, as in
		// Kafka: librdkafka's idempotent producer sends -1.
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
