// Package groupcoord is the group-coordinator role: consumer groups, their
// rebalances (Kafka's classic protocol and the consumer protocol of KIP-848)
// and committed offsets.
//
// State lives in the internal compacted topic __consumer_offsets, in Kafka's
// record layouts. Each group belongs to one partition of that topic (Kafka's
// hash of the group id) and is coordinated in the process that leads the
// partition, when that process runs this role (Kafka's placement: no extra
// hop between the coordinator and its log). A shard is this process's
// coordinator for one partition: it replays the partition completely before
// it serves (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and writes with
// acks=all under the leader epoch it loaded in.
//
// Fencing: every write names the leader epoch the shard loaded in, and the
// local replica refuses an append in any other epoch; a deposed leader that
// has not heard of its deposition yet can still append locally, but acks=all
// then never completes (its followers fetch from the new leader, and the ISR
// can only shrink through the controller, which refuses a stale partition
// epoch), so the write is never acknowledged nor applied, and it is truncated
// when the replica becomes a follower. A deposed coordinator therefore never
// makes a state change anyone observes.
package groupcoord

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	client "github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the group-coordinator role. Names follow Kafka's broker
// configs.
type Config struct {
	// OffsetsTopicPartitions is offsets.topic.num.partitions.
	OffsetsTopicPartitions int
	// OffsetsTopicReplicationFactor is offsets.topic.replication.factor,
	// capped by the live storage nodes when the topic is created.
	OffsetsTopicReplicationFactor int
	// TransactionStateTopicPartitions and
	// TransactionStateTopicReplicationFactor are
	// transaction.state.log.num.partitions and
	// transaction.state.log.replication.factor: FindCoordinator creates
	// __transaction_state on the first lookup of a transactional id.
	TransactionStateTopicPartitions, TransactionStateTopicReplicationFactor int
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout are
	// group.min.session.timeout.ms and group.max.session.timeout.ms.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxSize is group.max.size; 0 means no limit.
	MaxSize int
	// OffsetsRetention is offsets.retention.minutes.
	OffsetsRetention time.Duration
	// RetentionCheckInterval is offsets.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// OffsetMetadataMaxBytes is offset.metadata.max.bytes.
	OffsetMetadataMaxBytes int
	// ConsumerSessionTimeout and ConsumerHeartbeatInterval are
	// group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms (consumer protocol).
	ConsumerSessionTimeout, ConsumerHeartbeatInterval time.Duration
	// ConsumerMaxSize is group.consumer.max.size; 0 means no limit.
	ConsumerMaxSize int
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.OffsetsTopicPartitions, "group.offsets-topic-partitions", 50,
		"Partitions of __consumer_offsets when it is created (offsets.topic.num.partitions).")
	fs.IntVar(&c.OffsetsTopicReplicationFactor, "group.offsets-topic-replication-factor", 3,
		"Replication factor of __consumer_offsets when it is created, capped by the live storage nodes (offsets.topic.replication.factor).")
	fs.IntVar(&c.TransactionStateTopicPartitions, "group.transaction-state-topic-partitions", 50,
		"Partitions of __transaction_state, set when the first transactional id is looked up (transaction.state.log.num.partitions).")
	fs.IntVar(&c.TransactionStateTopicReplicationFactor, "group.transaction-state-topic-replication-factor", 3,
		"Replication factor of __transaction_state, capped by the live storage nodes when it is created (transaction.state.log.replication.factor).")
	fs.DurationVar(&c.InitialRebalanceDelay, "group.initial-rebalance-delay", 3*time.Second,
		"How long the first rebalance of an empty group waits for more members (group.initial.rebalance.delay.ms).")
	fs.DurationVar(&c.MinSessionTimeout, "group.min-session-timeout", 6*time.Second,
		"Smallest session timeout a classic member may ask for (group.min.session.timeout.ms).")
	fs.DurationVar(&c.MaxSessionTimeout, "group.max-session-timeout", 30*time.Minute,
		"Largest session timeout a classic member may ask for (group.max.session.timeout.ms).")
	fs.IntVar(&c.MaxSize, "group.max-size", 0, "Most members a classic group may have (group.max.size); 0 means no limit.")
	fs.DurationVar(&c.OffsetsRetention, "group.offsets-retention", 7*24*time.Hour,
		"How long the offsets of an empty group are kept after it became empty (offsets.retention.minutes).")
	fs.DurationVar(&c.RetentionCheckInterval, "group.offsets-retention-check-interval", 10*time.Minute,
		"How often expired offsets are looked for (offsets.retention.check.interval.ms).")
	fs.IntVar(&c.OffsetMetadataMaxBytes, "group.offset-metadata-max-bytes", 4096,
		"Largest metadata string of a committed offset (offset.metadata.max.bytes).")
	fs.DurationVar(&c.ConsumerSessionTimeout, "group.consumer-session-timeout", 45*time.Second,
		"Session timeout of consumer-protocol members (group.consumer.session.timeout.ms).")
	fs.DurationVar(&c.ConsumerHeartbeatInterval, "group.consumer-heartbeat-interval", 5*time.Second,
		"Heartbeat interval of consumer-protocol members (group.consumer.heartbeat.interval.ms).")
	fs.IntVar(&c.ConsumerMaxSize, "group.consumer-max-size", 0, "Most members a consumer-protocol group may have (group.consumer.max.size); 0 means no limit.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.OffsetsTopicPartitions < 1:
		return fmt.Errorf("group.offsets-topic-partitions must be at least 1, got %d", c.OffsetsTopicPartitions)
	case c.OffsetsTopicReplicationFactor < 1:
		return fmt.Errorf("group.offsets-topic-replication-factor must be at least 1, got %d", c.OffsetsTopicReplicationFactor)
	case c.TransactionStateTopicPartitions < 1:
		return fmt.Errorf("group.transaction-state-topic-partitions must be at least 1, got %d", c.TransactionStateTopicPartitions)
	case c.TransactionStateTopicReplicationFactor < 1:
		return fmt.Errorf("group.transaction-state-topic-replication-factor must be at least 1, got %d", c.TransactionStateTopicReplicationFactor)
	case c.MinSessionTimeout <= 0 || c.MaxSessionTimeout < c.MinSessionTimeout:
		return fmt.Errorf("group.min-session-timeout (%s) must be positive and at most group.max-session-timeout (%s)", c.MinSessionTimeout, c.MaxSessionTimeout)
	case c.InitialRebalanceDelay < 0 || c.MaxSize < 0 || c.ConsumerMaxSize < 0:
		return fmt.Errorf("group.initial-rebalance-delay, group.max-size and group.consumer-max-size must not be negative")
	case c.OffsetsRetention <= 0 || c.RetentionCheckInterval <= 0:
		return fmt.Errorf("group.offsets-retention and group.offsets-retention-check-interval must be positive")
	case c.ConsumerSessionTimeout <= 0 || c.ConsumerHeartbeatInterval <= 0 || c.ConsumerHeartbeatInterval >= c.ConsumerSessionTimeout:
		return fmt.Errorf("group.consumer-heartbeat-interval (%s) must be positive and below group.consumer-session-timeout (%s)", c.ConsumerHeartbeatInterval, c.ConsumerSessionTimeout)
	}
	return nil
}

// maxGroupIDBytes bounds a group id. Kafka sets no limit, but every id is
// written into keys of the offsets topic and logged; 255 bytes is far above
// any id seen in practice.
const maxGroupIDBytes = 255

// OffsetsTopic is the internal topic that holds committed offsets and group
// metadata, named as Kafka names it so Kafka tools recognise it.
const OffsetsTopic = metadata.OffsetsTopic

// GroupCoordinator is the group-coordinator role.
type GroupCoordinator struct {
	groupv1.UnimplementedGroupCoordinatorServiceServer

	cfg    Config
	deps   service.Deps
	logger *slog.Logger
	now    func() time.Time
	tracer trace.Tracer
	m      *metrics

	mu     sync.Mutex
	shards map[int32]*shard
	// topics creates the internal topics on the first lookup.
	topics coordinator.TopicCreator
	client *client.Client
	// verifyTxn asks a producer's transaction coordinator whether a
	// partition of the offsets topic is in its open transaction
	// (coordinator.VerifyInTransaction; replaced in unit tests).
	verifyTxn func(ctx context.Context, tid string, pid int64, epoch int16, tp *commonv1.TopicPartition) (err error, busy bool)
	// session is the node's broker session with the controller
	// (membership.Member.Session); nil in a process without membership.
	session coordinator.Session

	cancel context.CancelFunc
	done   chan struct{}
}

// New builds the role and registers its gRPC service on deps.Server and
// its Kafka API handlers on deps.Kafka.
func New(cfg Config, deps service.Deps) *GroupCoordinator {
	r := &GroupCoordinator{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("group-coordinator")),
		now: deps.Clock(), shards: map[int32]*shard{}}
	r.topics = coordinator.TopicCreator{Pool: deps.Pool, Logger: r.logger}
	r.verifyTxn = func(ctx context.Context, tid string, pid int64, epoch int16, tp *commonv1.TopicPartition) (error, bool) {
		return coordinator.VerifyInTransaction(ctx, deps.Metadata.Load(), deps.Pool, tid, pid, epoch, tp)
	}
	if deps.Member != nil {
		r.session = deps.Member.Session
	}
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	if deps.Telemetry != nil {
		mp, tp = deps.Telemetry.Meter, deps.Telemetry.Tracer("group-coordinator")
	}
	r.tracer = tp.Tracer("github.com/sluice-io/sluice/services/groupcoord")
	r.m = newMetrics(mp.Meter("github.com/sluice-io/sluice/services/groupcoord"), r)
	groupv1.RegisterGroupCoordinatorServiceServer(deps.Server.GRPC, r)
	if deps.Kafka != nil {
		r.registerKafka(deps.Kafka)
	}
	return r
}

// Name implements service.Service.
func (r *GroupCoordinator) Name() string { return "group-coordinator" }

// HealthServices implements service.HealthReporter.
func (r *GroupCoordinator) HealthServices() []string {
	return []string{groupv1.GroupCoordinatorService_ServiceDesc.ServiceName}
}

// Start follows this process's leaderships of the offsets topic: it loads a
// shard for each partition it leads and drops shards it no longer leads.
func (r *GroupCoordinator) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
	return nil
}

// Stop unloads every shard; members find the new coordinators.
func (r *GroupCoordinator) Stop(ctx context.Context) error {
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

// run reconciles shards with leaderships whenever metadata or the local
// replicas change, and drives timers (sessions, rebalance deadlines, offset
// expiry) of every loaded shard.
func (r *GroupCoordinator) run(ctx context.Context) {
	coordinator.Run(ctx, r.deps.Metadata, r.deps.Replicas, r.now, 100*time.Millisecond, r.reconcile, func(now time.Time) {
		for _, s := range r.loadedShards() {
			s.tick(now)
		}
	})
}

func (r *GroupCoordinator) loadedShards() []*shard {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*shard, 0, len(r.shards))
	for _, s := range r.shards {
		out = append(out, s)
	}
	return out
}

// reconcile loads a shard for every offsets-topic partition metadata says
// this node coordinates, and unloads the others. A partition led here is
// coordinated once the local replica leads it, in that leader epoch; one
// led elsewhere (this process runs no storage) from the metadata revision
// at which it was handed over.
func (r *GroupCoordinator) reconcile() {
	img := r.deps.Metadata.Load()
	me := int32(r.deps.Node.ID)
	// A coordinator of its own holds a partition as long as it stays in
	// the same broker session: one that lost its session (paused, cut off)
	// may have lost the partition meanwhile, so it reloads it.
	myEpoch := img.Brokers[me].GetBrokerEpoch()
	wanted := coordinator.Wanted(img, r.deps.Replicas, OffsetsTopic, groupCoordinatorRole, me)
	r.mu.Lock()
	drop, start := coordinator.Reconcile(r.shards, wanted, func(s *shard, w coordinator.Placement) bool {
		return w.Local == s.local && w.Epoch == s.epoch && !s.stale.Load() && (s.local != nil || s.brokerEpoch == myEpoch)
	}, func(id int32, w coordinator.Placement) *shard {
		if w.Local != nil {
			return newLocalShard(r, id, w.Local, w.Epoch)
		}
		s := newRemoteShard(r, id, img.Revision)
		s.brokerEpoch = myEpoch
		return s
	})
	r.mu.Unlock()
	for _, s := range drop {
		r.logger.Info("group coordinator shard unloaded", log.TopicPartition(OffsetsTopic, s.id), log.Epoch(s.epoch))
		s.unload()
	}
	for _, s := range start {
		r.logger.Info("group coordinator shard loading", log.TopicPartition(OffsetsTopic, s.id), log.Epoch(s.epoch),
			slog.Bool("at_leader", s.local != nil), log.Revision(s.revision))
		go s.load()
	}
}

// shardFor returns the loaded shard that coordinates groupID, or the error
// to answer: NOT_COORDINATOR (with a hint) when another node coordinates
// it, COORDINATOR_LOAD_IN_PROGRESS while the shard replays,
// COORDINATOR_NOT_AVAILABLE while the offsets topic has no leader.
func (r *GroupCoordinator) shardFor(groupID string) (*shard, *errs.Error) {
	if e := validGroupID(groupID); e != nil {
		return nil, e
	}
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[OffsetsTopic]
	if !ok || len(t.Partitions) == 0 {
		return nil, errs.New(errs.CoordinatorNotAvailable, "the offsets topic %s does not exist yet; FindCoordinator creates it", OffsetsTopic)
	}
	pid := coordinator.PartitionFor(groupID, int32(len(t.Partitions)))
	r.mu.Lock()
	s := r.shards[pid]
	r.mu.Unlock()
	if s == nil {
		return nil, coordinator.NotLoaded(img, OffsetsTopic, groupCoordinatorRole, int32(r.deps.Node.ID), groupID, fmt.Sprintf("group %q", groupID), pid)
	}
	if !s.isLoaded() {
		return nil, errs.New(errs.CoordinatorLoadInProgress, "group %q: the coordinator is replaying %s-%d", groupID, OffsetsTopic, pid)
	}
	if e := r.sessionError(s, fmt.Sprintf("group %q", groupID)); e != nil {
		return nil, e
	}
	return s, nil
}

// sessionError refuses to serve shard s while this node may have lost it
// without knowing yet (coordinator.SessionError): OffsetFetch must never
// answer from the memory of a shard another process took over.
func (r *GroupCoordinator) sessionError(s *shard, subject string) *errs.Error {
	return coordinator.SessionError(r.session, OffsetsTopic, s.id, s.local == nil, s.brokerEpoch, subject)
}

// groupCoordinatorRole is the role that coordinates the offsets topic.
const groupCoordinatorRole = string(role.GroupCoordinator)

// coordinatorOf says which node coordinates partition pid of the offsets
// topic (metadata.Image.CoordinatorOf: its leader when the leader runs this
// role, otherwise one of the processes that run only coordinator roles).
func (r *GroupCoordinator) coordinatorOf(img *metadata.Image, pid int32) *groupv1.Coordinator {
	b, e := coordinator.CoordinatorOf(img, OffsetsTopic, groupCoordinatorRole, pid)
	if e != nil {
		return &groupv1.Coordinator{Error: e.Proto()}
	}
	return &groupv1.Coordinator{NodeId: b.GetId(), Address: metadata.BrokerAddress(b)}
}

// env is what the shared coordinator machinery needs of this process.
func (r *GroupCoordinator) env() coordinator.Env {
	return coordinator.Env{NodeID: int32(r.deps.Node.ID), Metadata: r.deps.Metadata, Pool: r.deps.Pool, Logger: r.logger, Client: r.sdk}
}

// sdk returns the process's client, for remote shards' replay.
func (r *GroupCoordinator) sdk() *client.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		// client.New fails only on an empty bootstrap list.
		r.client, _ = client.New(client.Config{Bootstrap: []string{r.deps.Node.AdvertiseAddr()}, ClientID: "sluice-group-coordinator", Logger: r.logger})
	}
	return r.client
}

func hasRole(roles []string, want role.Role) bool {
	for _, r := range roles {
		if r == string(want) {
			return true
		}
	}
	return false
}

func validGroupID(id string) *errs.Error {
	switch {
	case id == "":
		return errs.Invalid(errs.InvalidGroupID, "group_id", "the group id is empty")
	case len(id) > maxGroupIDBytes:
		return errs.Invalid(errs.InvalidGroupID, "group_id", "the group id has %d bytes, more than the %d allowed", len(id), maxGroupIDBytes)
	}
	return nil
}

// findCoordinator answers, for each key, the node that coordinates it. The
// first call creates the offsets topic (through the controller) and answers
// COORDINATOR_NOT_AVAILABLE until its leaders are elected.
func (r *GroupCoordinator) findCoordinator(ctx context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	switch req.GetKeyType() {
	case groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_UNSPECIFIED:
	case groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION:
		if len(req.GetKeys()) == 0 {
			return nil, errs.Invalid(errs.InvalidRequest, "keys", "no keys: name at least one transactional id, or the empty one for any transaction coordinator")
		}
		return r.findTransactionCoordinators(req.GetKeys()), nil
	default:
		return nil, errs.Invalid(errs.InvalidRequest, "key_type", "unknown key type %s", req.GetKeyType())
	}
	if len(req.GetKeys()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "keys", "no keys: name at least one group id")
	}
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[OffsetsTopic]
	if !ok || len(t.Partitions) == 0 {
		r.createOffsetsTopic(img)
	}
	resp := &groupv1.FindCoordinatorResponse{}
	for _, k := range req.GetKeys() {
		var c *groupv1.Coordinator
		switch {
		case validGroupID(k) != nil:
			c = &groupv1.Coordinator{Error: validGroupID(k).Proto()}
		case !ok || len(t.Partitions) == 0:
			c = &groupv1.Coordinator{Error: errs.New(errs.CoordinatorNotAvailable, "the offsets topic %s is being created", OffsetsTopic).Proto()}
		default:
			c = r.coordinatorOf(img, coordinator.PartitionFor(k, int32(len(t.Partitions))))
		}
		c.Key = k
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}

// findTransactionCoordinators answers FindCoordinator for transactional
// ids: the coordinator of the id's __transaction_state partition, placed as
// the offsets topic's are (metadata.Image.CoordinatorOf with the
// transaction-coordinator role). The empty id, which idempotent producers
// look up to get a producer id, names any live transaction coordinator: the
// same one for every caller (metadata.Image.AnyOf), so their InitProducerId
// calls draw on one block of ids instead of making every coordinator fetch
// its own.
func (r *GroupCoordinator) findTransactionCoordinators(keys []string) *groupv1.FindCoordinatorResponse {
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[metadata.TransactionStateTopic]
	exists := ok && len(t.Partitions) > 0
	resp := &groupv1.FindCoordinatorResponse{}
	for _, k := range keys {
		var c *groupv1.Coordinator
		switch {
		case k == "":
			if b := img.AnyOf(string(role.TransactionCoordinator)); b != nil {
				c = &groupv1.Coordinator{NodeId: b.GetId(), Address: metadata.BrokerAddress(b)}
			} else {
				c = &groupv1.Coordinator{Error: errs.New(errs.CoordinatorNotAvailable, "no live process runs the transaction-coordinator role").Proto()}
			}
		case len(k) > coordinator.MaxTransactionalIDBytes:
			c = &groupv1.Coordinator{Error: errs.Invalid(errs.InvalidRequest, "keys",
				"the transactional id has %d bytes, more than the %d allowed", len(k), coordinator.MaxTransactionalIDBytes).Proto()}
		case !exists:
			r.topics.Create(img, coordinator.TopicSpec{
				Name: metadata.TransactionStateTopic, Partitions: r.cfg.TransactionStateTopicPartitions,
				ReplicationFactor: r.cfg.TransactionStateTopicReplicationFactor, MinInsyncReplicas: 2,
			})
			c = &groupv1.Coordinator{Error: errs.New(errs.CoordinatorNotAvailable, "the transaction state topic %s is being created", metadata.TransactionStateTopic).Proto()}
		default:
			pid := coordinator.PartitionFor(k, int32(len(t.Partitions)))
			if b, _ := img.CoordinatorOf(metadata.TransactionStateTopic, pid, string(role.TransactionCoordinator)); b != nil {
				c = &groupv1.Coordinator{NodeId: b.GetId(), Address: metadata.BrokerAddress(b)}
			} else {
				c = &groupv1.Coordinator{Error: errs.New(errs.CoordinatorNotAvailable,
					"%s-%d has no coordinator now: its leader does not run the transaction-coordinator role (or there is none) and no live process runs that role alone",
					metadata.TransactionStateTopic, pid).Proto()}
			}
		}
		c.Key = k
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp
}

// createOffsetsTopic asks the active controller to create the offsets
// topic, in the background: the caller answers COORDINATOR_NOT_AVAILABLE
// and clients retry.
func (r *GroupCoordinator) createOffsetsTopic(img *metadata.Image) {
	r.topics.Create(img, coordinator.TopicSpec{
		Name: OffsetsTopic, Partitions: r.cfg.OffsetsTopicPartitions, ReplicationFactor: r.cfg.OffsetsTopicReplicationFactor,
	})
}
