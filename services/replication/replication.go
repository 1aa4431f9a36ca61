// Package replication is the replication role: it keeps this node's follower
// replicas in sync with their leaders. For every leader node it follows, it
// keeps one FollowerFetch stream open, reports each partition's position,
// appends the batches the leader streams back (keeping the leader's offsets
// and epochs), and truncates where its log diverges from the leader's
// (KIP-101, KIP-279). The positions it reports are what the leader advances
// its high watermark and manages its ISR with.
//
// By default it runs beside the storage-node role and applies to the same
// replicas (libs/replica), with no network hop between fetching and
// appending. Run alone (--roles=replication), it is a replication worker for
// the storage nodes that do not run it themselves: it fetches from leaders on
// a follower's behalf and pushes to the follower with ReplicaAppend, at the
// cost of a second network hop per byte.
//
// This role owns the fetching side only. The rules it feeds (what counts as
// a fetch, when a follower is caught up, the ISR, the high watermark,
// truncation) live in one place, libs/replica, and the API it calls,
// ReplicationService, is served by the storage node, which owns the logs
// (libs/replica's Server, registered by services/storagenode).
package replication

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/service"
)

// Config configures the replication role.
type Config struct {
	// ChunkBytes is replica.fetch.max.bytes: the most a leader sends per
	// partition per chunk.
	ChunkBytes int
	// FetchWaitMax is replica.fetch.wait.max.ms: how long a follower's
	// stream stays silent before it fetches again at the positions it
	// holds (a keep-alive). The leader counts a follower as caught up only
	// when it fetches at the log end, so this must stay well below the
	// leaders' replica.lag.time.max.ms.
	FetchWaitMax time.Duration
	// Shard and Shards split the work of replication workers running in
	// their own processes: a worker serves the storage nodes whose id
	// modulo Shards is Shard.
	Shard, Shards int
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.ChunkBytes, "replication.fetch-max-bytes", 1<<20, "Most bytes a leader sends per partition in one chunk (replica.fetch.max.bytes).")
	fs.DurationVar(&c.FetchWaitMax, "replication.fetch-wait-max", 500*time.Millisecond,
		"How often an idle follower fetches again at its positions, so that its leader keeps it in the ISR (replica.fetch.wait.max.ms); keep it well below --storage.replica-lag-time-max.")
	fs.IntVar(&c.Shard, "replication.shard", 0, "For a replication worker in its own process: which share of the storage nodes it serves (node id modulo --replication.shards).")
	fs.IntVar(&c.Shards, "replication.shards", 1, "For replication workers in their own processes: how many share the storage nodes.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.ChunkBytes < 1024 {
		return fmt.Errorf("replication.fetch-max-bytes: %d is below 1024", c.ChunkBytes)
	}
	if c.FetchWaitMax < 10*time.Millisecond {
		return fmt.Errorf("replication.fetch-wait-max: %v is below 10ms", c.FetchWaitMax)
	}
	if c.Shards < 1 || c.Shard < 0 || c.Shard >= c.Shards {
		return fmt.Errorf("replication.shard: %d must be in [0, %d)", c.Shard, c.Shards)
	}
	return nil
}

// Replication is the replication role.
type Replication struct {
	cfg    Config
	deps   service.Deps
	logger *slog.Logger
	tracer trace.Tracer
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds the role.
func New(cfg Config, deps service.Deps) *Replication {
	if cfg.FetchWaitMax <= 0 {
		cfg.FetchWaitMax = 500 * time.Millisecond
	}
	r := &Replication{cfg: cfg, deps: deps, logger: deps.Logger.With(log.Role("replication")), tracer: noop.NewTracerProvider().Tracer("")}
	if deps.Telemetry != nil {
		r.tracer = deps.Telemetry.Tracer("replication").Tracer("github.com/sluice-io/sluice/services/replication")
	}
	return r
}

// Name implements service.Service.
func (r *Replication) Name() string { return "replication" }

// Start starts the fetchers.
func (r *Replication) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
	return nil
}

// Stop stops the fetchers.
func (r *Replication) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchKey names one fetcher: a leader node, and the follower node it
// fetches for.
type fetchKey struct{ leader, follower int32 }

// plan returns the follower replicas to keep in sync, by fetcher, and the
// channel that signals a change of plan. A worker of its own also plans
// again shortly when a follower has not opened a replica yet, and every few
// seconds in any case (a follower node it could not reach may be back).
func (r *Replication) plan(ctx context.Context, nodes map[int32]*remoteNode) (map[fetchKey][]target, <-chan struct{}) {
	out := map[fetchKey][]target{}
	if r.deps.Replicas != nil {
		changed := r.deps.Replicas.Changed()
		self := r.deps.Replicas.NodeID()
		for _, p := range r.deps.Replicas.Partitions() {
			_, _, _, leader, isLeader := p.FollowerState()
			if !isLeader && leader >= 0 && leader != self {
				k := fetchKey{leader, self}
				out[k] = append(out[k], local{p})
			}
		}
		return out, changed
	}
	// A worker of its own: the storage nodes of its shard that do not
	// replicate for themselves.
	metaChanged := r.deps.Metadata.Changed()
	again := 5 * time.Second
	img := r.deps.Metadata.Load()
	positions := map[int32]map[replica.TP]*replicationv1.ReplicaState{}
	for id, b := range img.Brokers {
		roles := b.GetRoles()
		if !slices.Contains(roles, string(role.StorageNode)) || slices.Contains(roles, string(role.Replication)) ||
			int(id)%r.cfg.Shards != r.cfg.Shard || !img.Alive(id) {
			continue
		}
		n, ok := nodes[id]
		if !ok || n.addr != img.Address(id) {
			if ok {
				n.close()
			}
			n = &remoteNode{id: id, addr: img.Address(id), r: r}
			nodes[id] = n
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pos, err := n.describe(dctx)
		cancel()
		if err != nil {
			r.logger.Debug("cannot read a follower's positions", log.NodeID(id), log.Err(err))
			again = 200 * time.Millisecond
			continue
		}
		positions[id] = pos
	}
	for name, t := range img.Topics {
		for _, ps := range t.Partitions {
			for _, f := range ps.GetReplicas() {
				pos, ok := positions[f]
				if !ok || f == ps.GetLeaderId() || ps.GetLeaderId() < 0 {
					continue
				}
				st, ok := pos[replica.TP{Topic: name, Partition: ps.GetPartition()}]
				if !ok {
					again = 200 * time.Millisecond // the follower has not opened it yet
					continue
				}
				k := fetchKey{ps.GetLeaderId(), f}
				out[k] = append(out[k], &remote{node: nodes[f], tp: replica.TP{Topic: name, Partition: ps.GetPartition()},
					leaderEpoch: ps.GetLeaderEpoch(), leo: st.GetLogEndOffset(), lastEpoch: st.GetLastLogEpoch()})
			}
		}
	}
	changed := make(chan struct{})
	go func() {
		select {
		case <-metaChanged:
		case <-time.After(again):
		case <-ctx.Done():
		}
		close(changed)
	}()
	return out, changed
}

// run keeps one fetcher per (leader node, follower node).
func (r *Replication) run(ctx context.Context) {
	fetchers := map[fetchKey]*fetcher{}
	nodes := map[int32]*remoteNode{}
	var wg sync.WaitGroup
	defer func() {
		for _, f := range fetchers {
			f.cancel()
		}
		wg.Wait()
		for _, n := range nodes {
			n.close()
		}
	}()
	for {
		want, changed := r.plan(ctx, nodes)
		for k, f := range fetchers {
			if _, ok := want[k]; !ok {
				f.cancel()
				delete(fetchers, k)
			}
		}
		for k, targets := range want {
			f, ok := fetchers[k]
			if !ok {
				fctx, cancel := context.WithCancel(ctx)
				f = &fetcher{r: r, key: k, cancel: cancel, update: make(chan struct{}, 1)}
				fetchers[k] = f
				wg.Go(func() { f.run(fctx) })
			}
			f.setTargets(targets)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// fetcher follows every partition one follower follows from one leader.
type fetcher struct {
	r      *Replication
	key    fetchKey
	cancel context.CancelFunc
	update chan struct{}

	mu      sync.Mutex
	targets map[replica.TP]target
}

func (f *fetcher) setTargets(ts []target) {
	m := map[replica.TP]target{}
	f.mu.Lock()
	for _, t := range ts {
		// Keep a target already being followed: a remote one holds the
		// position learnt from the follower's answers.
		if old, ok := f.targets[t.TP()]; ok && sameKind(old, t) {
			if or, isRemote := old.(*remote); isRemote {
				or.leaderEpoch = t.(*remote).leaderEpoch
			}
			m[t.TP()] = old
			continue
		}
		m[t.TP()] = t
	}
	f.targets = m
	f.mu.Unlock()
	select {
	case f.update <- struct{}{}:
	default:
	}
}

func sameKind(a, b target) bool {
	_, ar := a.(*remote)
	_, br := b.(*remote)
	return ar == br
}

func (f *fetcher) all() map[replica.TP]target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.targets
}

func (f *fetcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := f.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		f.r.logger.Debug("follower fetch stream ended; reconnecting", log.NodeID(f.key.leader), log.Err(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// followerEpoch is the broker epoch the follower fetches with.
func (f *fetcher) followerEpoch() int64 {
	if f.r.deps.Replicas != nil && f.key.follower == f.r.deps.Replicas.NodeID() {
		return f.r.deps.Member.Epoch()
	}
	if b, ok := f.r.deps.Metadata.Load().Brokers[f.key.follower]; ok {
		return b.GetBrokerEpoch()
	}
	return 0
}

// stream runs one FollowerFetch stream to the leader until it fails.
func (f *fetcher) stream(ctx context.Context) error {
	addr := f.r.deps.Metadata.Load().Address(f.key.leader)
	if addr == "" {
		return fmt.Errorf("no address for leader node %d", f.key.leader)
	}
	conn, err := f.r.deps.Pool.Get(addr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The codec hands received chunks to chunkIn, which keeps their
	// batches in the received buffer.
	stream, err := replicationv1.NewReplicationServiceClient(conn).FollowerFetch(sctx, grpc.ForceCodecV2(wire.PassThroughCodec()))
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	sent := map[replica.TP]bool{}
	send := func(positions []*replicationv1.FollowerPosition) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(&replicationv1.FollowerFetchRequest{
			ReplicaId: f.key.follower, ReplicaBrokerEpoch: f.followerEpoch(),
			Positions: positions, PartitionMaxBytes: int32(f.r.cfg.ChunkBytes),
		})
	}
	// syncPositions announces partitions added since the last call and
	// withdraws those removed.
	syncPositions := func() error {
		targets := f.all()
		var ps []*replicationv1.FollowerPosition
		for tp, t := range targets {
			if !sent[tp] {
				ps = append(ps, position(t))
				sent[tp] = true
			}
		}
		for tp := range sent {
			if _, ok := targets[tp]; !ok {
				ps = append(ps, &replicationv1.FollowerPosition{Topic: tp.Topic, Partition: tp.Partition, Remove: true})
				delete(sent, tp)
			}
		}
		if len(ps) == 0 && len(sent) > 0 {
			return nil
		}
		return send(ps)
	}
	if err := syncPositions(); err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- f.receive(ctx, stream, send) }()
	// A follower reports positions when it has appended; on an idle
	// partition that is never, so it fetches again at the positions it holds
	// every FetchWaitMax (Kafka's follower does the same when its fetch
	// returns empty after replica.fetch.wait.max.ms). Without it the leader
	// cannot tell an idle follower from a paused one and shrinks the ISR
	// every replica.lag.time.max.ms.
	keepAlive := time.NewTicker(f.r.cfg.FetchWaitMax)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return err
		case <-f.update:
			if err := syncPositions(); err != nil {
				return err
			}
		case <-keepAlive.C:
			if err := send(nil); err != nil {
				return err
			}
		}
	}
}

func position(t target) *replicationv1.FollowerPosition {
	leo, last, leaderEpoch := t.position()
	tp := t.TP()
	return &replicationv1.FollowerPosition{
		Topic: tp.Topic, Partition: tp.Partition, FetchOffset: leo, LastFetchedEpoch: last, CurrentLeaderEpoch: leaderEpoch,
	}
}

// storageRetryDelay is how long a follower whose log refused an append
// (KAFKA_STORAGE_ERROR) waits before asking the leader again.
const storageRetryDelay = time.Second

// receive applies what the leader sends and reports new positions.
func (f *fetcher) receive(ctx context.Context, stream grpc.BidiStreamingClient[replicationv1.FollowerFetchRequest, replicationv1.FollowerFetchResponse],
	send func([]*replicationv1.FollowerPosition) error) error {
	var in chunkIn
	defer in.Release()
	for {
		in.Release() // the previous chunk is applied
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		resp := &in.msg
		tp := replica.TP{Topic: resp.GetTopic(), Partition: resp.GetPartition()}
		t, ok := f.all()[tp]
		if !ok {
			continue // no longer followed from this leader
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			if e.Code == errs.OffsetOutOfRange {
				// Behind the leader's log start: start over there.
				if err := t.startAt(ctx, resp.GetLogStartOffset()); err == nil {
					if err := send([]*replicationv1.FollowerPosition{position(t)}); err != nil {
						return err
					}
				}
				continue
			}
			// NOT_LEADER or an epoch error. Either the follower learned of
			// the leadership before the leader did (ask again shortly), or
			// the partition moved (metadata will take it off this stream).
			f.r.logger.Debug("leader refused a partition; asking again", log.TopicPartition(tp.Topic, tp.Partition), log.NodeID(f.key.leader), log.Err(e))
			time.AfterFunc(100*time.Millisecond, func() {
				if cur, ok := f.all()[tp]; ok && cur == t && ctx.Err() == nil {
					_ = send([]*replicationv1.FollowerPosition{position(t)}) // a broken stream is handled by the receive loop
				}
			})
			continue
		}
		if d := resp.GetDivergingEpoch(); d != nil {
			leo, _, _ := t.position()
			if err := t.truncate(ctx, min(d.GetEndOffset(), leo)); err != nil {
				f.r.logger.Error("cannot truncate diverged replica", log.TopicPartition(tp.Topic, tp.Partition), log.Err(err))
				continue
			}
			if err := send([]*replicationv1.FollowerPosition{position(t)}); err != nil {
				return err
			}
			continue
		}
		hasData := len(resp.GetBatches()) > 0
		var span trace.Span
		if tc := resp.GetTraceContext(); len(tc) > 0 && f.r.deps.Telemetry != nil {
			// The chunk carries a traced produce: its append joins that trace.
			sctx := f.r.deps.Telemetry.Propagator.Extract(ctx, propagation.MapCarrier(tc))
			_, span = f.r.tracer.Start(sctx, "replica append", trace.WithAttributes(attribute.String("topic", tp.Topic),
				attribute.Int("partition", int(tp.Partition)), attribute.Int64("base_offset", resp.GetBaseOffset()),
				attribute.Int("replica", int(f.key.follower))))
		}
		if err := t.apply(ctx, resp.GetBatches(), resp.GetHighWatermark(), resp.GetLogStartOffset()); err != nil {
			f.r.logger.Warn("cannot append replicated batches; resyncing", log.TopicPartition(tp.Topic, tp.Partition), log.Err(err))
			hasData = true // report the real position so the leader resends from it
			if errs.Is(err, errs.StorageError) {
				// A full disk or an offline log: the leader would resend at
				// once and fail again, as fast as the stream goes. Report
				// the position after a pause; the log comes back by itself.
				hasData = false
				time.AfterFunc(storageRetryDelay, func() {
					if cur, ok := f.all()[tp]; ok && cur == t && ctx.Err() == nil {
						_ = send([]*replicationv1.FollowerPosition{position(t)}) // a broken stream is handled by the receive loop
					}
				})
			}
		}
		if span != nil {
			span.End()
		}
		if hasData {
			if err := send([]*replicationv1.FollowerPosition{position(t)}); err != nil {
				return err
			}
		}
	}
}
