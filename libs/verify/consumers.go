package verify

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// readsOf turns consumed records into the history's reads.
func readsOf(recs []*client.ConsumedRecord) []check.Read {
	out := make([]check.Read, len(recs))
	for i, rec := range recs {
		out[i] = check.Read{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: string(rec.Key), Value: string(rec.Value)}
	}
	return out
}

func isolationOf(readCommitted bool) check.Isolation {
	if readCommitted {
		return check.ReadCommitted
	}
	return check.ReadUncommitted
}

// runAssigned runs a consumer assigned every partition of every topic,
// reading from offset 0 until ctx ends. Each poll that returns records is
// recorded with the consumer's positions after it in the partitions it
// read.
func (r *runner) runAssigned(ctx context.Context, proc int, readCommitted bool) {
	log := r.cfg.Logger.With(slog.Int("process", proc), slog.String("isolation", isolationOf(readCommitted).String()))
	k := r.cl.NewConsumer(client.ConsumerConfig{ReadCommitted: readCommitted, Reset: client.ResetEarliest})
	defer k.Close()
	tps := r.partitions()
	k.Assign(tps...)
	var seeks []check.Position
	for _, tp := range tps {
		k.Seek(tp, 0)
		seeks = append(seeks, check.Position{Topic: tp.Topic, Partition: tp.Partition, Offset: 0})
	}
	var lastWarn time.Time
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		start := r.now()
		recs, err := k.Poll(pctx)
		cancel()
		// What arrived meanwhile joins this poll's record, so the history
		// holds a few polls a second per consumer, not one per chunk.
		for i := 0; err == nil && len(recs) > 0 && i < 50; i++ {
			mctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
			more, merr := k.Poll(mctx)
			cancel()
			if len(more) == 0 {
				break
			}
			recs, err = append(recs, more...), merr
		}
		end := r.now()
		var trunc *client.TruncationError
		if errors.As(err, &trunc) {
			// The consumer moves to a position of its own choosing.
			seeks = append(seeks, check.Position{Topic: trunc.Topic, Partition: trunc.Partition, Offset: check.NoOffset})
			log.Warn("log truncated under the consumer", slog.String("topic", trunc.Topic), slog.Int("partition", int(trunc.Partition)), slog.Int64("offset", trunc.Offset))
			continue
		}
		if err != nil && pctx.Err() == nil && time.Since(lastWarn) > 5*time.Second {
			lastWarn = time.Now()
			log.Warn("poll failed", slog.Any("err", err))
		}
		if len(recs) == 0 {
			continue
		}
		p := check.Poll{Process: proc, Start: start, End: end, Isolation: isolationOf(readCommitted), Seeks: seeks, Reads: readsOf(recs)}
		seeks = nil
		seen := map[client.TopicPartition]bool{}
		for _, rec := range recs {
			tp := client.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
			if !seen[tp] {
				seen[tp] = true
				if pos := k.Position(tp); pos >= 0 {
					p.Ends = append(p.Ends, check.Position{Topic: tp.Topic, Partition: tp.Partition, Offset: pos})
				}
			}
		}
		r.rec.Poll(p)
		sleep(ctx, 100*time.Millisecond)
	}
}

// ownership is a partition a group member owns since Start.
type ownership struct {
	gen    int32
	member string
	start  int64
}

// group is one member of a consumer group, recording its polls, its
// ownership of partitions (Generations) and, unless it is a copier (whose
// offsets go in transactions), its own offset commits.
type group struct {
	r        *runner
	proc     int
	name     string
	protocol string
	gc       *client.GroupConsumer
	commits  bool
	log      *slog.Logger

	mu    sync.Mutex
	seeks []check.Position
	owned map[client.TopicPartition]ownership
	// pending are the next offsets to commit, per owned partition.
	pending    map[client.TopicPartition]int64
	lastCommit time.Time
	lastWarn   time.Time
}

// newGroup creates a member of the named group subscribed to topics. A
// copier (copy true) reads with read_committed and commits nothing itself.
func (r *runner) newGroup(name string, protocol client.GroupProtocol, proc int, topics []string, copier bool) *group {
	g := &group{r: r, proc: proc, name: name, protocol: check.ProtocolClassic, commits: !copier,
		owned: map[client.TopicPartition]ownership{}, pending: map[client.TopicPartition]int64{}, lastCommit: time.Now()}
	if protocol == client.GroupProtocolConsumer {
		g.protocol = check.ProtocolConsumer
	}
	g.log = r.cfg.Logger.With(slog.Int("process", proc), slog.String("group", name))
	gc, err := r.cl.NewGroupConsumer(client.GroupConsumerConfig{
		GroupID: name, Topics: topics, Protocol: protocol, Reset: client.ResetEarliest,
		SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 30 * time.Second,
		Consumer:   client.ConsumerConfig{ReadCommitted: true},
		OnAssigned: g.assigned, OnRevoked: g.revoked, OnLost: g.revoked,
	})
	if err != nil {
		// The configuration above is fixed and valid; a failure here is a
		// bug in this package.
		panic("verify: group consumer config: " + err.Error())
	}
	g.gc = gc
	return g
}

func (g *group) assigned(_ context.Context, tps []client.TopicPartition) {
	now := g.r.now()
	gen, member := g.gc.Generation(), g.gc.MemberID()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range tps {
		g.owned[tp] = ownership{gen: gen, member: member, start: now}
		delete(g.pending, tp)
		g.seeks = append(g.seeks, check.Position{Topic: tp.Topic, Partition: tp.Partition, Offset: check.NoOffset})
	}
}

func (g *group) revoked(_ context.Context, tps []client.TopicPartition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endOwnershipLocked(tps, g.r.now())
}

// endOwnershipLocked records the ownership of tps as ended at end, one
// Generation per (generation, member, start).
func (g *group) endOwnershipLocked(tps []client.TopicPartition, end int64) {
	byWindow := map[ownership][]check.TopicPartition{}
	for _, tp := range tps {
		o, ok := g.owned[tp]
		if !ok {
			continue
		}
		delete(g.owned, tp)
		delete(g.pending, tp)
		byWindow[o] = append(byWindow[o], check.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	for o, parts := range byWindow {
		slices.SortFunc(parts, func(a, b check.TopicPartition) int {
			if a.Topic != b.Topic {
				if a.Topic < b.Topic {
					return -1
				}
				return 1
			}
			return int(a.Partition - b.Partition)
		})
		g.r.rec.Generation(check.Generation{Process: g.proc, Group: g.name, Member: o.member, Protocol: g.protocol,
			Generation: o.gen, Partitions: parts, Start: o.start, End: end})
	}
}

// poll polls once, waiting up to wait, then takes what else has arrived
// (a few short polls), and records what it got: one poll record per run of
// reads between assignments, each with the assignments before it as seeks.
// A member that commits its own offsets commits what it read about once a
// second.
func (g *group) poll(ctx context.Context, wait time.Duration) []*client.ConsumedRecord {
	pctx, cancel := context.WithTimeout(ctx, wait)
	start := g.r.now()
	recs, err := g.gc.Poll(pctx)
	cancel()
	if err != nil && pctx.Err() == nil {
		g.mu.Lock()
		warn := time.Since(g.lastWarn) > 5*time.Second
		if warn {
			g.lastWarn = time.Now()
		}
		g.mu.Unlock()
		if warn {
			g.log.Warn("group poll failed", slog.Any("err", err))
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if len(recs) == 0 {
		return nil
	}
	all := recs
	cur := check.Poll{Process: g.proc, Start: start, End: g.r.now(), Isolation: check.ReadCommitted, Group: g.name,
		Seeks: g.takeSeeks(), Reads: readsOf(recs)}
	for range 50 {
		mctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		at := g.r.now()
		more, _ := g.gc.Poll(mctx) // an error here is met again by the next poll
		cancel()
		if len(more) == 0 {
			break
		}
		if seeks := g.takeSeeks(); len(seeks) > 0 {
			// A rebalance happened in between: its reads start a new
			// record.
			g.r.rec.Poll(cur)
			cur = check.Poll{Process: g.proc, Start: at, Isolation: check.ReadCommitted, Group: g.name, Seeks: seeks}
		}
		cur.Reads = append(cur.Reads, readsOf(more)...)
		cur.End = g.r.now()
		all = append(all, more...)
	}
	g.r.rec.Poll(cur)
	if g.commits {
		g.mu.Lock()
		for _, rec := range all {
			tp := client.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
			if _, ok := g.owned[tp]; ok {
				g.pending[tp] = rec.Offset + 1
			}
		}
		g.mu.Unlock()
		g.maybeCommit(ctx, false)
	}
	return all
}

// takeSeeks returns the assignments since the last call.
func (g *group) takeSeeks() []check.Position {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.seeks
	g.seeks = nil
	return s
}

// maybeCommit commits the pending offsets of owned partitions once a
// second (always with force), recording each acknowledged or failed commit.
func (g *group) maybeCommit(ctx context.Context, force bool) {
	g.mu.Lock()
	if len(g.pending) == 0 || !force && time.Since(g.lastCommit) < time.Second {
		g.mu.Unlock()
		return
	}
	offsets := g.pending
	g.pending = map[client.TopicPartition]int64{}
	g.lastCommit = time.Now()
	g.mu.Unlock()
	gen := g.gc.Generation()
	sent := g.r.now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := g.gc.CommitSync(cctx, offsets)
	cancel()
	at, outcome := g.r.now(), outcomeOf(err)
	for tp, off := range offsets {
		g.r.rec.GroupCommit(check.GroupCommit{Process: g.proc, Group: g.name,
			TopicPartition: check.TopicPartition{Topic: tp.Topic, Partition: tp.Partition},
			Offset:         off, Generation: gen, Kind: check.CommitAcked, Start: sent, Time: at, Outcome: outcome})
	}
	if err != nil && ctx.Err() == nil {
		g.log.Warn("offset commit failed", slog.Any("err", err))
	}
}

// close leaves the group and records the ownership still open as ending
// now.
func (g *group) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g.commits {
		g.maybeCommit(ctx, true)
	}
	if err := g.gc.Close(ctx); err != nil {
		g.log.Warn("closing group consumer", slog.Any("err", err))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var left []client.TopicPartition
	for tp := range g.owned {
		left = append(left, tp)
	}
	g.endOwnershipLocked(left, g.r.now())
}

// runGroup runs a member of a group until ctx ends.
func (r *runner) runGroup(ctx context.Context, name string, protocol client.GroupProtocol, proc int) {
	g := r.newGroup(name, protocol, proc, r.readTopics(), false)
	defer g.close()
	for ctx.Err() == nil {
		if len(g.poll(ctx, time.Second)) > 0 {
			// Let records gather, so one poll record holds several
			// chunks.
			sleep(ctx, 100*time.Millisecond)
		}
		g.maybeCommit(ctx, false)
	}
}

// watchOffsets fetches the committed offsets of every group once a second
// until ctx ends, recording each answer with when it was sent (Start) and
// answered (Time): a fetch sent after a commit was acknowledged must see
// that commit or a later one.
func (r *runner) watchOffsets(ctx context.Context, proc int, groups []string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, name := range groups {
			_, _ = r.fetchOffsets(ctx, proc, name) // a failed fetch is retried on the next tick
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// fetchOffsets records one OffsetFetch of a group's committed offsets and
// returns the offsets answered, with the error of the fetch or of any
// partition.
func (r *runner) fetchOffsets(ctx context.Context, proc int, name string) (map[client.TopicPartition]int64, error) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sent := r.now()
	// Stable offsets only: a fetch without require_stable may answer the
	// offset from before a transaction whose commit was acknowledged but
	// whose marker has not reached the group coordinator yet, as Kafka's
	// does; partitions in that state answer UNSTABLE_OFFSET_COMMIT and are
	// left out.
	res, err := r.cl.FetchStableOffsets(fctx, name)
	at := r.now()
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Debug("offset fetch failed", slog.String("group", name), slog.Any("err", err))
	}
	out := map[client.TopicPartition]int64{}
	for tp, p := range res {
		if p.GetError() != nil || p.GetOffset() < 0 {
			continue
		}
		out[tp] = p.GetOffset()
		r.rec.GroupCommit(check.GroupCommit{Process: proc, Group: name,
			TopicPartition: check.TopicPartition{Topic: tp.Topic, Partition: tp.Partition},
			Offset:         p.GetOffset(), Kind: check.CommitFetched, Start: sent, Time: at, Outcome: check.OK})
	}
	return out, err
}
