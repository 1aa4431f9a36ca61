// Package storagenode is the storage-node role. It owns this node's
// partition replicas (libs/replica) and serves StorageService: produce
// (unary and pipelined streams), fetch streamed from the page cache,
// offsets lookups and record deletion. It also serves the node's
// ReplicationService, the leader side of follower fetch streams.
package storagenode

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/storage"
)

// Config configures the storage-node role.
type Config struct {
	// ControlledShutdownTimeout bounds how long a stopping node waits for
	// its leaderships to move.
	ControlledShutdownTimeout time.Duration
	// ReplicaLagTimeMax is replica.lag.time.max.ms.
	ReplicaLagTimeMax time.Duration
	// DiskReserveBytes is the free space, on the file system of the data
	// directory, that appends never use (storage.SpaceGuard); 0 disables.
	DiskReserveBytes int64
	// PageCacheBudgetBytes bounds the bytes of this node's logs left in the
	// kernel's page cache (storage.PageCache); 0 means no bound and a
	// negative value storage.AutoPageCacheBudget.
	PageCacheBudgetBytes int64
	// WriteBehindBytes is storage.Options.WriteBehindBytes.
	WriteBehindBytes int64
	// ReadCopyBudgetBytes bounds the memory of record batches read as
	// copies (storage.ReadCopies) and not yet released, such as fetched
	// chunks waiting for their sockets; beyond it reads hand out slices of
	// the segments' maps. 0 never copies.
	ReadCopyBudgetBytes int64
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ControlledShutdownTimeout, "storage.controlled-shutdown-timeout", 15*time.Second,
		"How long a stopping storage node waits for its partition leaderships to move to other replicas.")
	fs.DurationVar(&c.ReplicaLagTimeMax, "storage.replica-lag-time-max", 30*time.Second,
		"A follower that has not caught up with its leader for this long leaves the ISR (replica.lag.time.max.ms).")
	fs.Int64Var(&c.DiskReserveBytes, "storage.disk-reserve-bytes", DefaultDiskReserveBytes,
		"Free bytes kept on the data directory's file system: appends that would leave less fail with a retriable KAFKA_STORAGE_ERROR "+
			"until space is freed, so checkpoints, DeleteRecords and an etcd member sharing the disk keep room. 0 disables.")
	fs.Int64Var(&c.PageCacheBudgetBytes, "storage.page-cache-budget-bytes", -1,
		"Bytes of this node's log data left in the kernel's page cache: beyond it the oldest durable bytes are dropped (never a "+
			"log's newest 64 MiB), so writes reuse pages instead of taking fresh ones. -1 picks a quarter of memory on a VM whose "+
			"balloon reports free pages to the host (where a fresh page costs the host a fault) and no bound elsewhere; 0 means no bound.")
	fs.Int64Var(&c.ReadCopyBudgetBytes, "storage.read-copy-budget-bytes", DefaultReadCopyBudgetBytes,
		"Memory for record batches that reads (fetches of consumers and followers) copy out of the page cache with pread, held "+
			"until they are written to their sockets. Copies are cheaper than sending the segments' memory-mapped pages where "+
			"touching mapped pages is dear (some virtual machines); beyond the budget, as with many slow readers holding chunks, "+
			"reads hand out the mapped pages. 0 never copies.")
	fs.Int64Var(&c.WriteBehindBytes, "storage.write-behind-bytes", 0,
		"For partitions that do not fsync before acknowledging: start writing every this many appended bytes to the disk at once "+
			"(4194304 is a good value), waiting for the previous range, so a log keeps little dirty data and an fsync elsewhere on the "+
			"file system (a transaction's state, a topic that fsyncs) does not wait behind gigabytes of it on ext4. It costs produce "+
			"bursts CPU the kernel would spend later (about 12 % of a 1 GiB acks=1 burst on a 2-core VM). 0, the default, leaves "+
			"writeback to the kernel.")
}

// DefaultReadCopyBudgetBytes is the default budget of copied reads held at
// once: 256 chunks of 1 MiB (max.partition.fetch.bytes's default), a small
// share of a server's memory.
const DefaultReadCopyBudgetBytes = 256 << 20

// DefaultDiskReserveBytes is the default free-space reserve: room for the
// logs' checkpoints and index files, and for one etcd WAL segment (64 MiB,
// preallocated) when a controller shares the disk.
const DefaultDiskReserveBytes = 64 << 20

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.ControlledShutdownTimeout < 0 {
		return fmt.Errorf("storage.controlled-shutdown-timeout: %v is negative", c.ControlledShutdownTimeout)
	}
	if c.ReplicaLagTimeMax < 100*time.Millisecond {
		return fmt.Errorf("storage.replica-lag-time-max: %v is below 100ms", c.ReplicaLagTimeMax)
	}
	if c.DiskReserveBytes < 0 {
		return fmt.Errorf("storage.disk-reserve-bytes: %d is negative", c.DiskReserveBytes)
	}
	if c.ReadCopyBudgetBytes < 0 {
		return fmt.Errorf("storage.read-copy-budget-bytes: %d is negative (0 never copies)", c.ReadCopyBudgetBytes)
	}
	if c.WriteBehindBytes < 0 {
		return fmt.Errorf("storage.write-behind-bytes: %d is negative (0 turns write-behind off)", c.WriteBehindBytes)
	}
	if c.PageCacheBudgetBytes < -1 {
		return fmt.Errorf("storage.page-cache-budget-bytes: %d is below -1 (-1 picks the budget from the machine, 0 means no bound)", c.PageCacheBudgetBytes)
	}
	return nil
}

// ReplicaConfig is the replica manager configuration for a node.
func (c *Config) ReplicaConfig(node config.Node) replica.Config {
	dir := filepath.Join(node.DataDir, "logs")
	return replica.Config{Dir: dir, LagTimeMax: c.ReplicaLagTimeMax,
		Storage: storage.Options{
			Space:            storage.NewSpaceGuard(storage.SpaceGuardOptions{Dir: dir, ReserveBytes: c.DiskReserveBytes}),
			PageCache:        storage.NewPageCache(storage.PageCacheOptions{BudgetBytes: c.PageCacheBudget()}),
			WriteBehindBytes: c.WriteBehindBytes,
			Copies:           storage.NewReadCopies(c.ReadCopyBudgetBytes, wire.BufferPool()),
		}}
}

// PageCacheBudget returns the page-cache budget in bytes, resolving -1.
func (c *Config) PageCacheBudget() int64 {
	if c.PageCacheBudgetBytes >= 0 {
		return c.PageCacheBudgetBytes
	}
	b, _ := storage.AutoPageCacheBudget()
	return b
}

// StorageNode is the storage-node role.
type StorageNode struct {
	storagev1.UnimplementedStorageServiceServer

	cfg      Config
	deps     service.Deps
	logger   *slog.Logger
	replicas *replica.Manager
	tracer   trace.Tracer
	// Counters of the data path.
	producedBytes, producedRecords, fetchedBytes metric.Int64Counter
	duplicateBatches                             metric.Int64Counter
}

// New builds the role and registers its gRPC services on deps.Server and
// its Kafka APIs on deps.Kafka.
func New(cfg Config, deps service.Deps) *StorageNode {
	r := &StorageNode{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("storage-node")), replicas: deps.Replicas,
		tracer: noop.NewTracerProvider().Tracer("")}
	mp := metric.MeterProvider(metricnoop.NewMeterProvider())
	if deps.Telemetry != nil {
		r.tracer = deps.Telemetry.Tracer("storage-node").Tracer("github.com/sluice-io/sluice/services/storagenode")
		mp = deps.Telemetry.Meter
		if err := deps.Replicas.RegisterMetrics(mp); err != nil {
			r.logger.Warn("cannot register replica metrics", log.Err(err))
		}
	}
	meter := mp.Meter("github.com/sluice-io/sluice/services/storagenode")
	// Creating a counter only fails for an invalid name; these are constant.
	r.producedBytes, _ = meter.Int64Counter("sluice.produce.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes of record batches appended as leader."))
	r.producedRecords, _ = meter.Int64Counter("sluice.produce.records", metric.WithDescription("Records appended as leader."))
	r.duplicateBatches, _ = meter.Int64Counter("sluice.produce.duplicate_batches",
		metric.WithDescription("Retried producer batches answered with their original offsets and not appended again (idempotence)."))
	r.fetchedBytes, _ = meter.Int64Counter("sluice.fetch.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes of record batches sent to consumers."))
	if err := registerLogMetrics(meter, deps.Replicas); err != nil {
		r.logger.Warn("cannot register log metrics", log.Err(err))
	}
	storagev1.RegisterStorageServiceServer(deps.Server.GRPC, r)
	rs := replica.NewServer(deps.Replicas)
	rs.Send = sendFollowerChunk
	rs.Authz = deps.Authz
	replicationv1.RegisterReplicationServiceServer(deps.Server.GRPC, rs)
	registerValidators(deps.Server.Validators)
	if deps.Kafka != nil {
		r.registerKafka(deps.Kafka)
	}
	return r
}

// Name implements service.Service.
func (r *StorageNode) Name() string { return "storage-node" }

// HealthServices implements service.HealthReporter.
func (r *StorageNode) HealthServices() []string {
	return []string{storagev1.StorageService_ServiceDesc.ServiceName, replicationv1.ReplicationService_ServiceDesc.ServiceName}
}

// Serving implements service.Readiness: the node serves once its logs are
// open (Start) and while the controller has it unfenced. A restarted node
// registers fenced and answers NOT_LEADER_OR_FOLLOWER until its old
// leaderships have moved, so its health says NOT_SERVING meanwhile.
func (r *StorageNode) Serving() (bool, <-chan struct{}) {
	if r.deps.Member == nil {
		return true, nil
	}
	changed := r.deps.Member.Changed()
	switch r.deps.Member.State() {
	case commonv1.BrokerState_BROKER_STATE_ALIVE, commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN:
		return true, changed
	}
	return false, changed
}

// Start opens the replicas metadata assigns to this node.
func (r *StorageNode) Start(ctx context.Context) error { return r.replicas.Start(ctx) }

// Stop moves this node's leaderships to other in-sync replicas (controlled
// shutdown) before the node stops serving, so producers and consumers move
// over without waiting for a session to expire; then it ends the streams
// of its services and closes the logs.
func (r *StorageNode) Stop(ctx context.Context) error {
	if r.deps.Member != nil {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.ControlledShutdownTimeout)
		if err := r.deps.Member.ControlledShutdown(sctx); err != nil {
			r.logger.Warn("controlled shutdown incomplete; stopping anyway", log.Err(err))
		}
		cancel()
	}
	// Leaderships have moved: end the clients' streams (after answering
	// what they sent) so they reconnect to the new leaders now, and the
	// server's graceful stop does not wait for them.
	r.deps.Server.EndStreams(ctx, r.HealthServices()...)
	return r.replicas.Stop(ctx)
}
