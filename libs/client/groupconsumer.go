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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
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
	lastPoll   time.Time
	closed     bool

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
	// fenced tells the member a commit was refused with code, so it
	// rejoins when the code says its membership is stale.
	fenced(code errs.Code)
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
	g.lastPoll = time.Now()
	g.mu.Unlock()
	for {
		g.mu.Lock()
		g.woken = false
		g.mu.Unlock()
		if err := g.member.ensure(ctx); err != nil {
			return nil, err
		}
		if err := g.positionPending(ctx); err != nil {
			return nil, err
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
		g.lastPoll = time.Now()
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
	return g.pollCancel == nil && now.Sub(g.lastPoll) > g.cfg.RebalanceTimeout
}

// filterAssigned drops records of partitions not in assigned: a chunk
// fetched before a revocation can still be on its way.
func filterAssigned(recs []*ConsumedRecord, assigned map[TopicPartition]bool) []*ConsumedRecord {
	out := recs[:0]
	for _, r := range recs {
		if assigned[TopicPartition{r.Topic, r.Partition}] {
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

// maybeAutoCommit commits, in the background, what previous Polls returned
// once AutoCommitInterval has passed since the last automatic commit.
func (g *GroupConsumer) maybeAutoCommit() {
	if !g.cfg.AutoCommit || time.Since(g.lastAutoCommit) < g.cfg.AutoCommitInterval {
		return
	}
	g.lastAutoCommit = time.Now()
	offsets := g.due(false)
	if len(offsets) == 0 {
		return
	}
	g.enqueueCommit(commitJob{offsets: offsets, done: func(err error) {
		if err != nil {
			g.logWarn("automatic commit failed", err)
		}
	}})
}

// due returns the positions to commit: every known position with all, or
// only those that moved since their last commit.
func (g *GroupConsumer) due(all bool) map[TopicPartition]committedOffset {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.book.due(all, g.k.Position)
}

// commitDue commits, synchronously, the positions that moved.
func (g *GroupConsumer) commitDue(ctx context.Context) error {
	g.flushCommits(ctx)
	offsets := g.due(false)
	if len(offsets) == 0 {
		return nil
	}
	return g.commit(ctx, offsets)
}

// flushCommits waits until the asynchronous commits queued so far are
// answered. A synchronous commit waits for them first: an older
// asynchronous commit answered after it would move the committed offsets
// back, and a partition's next owner would read records again.
func (g *GroupConsumer) flushCommits(ctx context.Context) {
	flushed := make(chan struct{})
	select {
	case g.commits <- commitJob{done: func(error) { close(flushed) }}:
		select {
		case <-flushed:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	case <-g.life.Done():
	}
}

// CommitSync commits offsets (the next offset to read, per partition) and
// waits for the answer. With nil it commits the positions after every
// record Poll has returned, for every owned partition.
func (g *GroupConsumer) CommitSync(ctx context.Context, offsets map[TopicPartition]int64) error {
	var req map[TopicPartition]committedOffset
	if offsets == nil {
		req = g.due(true)
	} else {
		req = explicitOffsets(offsets)
	}
	if len(req) == 0 {
		return nil
	}
	g.flushCommits(ctx)
	return g.commit(ctx, req)
}

// CommitAsync commits offsets (nil: what Poll returned so far) in the
// background, after earlier asynchronous commits, and calls done (if not
// nil) with the outcome. done runs on the goroutine that sends commits, so
// it must not call CommitSync or Close.
func (g *GroupConsumer) CommitAsync(offsets map[TopicPartition]int64, done func(error)) {
	var req map[TopicPartition]committedOffset
	if offsets == nil {
		req = g.due(true)
	} else {
		req = explicitOffsets(offsets)
	}
	if len(req) == 0 {
		if done != nil {
			done(nil)
		}
		return
	}
	g.enqueueCommit(commitJob{offsets: req, done: done})
}

func explicitOffsets(offsets map[TopicPartition]int64) map[TopicPartition]committedOffset {
	out := make(map[TopicPartition]committedOffset, len(offsets))
	for tp, o := range offsets {
		out[tp] = committedOffset{offset: o, epoch: -1}
	}
	return out
}

func (g *GroupConsumer) enqueueCommit(j commitJob) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		if j.done != nil {
			j.done(errors.New("group consumer is closed"))
		}
		return
	}
	select {
	case g.commits <- j:
	case <-g.life.Done():
		if j.done != nil {
			j.done(g.life.Err())
		}
	}
}

// runCommits sends asynchronous commits one at a time, in order.
func (g *GroupConsumer) runCommits() {
	defer close(g.commitsDone)
	for {
		select {
		case j := <-g.commits:
			var err error
			if len(j.offsets) > 0 {
				err = g.commit(g.life, j.offsets)
			}
			if j.done != nil {
				j.done(err)
			}
		case <-g.life.Done():
			// Drain what was queued before Close stopped the loop.
			for {
				select {
				case j := <-g.commits:
					if j.done != nil {
						j.done(errors.New("group consumer closed before the commit was sent"))
					}
				default:
					return
				}
			}
		}
	}
}

// commit sends one OffsetCommit fenced by the member's generation or epoch
// and records what was committed. Group-level errors come in every
// partition's result; one that says the membership is stale makes the
// member rejoin.
func (g *GroupConsumer) commit(ctx context.Context, offsets map[TopicPartition]committedOffset) error {
	memberID, instanceID, epoch := g.member.fence()
	req := &groupv1.OffsetCommitRequest{GroupId: g.cfg.GroupID, GenerationIdOrMemberEpoch: epoch,
		MemberId: memberID, GroupInstanceId: instanceID}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sortTPs(tps)
	for _, tp := range tps {
		o := offsets[tp]
		p := &groupv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: o.offset}
		if o.epoch >= 0 {
			e := o.epoch
			p.LeaderEpoch = &e
		}
		req.Partitions = append(req.Partitions, p)
	}
	var resp *groupv1.OffsetCommitResponse
	err := g.c.onGroupCoordinator(ctx, g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.OffsetCommit(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		// A coordinator move shows in the partitions' results: hand it
		// over so the call is retried on the new coordinator.
		for _, res := range r.GetResults() {
			if e := res.GetError(); e != nil && coordinatorMoved(e.GetCode()) {
				return e, nil
			}
		}
		return nil, nil
	})
	if err != nil {
		g.member.fenced(errs.CodeOf(err))
		return fmt.Errorf("committing offsets of group %q: %w", g.cfg.GroupID, err)
	}
	var failed []error
	ok := map[TopicPartition]committedOffset{}
	for _, res := range resp.GetResults() {
		tp := TopicPartition{res.GetTopic(), res.GetPartition()}
		if e := errs.FromProto(res.GetError()); e != nil {
			g.member.fenced(e.Code)
			failed = append(failed, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, e))
			continue
		}
		if o, found := offsets[tp]; found {
			ok[tp] = o
		}
	}
	g.mu.Lock()
	g.book.committed(ok)
	g.mu.Unlock()
	if len(failed) > 0 {
		return fmt.Errorf("committing offsets of group %q: %w", g.cfg.GroupID, firstSame(failed))
	}
	return nil
}

// firstSame returns the only error when every partition failed alike (a
// group-level error), or all of them joined.
func firstSame(list []error) error {
	first := errs.CodeOf(list[0])
	for _, e := range list[1:] {
		if errs.CodeOf(e) != first {
			return errors.Join(list...)
		}
	}
	if len(list) == 1 {
		return list[0]
	}
	return fmt.Errorf("%d partitions: %w", len(list), list[0])
}

// coordinatorMoved says whether a code means "ask another coordinator".
func coordinatorMoved(c errs.Code) bool {
	return c == errs.NotCoordinator || c == errs.CoordinatorNotAvailable || c == errs.CoordinatorLoadInProgress
}

// fetchCommitted returns the group's committed offsets of tps (absent:
// nothing committed). Partitions with a pending transactional commit are
// retried until it settles.
func (g *GroupConsumer) fetchCommitted(ctx context.Context, tps []TopicPartition) (map[TopicPartition]committedOffset, error) {
	memberID, _, epoch := g.member.fence()
	req := &groupv1.OffsetFetchRequest{GroupId: g.cfg.GroupID, MemberEpoch: -1}
	if g.cfg.Protocol == GroupProtocolConsumer && memberID != "" {
		req.MemberId, req.MemberEpoch = memberID, epoch
	}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	var b backoff
	for {
		var resp *groupv1.OffsetFetchResponse
		err := g.c.onGroupCoordinator(ctx, g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
			r, err := gc.OffsetFetch(ctx, req)
			if err != nil {
				return nil, err
			}
			resp = r
			return r.GetError(), nil
		})
		if err != nil {
			return nil, fmt.Errorf("fetching committed offsets of group %q: %w", g.cfg.GroupID, err)
		}
		out := map[TopicPartition]committedOffset{}
		unstable := false
		var failed error
		for _, p := range resp.GetPartitions() {
			tp := TopicPartition{p.GetTopic(), p.GetPartition()}
			if e := errs.FromProto(p.GetError()); e != nil {
				if e.Code == errs.UnstableOffsetCommit {
					unstable = true
				} else if failed == nil {
					failed = fmt.Errorf("committed offset of %s-%d: %w", tp.Topic, tp.Partition, e)
				}
				continue
			}
			if p.GetOffset() >= 0 {
				out[tp] = committedOffset{offset: p.GetOffset(), epoch: p.GetLeaderEpoch()}
			}
		}
		if failed != nil {
			return nil, failed
		}
		if !unstable {
			return out, nil
		}
		if !b.wait(ctx) {
			return nil, fmt.Errorf("committed offsets of group %q stayed unstable (a transaction is pending): %w", g.cfg.GroupID, ctx.Err())
		}
	}
}

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
		if err := g.commitDue(ctx); err != nil {
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

// groupTelemetry records spans for joins, syncs and heartbeats that start
// a rebalance, and rebalance metrics.
type groupTelemetry struct {
	tracer     trace.Tracer
	rebalances metric.Int64Counter
	duration   metric.Float64Histogram
	attrs      metric.MeasurementOption
}

func newGroupTelemetry(tel *Telemetry, cfg GroupConsumerConfig) groupTelemetry {
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	t := groupTelemetry{tracer: tracenoop.NewTracerProvider().Tracer("")}
	if tel != nil {
		t.tracer = tel.Tracer("github.com/sluice-io/sluice/libs/client")
		if tel.MeterProvider != nil {
			mp = tel.MeterProvider
		}
	}
	meter := mp.Meter("github.com/sluice-io/sluice/libs/client")
	// Instrument creation fails only on invalid names; the noop
	// instruments returned alongside are safe to use.
	t.rebalances, _ = meter.Int64Counter("sluice.client.group.rebalances",
		metric.WithDescription("Rebalances this member completed."))
	t.duration, _ = meter.Float64Histogram("sluice.client.group.rebalance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a rebalance to the new assignment in use."))
	t.attrs = metric.WithAttributes(attribute.String("group", cfg.GroupID), attribute.String("protocol", cfg.Protocol.String()))
	return t
}

// span starts a client span for a group call.
func (t groupTelemetry) span(ctx context.Context, name, group string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{attribute.String("group", group)}, attrs...)...))
}

// rebalanced records one completed rebalance.
func (t groupTelemetry) rebalanced(ctx context.Context, started time.Time) {
	t.rebalances.Add(ctx, 1, t.attrs)
	t.duration.Record(ctx, time.Since(started).Seconds(), t.attrs)
}

// endSpan ends a span, recording err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
