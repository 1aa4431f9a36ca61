package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// GroupProtocol selects the rebalance protocol of a group consumer (Kafka's
// group.protocol).
type GroupProtocol int

// Group protocols.
const (
	// GroupProtocolClassic is the JoinGroup/SyncGroup protocol: the group
	// leader computes the assignment on the client. It is the default, as
	// in Kafka.
	GroupProtocolClassic GroupProtocol = iota
	// GroupProtocolConsumer is the consumer protocol of KIP-848: the
	// coordinator computes the assignment and moves partitions one by one
	// through ConsumerGroupHeartbeat, without stopping the group.
	GroupProtocolConsumer
)

// String returns the protocol's name as Kafka spells it.
func (p GroupProtocol) String() string {
	switch p {
	case GroupProtocolClassic:
		return "classic"
	case GroupProtocolConsumer:
		return "consumer"
	}
	return fmt.Sprintf("GroupProtocol(%d)", int(p))
}

// ParseGroupProtocol parses "classic" or "consumer".
func ParseGroupProtocol(s string) (GroupProtocol, error) {
	switch strings.ToLower(s) {
	case "classic", "":
		return GroupProtocolClassic, nil
	case "consumer":
		return GroupProtocolConsumer, nil
	}
	return 0, fmt.Errorf("group protocol %q: want classic or consumer", s)
}

// GroupConsumerConfig configures a GroupConsumer. Durations left zero take
// Kafka's defaults.
type GroupConsumerConfig struct {
	// GroupID is the consumer group (group.id). Required.
	GroupID string
	// InstanceID makes the member static (group.instance.id, KIP-345): it
	// keeps its partitions across restarts within the session timeout and
	// does not leave the group on Close.
	InstanceID string
	// Topics to subscribe to; exactly one of Topics and TopicPattern is
	// set.
	Topics []string
	// TopicPattern subscribes to every topic whose whole name matches this
	// RE2 expression.
	TopicPattern string
	// Protocol is the rebalance protocol. Default GroupProtocolClassic.
	Protocol GroupProtocol
	// Assignors are the classic protocol's assignors, in order of
	// preference (partition.assignment.strategy). Default Kafka's: range,
	// then cooperative-sticky. The group rebalances cooperatively (KIP-429)
	// only when every listed assignor is cooperative.
	Assignors []assign.Assignor
	// ServerAssignor is the consumer protocol's server-side assignor
	// (group.remote.assignor): "uniform" (default) or "range".
	ServerAssignor string
	// SessionTimeout removes a member that stopped heartbeating (classic
	// protocol; the consumer protocol's is the server's). Default 45 s.
	SessionTimeout time.Duration
	// RebalanceTimeout is max.poll.interval.ms: how long the group waits for
	// a member to rejoin in a rebalance, and the longest a member may go
	// between Polls before it leaves the group. Default 5 min.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is the classic protocol's heartbeat period; the
	// consumer protocol uses the interval the coordinator gives. Default
	// 3 s.
	HeartbeatInterval time.Duration
	// AutoCommit is enable.auto.commit. As in Kafka, what the previous
	// Poll returned is committed: every AutoCommitInterval (inside Poll),
	// before partitions are revoked, and on Close. A Go bool cannot
	// default to true, so set it for Kafka's default behaviour.
	AutoCommit bool
	// AutoCommitInterval is auto.commit.interval.ms. Default 5 s.
	AutoCommitInterval time.Duration
	// MetadataMaxAge is how often a classic-protocol member refreshes the
	// metadata of its subscription: the group's leader rebalances when a
	// topic it assigned grew, and a TopicPattern subscription rejoins when
	// the matching topics changed (Kafka's clients notice both on their
	// metadata refresh, metadata.max.age.ms). Default 10 s.
	MetadataMaxAge time.Duration
	// Reset says where to start reading a partition for which the group
	// has no committed offset (auto.offset.reset). It overrides
	// Consumer.Reset.
	Reset OffsetReset
	// OnAssigned is called inside Poll, on Poll's goroutine, with the
	// partitions the member was given, after their committed offsets are
	// known and before records of them are returned.
	OnAssigned func(ctx context.Context, tps []TopicPartition)
	// OnRevoked is called inside Poll (or Close) with partitions the member
	// gives up while it still owns them, after the automatic commit: the
	// last chance to commit their offsets.
	OnRevoked func(ctx context.Context, tps []TopicPartition)
	// OnLost is called with partitions the member lost without a chance to
	// commit (its session expired or it was fenced): other members may own
	// them already. When nil, OnRevoked is called instead, as Kafka does.
	OnLost func(ctx context.Context, tps []TopicPartition)
	// Consumer holds the fetch settings of the underlying consumer.
	Consumer ConsumerConfig
}

// Kafka's defaults for group consumers.
const (
	defaultSessionTimeout     = 45 * time.Second
	defaultRebalanceTimeout   = 5 * time.Minute
	defaultHeartbeatInterval  = 3 * time.Second
	defaultAutoCommitInterval = 5 * time.Second
	// Shorter than Kafka's 5 min metadata.max.age.ms: a refresh of the
	// subscribed topics' metadata costs one small call.
	defaultMetadataMaxAge = 10 * time.Second
)

// validate checks the configuration and fills in defaults.
func (cfg *GroupConsumerConfig) validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if cfg.GroupID == "" {
		bad("GroupID is required")
	}
	switch {
	case len(cfg.Topics) == 0 && cfg.TopicPattern == "":
		bad("set Topics or TopicPattern")
	case len(cfg.Topics) > 0 && cfg.TopicPattern != "":
		bad("set Topics or TopicPattern, not both")
	case cfg.TopicPattern != "":
		if _, err := regexp.Compile(cfg.TopicPattern); err != nil {
			bad("TopicPattern: %v", err)
		}
	}
	seen := map[string]bool{}
	for _, t := range cfg.Topics {
		if t == "" {
			bad("Topics: empty topic name")
		} else if seen[t] {
			bad("Topics: %q listed twice", t)
		}
		seen[t] = true
	}
	switch cfg.Protocol {
	case GroupProtocolClassic:
		if cfg.ServerAssignor != "" {
			bad("ServerAssignor is for the consumer protocol; the classic protocol takes Assignors")
		}
		if len(cfg.Assignors) == 0 {
			cfg.Assignors = []assign.Assignor{assign.Range(), assign.CooperativeSticky()}
		}
		names := map[string]bool{}
		for i, a := range cfg.Assignors {
			if a == nil {
				bad("Assignors[%d] is nil", i)
				continue
			}
			if names[a.Name()] {
				bad("Assignors: %q listed twice", a.Name())
			}
			names[a.Name()] = true
		}
	case GroupProtocolConsumer:
		if len(cfg.Assignors) > 0 {
			bad("Assignors are for the classic protocol; the consumer protocol assigns on the server (ServerAssignor)")
		}
		switch cfg.ServerAssignor {
		case "":
			cfg.ServerAssignor = "uniform"
		case "uniform", "range":
		default:
			bad("ServerAssignor %q: want uniform or range", cfg.ServerAssignor)
		}
	default:
		bad("Protocol %v: want GroupProtocolClassic or GroupProtocolConsumer", cfg.Protocol)
	}
	defaultDuration(&cfg.SessionTimeout, defaultSessionTimeout, "SessionTimeout", bad)
	defaultDuration(&cfg.RebalanceTimeout, defaultRebalanceTimeout, "RebalanceTimeout", bad)
	defaultDuration(&cfg.HeartbeatInterval, defaultHeartbeatInterval, "HeartbeatInterval", bad)
	defaultDuration(&cfg.AutoCommitInterval, defaultAutoCommitInterval, "AutoCommitInterval", bad)
	defaultDuration(&cfg.MetadataMaxAge, defaultMetadataMaxAge, "MetadataMaxAge", bad)
	if cfg.Protocol == GroupProtocolClassic && cfg.HeartbeatInterval >= cfg.SessionTimeout && cfg.SessionTimeout > 0 {
		bad("HeartbeatInterval (%v) must be below SessionTimeout (%v)", cfg.HeartbeatInterval, cfg.SessionTimeout)
	}
	if cfg.Reset < ResetLatest || cfg.Reset > ResetNone {
		bad("Reset %d is not an OffsetReset", cfg.Reset)
	}
	if len(problems) > 0 {
		return fmt.Errorf("group consumer config: %s", strings.Join(problems, "; "))
	}
	cfg.Consumer.Reset = cfg.Reset
	return nil
}

func defaultDuration(d *time.Duration, def time.Duration, name string, bad func(string, ...any)) {
	switch {
	case *d == 0:
		*d = def
	case *d < 0:
		bad("%s must not be negative", name)
	case *d > time.Duration(1<<31-1)*time.Millisecond:
		bad("%s %v does not fit in 32-bit milliseconds", name, *d)
	}
}

// GroupConsumer consumes topics as a member of a consumer group: the
// group's coordinator spreads the partitions over the members and moves
// them when members come and go. It reads with a Consumer, positioned at
// the group's committed offsets, and commits offsets fenced by the member's
// generation (classic) or epoch (consumer protocol).
//
// Poll, the commit calls and Close are meant for one goroutine, as in
// Kafka; rebalance callbacks run inside Poll on that goroutine. Heartbeats
// run in the background.
type GroupConsumer struct {
	c       *Client
	cfg     GroupConsumerConfig
	k       *Consumer
	pattern *regexp.Regexp
	member  groupMember
	tel     groupTelemetry

	life   context.Context // ends on Close
	cancel context.CancelFunc

	commits     chan commitJob // CommitAsync, in order
	commitsDone chan struct{}

	mu       sync.Mutex
	assigned map[TopicPartition]bool
	book     offsetBook
	// unpositioned are assigned partitions whose committed offsets could
	// not be fetched yet: they are not read until a Poll fetches them.
	unpositioned map[TopicPartition]bool
	// pollCancel interrupts a Poll waiting for records when the member must
	// act on the group (woken records that a wake came before the wait).
	pollCancel context.CancelFunc
	woken      bool
	// polling is set while Poll runs; lastPoll is when the last Poll
	// returned (or the consumer was made). Time inside Poll, rebalance
	// callbacks included, does not count toward max.poll.interval.ms.
	polling  bool
	lastPoll time.Time
	closed   bool

	lastAutoCommit time.Time // Poll's goroutine only
}

// groupMember is one rebalance protocol's side of membership.
type groupMember interface {
	// ensure joins the group or follows a rebalance, with its callbacks; it
	// runs inside Poll and returns once the member is in a stable group, or
	// has nothing to do, or ctx ends.
	ensure(ctx context.Context) error
	// fence returns what commits carry: member id, instance id, and the
	// generation or member epoch.
	fence() (memberID, instanceID string, epoch int32)
	// fenced tells the member a commit sent with epoch was refused with
	// code, so it rejoins when the code says its membership is stale.
	fenced(code errs.Code, epoch int32)
	// settle waits, within ctx, for a rebalance the member has begun
	// and applies it; it reports whether the member moved to a new
	// generation (so a commit refused in the old one may be sent again).
	settle(ctx context.Context) bool
	// generation returns the generation or member epoch, -1 outside a
	// group.
	generation() int32
	// leave stops heartbeats and leaves the group (a static member only
	// stops).
	leave(ctx context.Context) error
}

type commitJob struct {
	offsets map[TopicPartition]committedOffset
	done    func(error)
}

// NewGroupConsumer validates cfg and returns a group consumer. It joins the
// group on the first Poll.
func (c *Client) NewGroupConsumer(cfg GroupConsumerConfig) (*GroupConsumer, error) {
	cfg.Topics = slices.Clone(cfg.Topics)
	cfg.Assignors = slices.Clone(cfg.Assignors)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	g := &GroupConsumer{
		c: c, cfg: cfg, life: life, cancel: cancel,
		assigned: map[TopicPartition]bool{}, unpositioned: map[TopicPartition]bool{}, book: newOffsetBook(),
		commits: make(chan commitJob, 64), commitsDone: make(chan struct{}),
		lastPoll: time.Now(), lastAutoCommit: time.Now(),
	}
	if cfg.TopicPattern != "" {
		// Kafka matches the whole topic name.
		g.pattern = regexp.MustCompile(`^(?:` + cfg.TopicPattern + `)$`)
	}
	g.tel = newGroupTelemetry(c.cfg.Telemetry, cfg)
	g.k = c.NewConsumer(cfg.Consumer)
	switch cfg.Protocol {
	case GroupProtocolConsumer:
		g.member = newNextMember(g)
	default:
		m, err := newClassicMember(g)
		if err != nil {
			g.k.Close()
			cancel()
			return nil, err
		}
		g.member = m
	}
	go g.runCommits()
	return g, nil
}

// Position returns the next offset Poll will return for an owned partition
// (Kafka's consumer.position): after the records returned so far, or where
// reading starts (the committed offset, or where Reset put it); -1 while
// that is not known yet.
func (g *GroupConsumer) Position(tp TopicPartition) int64 { return g.k.Position(tp) }

// MemberID returns the member id the coordinator gave, empty before the
// first join.
func (g *GroupConsumer) MemberID() string {
	id, _, _ := g.member.fence()
	return id
}

// Generation returns the group generation (classic) or the member epoch
// (consumer protocol); -1 outside a group.
func (g *GroupConsumer) Generation() int32 { return g.member.generation() }

// Assignment returns the partitions the member owns, sorted.
func (g *GroupConsumer) Assignment() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return sortedTPs(g.assigned)
}

// Poll joins the group if needed, runs rebalance callbacks, commits
// automatically when due, and returns the next records of the owned
// partitions, waiting until some arrive or ctx ends (then it returns ctx's
// error). A rebalance interrupts the wait and is handled before any more
// records are returned, so no record of a partition is returned after its
// revocation.
func (g *GroupConsumer) Poll(ctx context.Context) ([]*ConsumedRecord, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errors.New("group consumer is closed")
	}
	g.polling = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.polling, g.lastPoll = false, time.Now()
		g.mu.Unlock()
	}()
	var retry backoff
	for {
		g.mu.Lock()
		g.woken = false
		g.mu.Unlock()
		if err := g.member.ensure(ctx); err != nil {
			return nil, err
		}
		if err := g.positionPending(ctx); err != nil {
			// Kafka's poll retries a failed offset fetch within its time;
			// only an error no retry can cure goes to the caller.
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errs.Is(err, errs.FencedMemberEpoch) || errs.Is(err, errs.UnknownMemberID) {
				// Out of the group: its partitions were dropped as lost,
				// and the next ensure joins again.
				g.logWarn("fetching committed offsets found the member fenced; joining again", err)
				continue
			}
			if !errs.IsRetriable(err) && !errs.Is(err, errs.RequestTimedOut) {
				return nil, err
			}
			g.logWarn("fetching committed offsets failed; retrying", err)
			if !retry.wait(ctx) {
				return nil, ctx.Err()
			}
			continue
		}
		g.maybeAutoCommit()
		pctx, cancel := context.WithCancel(ctx)
		g.mu.Lock()
		if g.woken {
			g.mu.Unlock()
			cancel()
			continue
		}
		g.pollCancel = cancel
		g.mu.Unlock()
		recs, err := g.k.Poll(pctx)
		g.mu.Lock()
		g.pollCancel = nil
		recs = filterAssigned(recs, g.assigned)
		g.book.returned(recs)
		g.mu.Unlock()
		cancel()
		switch {
		case len(recs) > 0:
			return recs, nil
		case err == nil:
			continue // only records of partitions revoked meanwhile
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case pctx.Err() != nil:
			continue // woken for the group
		default:
			return nil, err
		}
	}
}

// wake interrupts a Poll waiting for records so that it acts on the group.
func (g *GroupConsumer) wake() {
	g.mu.Lock()
	g.woken = true
	if g.pollCancel != nil {
		g.pollCancel()
	}
	g.mu.Unlock()
}

// pollOverdue reports whether the application has gone longer than the
// rebalance timeout without calling Poll (max.poll.interval.ms).
func (g *GroupConsumer) pollOverdue(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.polling && now.Sub(g.lastPoll) > g.cfg.RebalanceTimeout
}

// filterAssigned drops records of partitions not in assigned: a chunk
// fetched before a revocation can still be on its way.
func filterAssigned(recs []*ConsumedRecord, assigned map[TopicPartition]bool) []*ConsumedRecord {
	out := recs[:0]
	// One lookup per run of records from the same partition.
	var last TopicPartition
	keep, first := false, true
	for _, r := range recs {
		if first || r.Partition != last.Partition || r.Topic != last.Topic {
			last, first = TopicPartition{r.Topic, r.Partition}, false
			keep = assigned[last]
		}
		if keep {
			out = append(out, r)
		}
	}
	return out
}

// subscription returns the topics the member subscribes to now: the
// configured ones, or the existing topics the pattern matches.
func (g *GroupConsumer) subscription(ctx context.Context) ([]string, error) {
	if g.pattern == nil {
		return g.cfg.Topics, nil
	}
	resp, err := g.c.ListTopics(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("listing topics for pattern %q: %w", g.cfg.TopicPattern, err)
	}
	var out []string
	for _, t := range resp.GetTopics() {
		if g.pattern.MatchString(t.GetName()) {
			out = append(out, t.GetName())
		}
	}
	sort.Strings(out)
	return out, nil
}

// gainPartitions starts reading newly assigned partitions at the group's
// committed offsets (or by Reset where none is committed) and calls
// OnAssigned. Partitions whose offsets cannot be fetched now are assigned
// but not read until a later Poll fetches them.
func (g *GroupConsumer) gainPartitions(ctx context.Context, added []TopicPartition) {
	ctx, cancel := g.rebalanceCtx(ctx)
	defer cancel()
	g.mu.Lock()
	for _, tp := range added {
		g.assigned[tp] = true
		g.unpositioned[tp] = true
	}
	g.mu.Unlock()
	if err := g.positionPending(ctx); err != nil {
		g.logWarn("fetching committed offsets failed; retrying on the next poll", err)
	}
	if g.cfg.OnAssigned != nil {
		g.cfg.OnAssigned(ctx, added)
	}
}

// positionPending fetches the committed offsets of partitions that have no
// position yet and hands them to the consumer.
func (g *GroupConsumer) positionPending(ctx context.Context) error {
	g.mu.Lock()
	pending := sortedTPs(g.unpositioned)
	g.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	committed, err := g.fetchCommitted(ctx, pending)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var ready []TopicPartition
	for _, tp := range pending {
		if g.assigned[tp] && g.unpositioned[tp] {
			delete(g.unpositioned, tp)
			ready = append(ready, tp)
		}
	}
	g.book.start(ready, committed)
	g.k.assignAt(g.readable(), committed)
	return nil
}

// readable returns the assigned partitions that have a position. g.mu must
// be held.
func (g *GroupConsumer) readable() []TopicPartition {
	var out []TopicPartition
	for tp := range g.assigned {
		if !g.unpositioned[tp] {
			out = append(out, tp)
		}
	}
	sortTPs(out)
	return out
}

// rebalanceCtx bounds the work of a rebalance step (the commit before a
// revocation, fetching committed offsets, the callbacks) by the request
// timeout rather than by Poll's deadline: a Poll with a short deadline must
// not cut a revocation's commit short, which would hand partitions over
// with stale offsets (Kafka, too, finishes that commit across polls). Close
// still ends it.
func (g *GroupConsumer) rebalanceCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.c.cfg.RequestTimeout)
	stop := context.AfterFunc(g.life, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// revokePartitions gives up partitions the member still owns: it commits
// what Poll returned (with AutoCommit), calls OnRevoked, and stops reading
// them.
func (g *GroupConsumer) revokePartitions(ctx context.Context, revoked []TopicPartition) {
	if len(revoked) == 0 {
		return
	}
	ctx, cancel := g.rebalanceCtx(ctx)
	defer cancel()
	if g.cfg.AutoCommit {
		if err := g.commitDue(ctx); err != nil {
			g.logWarn("committing before revocation failed", err)
		}
	}
	if g.cfg.OnRevoked != nil {
		g.cfg.OnRevoked(ctx, revoked)
	}
	g.drop(revoked)
}

// losePartitions drops partitions the member no longer owns (fenced or
// expired), without committing, and calls OnLost.
func (g *GroupConsumer) losePartitions(ctx context.Context, lost []TopicPartition) {
	if len(lost) == 0 {
		return
	}
	switch {
	case g.cfg.OnLost != nil:
		g.cfg.OnLost(ctx, lost)
	case g.cfg.OnRevoked != nil:
		g.cfg.OnRevoked(ctx, lost)
	}
	g.drop(lost)
}

func (g *GroupConsumer) drop(tps []TopicPartition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range tps {
		delete(g.assigned, tp)
		delete(g.unpositioned, tp)
	}
	g.book.drop(tps)
	g.k.Assign(g.readable()...)
}

// owned returns the assigned partitions.
func (g *GroupConsumer) owned() []TopicPartition { return g.Assignment() }

// Close leaves the group: it commits what Poll returned (with AutoCommit),
// calls OnRevoked with the owned partitions, and sends LeaveGroup (a static
// member does not leave, as in Kafka: it keeps its partitions until its
// session expires). Asynchronous commits queued before Close are sent
// first.
func (g *GroupConsumer) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	var errList []error
	g.flushCommits(ctx)
	if g.cfg.AutoCommit && g.member.generation() >= 0 {
		err := g.commitDue(ctx)
		// A cooperative member keeps reading while it rejoins, so its last
		// commit may meet the rebalance it is part of: finish the join and
		// commit in the new generation, rather than leave the next owner to
		// read the records again.
		// The wait is bounded by a session timeout: a join held up by a
		// slow member (up to the rebalance timeout) does not hold Close.
		if err != nil {
			sctx, cancel := context.WithTimeout(ctx, g.cfg.SessionTimeout)
			if g.member.settle(sctx) {
				err = g.commitDue(ctx)
			}
			cancel()
		}
		if err != nil {
			errList = append(errList, err)
		}
	}
	if owned := g.owned(); len(owned) > 0 {
		if g.cfg.OnRevoked != nil {
			g.cfg.OnRevoked(ctx, owned)
		}
		g.drop(owned)
	}
	if err := g.member.leave(ctx); err != nil {
		errList = append(errList, err)
	}
	g.cancel()
	<-g.commitsDone
	g.k.Close()
	return errors.Join(errList...)
}

func (g *GroupConsumer) logWarn(msg string, err error) {
	if l := g.c.cfg.Logger; l != nil {
		l.Warn(msg, slog.String("group", g.cfg.GroupID), slog.String("error", err.Error()))
	}
}

// assignAt assigns tps, placing those named in at at their committed
// offsets in the same step, so no stream starts from the reset policy in
// between.
func (k *Consumer) assignAt(tps []TopicPartition, at map[TopicPartition]committedOffset) {
	k.mu.Lock()
	next := map[TopicPartition]*position{}
	for _, tp := range tps {
		if p, ok := k.positions[tp]; ok {
			next[tp] = p
			continue
		}
		p := &position{offset: -1, lastEpoch: -1}
		if o, ok := at[tp]; ok {
			p.offset = o.offset
		}
		next[tp] = p
	}
	k.positions = next
	k.gen++
	k.mu.Unlock()
	k.kick()
}

func sortedTPs(set map[TopicPartition]bool) []TopicPartition {
	out := make([]TopicPartition, 0, len(set))
	for tp := range set {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

func sortTPs(tps []TopicPartition) {
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
}

// diffTPs returns the partitions of a that are not in b.
func diffTPs(a, b map[TopicPartition]bool) []TopicPartition {
	var out []TopicPartition
	for tp := range a {
		if !b[tp] {
			out = append(out, tp)
		}
	}
	sortTPs(out)
	return out
}
