// Package replication is the replication role: it keeps this node's follower
// replicas in sync with their leaders. For every leader node it follows, it
// keeps one FollowerFetch stream open, reports each partition's position,
// appends the batches the leader streams back (keeping the leader's offsets
// and epochs), and truncates where its log diverges from the leader's
// (KIP-101, KIP-279). The positions it reports are what the leader advances
// its high watermark and manages its ISR with.
//
// It runs beside the storage-node role and applies to the same replicas
// (libs/replica), with no network hop between fetching and appending.
package replication

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/errs"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// Config configures the replication role.
type Config struct {
	// ChunkBytes is replica.fetch.max.bytes: the most a leader sends per
	// partition per chunk.
	ChunkBytes int
}

// RegisterFlags registers the role's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.ChunkBytes, "replication.fetch-max-bytes", 1<<20, "Most bytes a leader sends per partition in one chunk (replica.fetch.max.bytes).")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.ChunkBytes < 1024 {
		return fmt.Errorf("replication.fetch-max-bytes: %d is below 1024", c.ChunkBytes)
	}
	return nil
}

// Deps are the role's collaborators.
type Deps struct {
	Logger    *slog.Logger
	Telemetry *telemetry.Providers
	Server    *grpcx.Server
	Node      config.Node
	Metadata  *metadata.Cache
	Member    *membership.Member
	Pool      *grpcx.Pool
	// Replicas are this node's replicas; the storage-node role in the same
	// process owns them.
	Replicas *replica.Manager
}

// Replication is the replication role.
type Replication struct {
	cfg    Config
	deps   Deps
	logger *slog.Logger
	tracer trace.Tracer
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds the role.
func New(cfg Config, deps Deps) *Replication {
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
	if r.deps.Replicas == nil {
		return errors.New("the replication role needs the storage-node role in the same process")
	}
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

// run keeps one fetcher per leader node this node follows.
func (r *Replication) run(ctx context.Context) {
	fetchers := map[int32]*fetcher{}
	var wg sync.WaitGroup
	defer func() {
		for _, f := range fetchers {
			f.cancel()
		}
		wg.Wait()
	}()
	for {
		changed := r.deps.Replicas.Changed()
		want := map[int32][]*replica.Partition{}
		for _, p := range r.deps.Replicas.Partitions() {
			_, _, _, leader, isLeader := p.FollowerState()
			if !isLeader && leader >= 0 && leader != r.deps.Replicas.NodeID() {
				want[leader] = append(want[leader], p)
			}
		}
		for leader, f := range fetchers {
			if _, ok := want[leader]; !ok {
				f.cancel()
				delete(fetchers, leader)
			}
		}
		for leader, parts := range want {
			f, ok := fetchers[leader]
			if !ok {
				fctx, cancel := context.WithCancel(ctx)
				f = &fetcher{r: r, leader: leader, cancel: cancel, update: make(chan struct{}, 1)}
				fetchers[leader] = f
				wg.Go(func() { f.run(fctx) })
			}
			f.setPartitions(parts)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// fetcher follows every partition this node follows from one leader node.
type fetcher struct {
	r      *Replication
	leader int32
	cancel context.CancelFunc
	update chan struct{}

	mu    sync.Mutex
	parts map[replica.TP]*replica.Partition
}

func (f *fetcher) setPartitions(ps []*replica.Partition) {
	m := map[replica.TP]*replica.Partition{}
	for _, p := range ps {
		m[p.TP()] = p
	}
	f.mu.Lock()
	f.parts = m
	f.mu.Unlock()
	select {
	case f.update <- struct{}{}:
	default:
	}
}

func (f *fetcher) partitions() map[replica.TP]*replica.Partition {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts
}

func (f *fetcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := f.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		f.r.logger.Debug("follower fetch stream ended; reconnecting", log.NodeID(f.leader), log.Err(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// stream runs one FollowerFetch stream to the leader until it fails.
func (f *fetcher) stream(ctx context.Context) error {
	addr := f.r.deps.Metadata.Load().Address(f.leader)
	if addr == "" {
		return fmt.Errorf("no address for leader node %d", f.leader)
	}
	conn, err := f.r.deps.Pool.Get(addr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := replicationv1.NewReplicationServiceClient(conn).FollowerFetch(sctx)
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	sent := map[replica.TP]bool{}
	send := func(positions []*replicationv1.FollowerPosition) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(&replicationv1.FollowerFetchRequest{
			ReplicaId: f.r.deps.Replicas.NodeID(), ReplicaBrokerEpoch: f.r.deps.Member.Epoch(),
			Positions: positions, PartitionMaxBytes: int32(f.r.cfg.ChunkBytes),
		})
	}
	// syncPositions announces partitions added since the last call and
	// withdraws those removed.
	syncPositions := func() error {
		parts := f.partitions()
		var ps []*replicationv1.FollowerPosition
		for tp, p := range parts {
			if !sent[tp] {
				ps = append(ps, position(p))
				sent[tp] = true
			}
		}
		for tp := range sent {
			if _, ok := parts[tp]; !ok {
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
		}
	}
}

func position(p *replica.Partition) *replicationv1.FollowerPosition {
	leo, last, leaderEpoch, _, _ := p.FollowerState()
	tp := p.TP()
	return &replicationv1.FollowerPosition{
		Topic: tp.Topic, Partition: tp.Partition, FetchOffset: leo, LastFetchedEpoch: last,
		CurrentLeaderEpoch: leaderEpoch, LogStartOffset: p.Log().LogStartOffset(),
	}
}

// receive applies what the leader sends and reports new positions.
func (f *fetcher) receive(ctx context.Context, stream grpc.BidiStreamingClient[replicationv1.FollowerFetchRequest, replicationv1.FollowerFetchResponse],
	send func([]*replicationv1.FollowerPosition) error) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		tp := replica.TP{Topic: resp.GetTopic(), Partition: resp.GetPartition()}
		p, ok := f.partitions()[tp]
		if !ok {
			continue // no longer followed from this leader
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			if e.Code == errs.OffsetOutOfRange {
				// Behind the leader's log start: start over there.
				if err := p.StartAt(resp.GetLogStartOffset()); err == nil {
					if err := send([]*replicationv1.FollowerPosition{position(p)}); err != nil {
						return err
					}
				}
				continue
			}
			// NOT_LEADER or an epoch error. Either this node learned of the
			// leadership before the leader did (ask again shortly), or the
			// partition moved (metadata will take it off this stream).
			f.r.logger.Debug("leader refused a partition; asking again", log.TopicPartition(tp.Topic, tp.Partition), log.NodeID(f.leader), log.Err(e))
			time.AfterFunc(100*time.Millisecond, func() {
				if cur, ok := f.partitions()[tp]; ok && cur == p && ctx.Err() == nil {
					_ = send([]*replicationv1.FollowerPosition{position(p)}) // a broken stream is handled by the receive loop
				}
			})
			continue
		}
		if d := resp.GetDivergingEpoch(); d != nil {
			leo, _, _, _, _ := p.FollowerState()
			if err := p.TruncateTo(min(d.GetEndOffset(), leo)); err != nil {
				f.r.logger.Error("cannot truncate diverged replica", log.TopicPartition(tp.Topic, tp.Partition), log.Err(err))
				continue
			}
			if err := send([]*replicationv1.FollowerPosition{position(p)}); err != nil {
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
				attribute.Int("replica", int(f.r.deps.Replicas.NodeID()))))
		}
		if _, err := p.AppendReplicated(ctx, resp.GetBatches(), resp.GetHighWatermark(), resp.GetLogStartOffset()); err != nil {
			f.r.logger.Warn("cannot append replicated batches; resyncing", log.TopicPartition(tp.Topic, tp.Partition), log.Err(err))
			hasData = true // report the real position so the leader resends from it
		}
		if span != nil {
			span.End()
		}
		if hasData {
			if err := send([]*replicationv1.FollowerPosition{position(p)}); err != nil {
				return err
			}
		}
	}
}
