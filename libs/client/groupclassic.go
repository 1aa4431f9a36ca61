package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/assign"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// classicMember is a member of a classic group: JoinGroup, SyncGroup,
// Heartbeat and LeaveGroup, with the assignment computed by the group
// leader's assignor.
//
// The join and sync run in a goroutine of their own, so a Poll whose
// context ends does not abandon a join the coordinator is waiting on: the
// next Poll picks up its result (Kafka's client completes a join across
// polls the same way). Callbacks run only in ensure, on Poll's goroutine.
type classicMember struct {
	g *GroupConsumer
	// cooperative is set when every assignor supports the cooperative
	// protocol (KIP-429): Kafka rebalances with the highest protocol all
	// configured assignors support.
	cooperative bool

	// Poll's goroutine only.
	joining   chan joinResult // a join in flight
	joinStart time.Time       // when the rebalance began
	topics    []string        // subscription sent in the last join
	retry     backoff
	checked   time.Time // last subscription check (patterns)
	// counts are the partition counts the leader assigned, nil on other
	// members: the leader watches them and rebalances the group when a
	// topic grows (as Kafka's leader does on a metadata refresh).
	counts        map[string]int32
	countsChecked time.Time

	mu         sync.Mutex
	id         string
	gen        int32 // -1 outside a generation
	protocol   string
	needRejoin bool
	reason     string
	// lost is set when the coordinator said the member is no longer in its
	// generation: its partitions belong to others already.
	lost bool
	// inJoin is set while a join is in flight: a commit refused because
	// the group is rebalancing, or because its generation just ended, is
	// answered by that join rather than by another one or by dropping the
	// partitions (a cooperative member keeps serving them meanwhile).
	inJoin   bool
	hbCancel context.CancelFunc
	hbDone   chan struct{}
}

// joinResult is the outcome of one JoinGroup and SyncGroup.
type joinResult struct {
	id, protocol string
	gen          int32
	assignment   map[TopicPartition]bool
	// counts are the partition counts the assignment used (leader only).
	counts map[string]int32
	err    error
}

func newClassicMember(g *GroupConsumer) (*classicMember, error) {
	coop := true
	for _, a := range g.cfg.Assignors {
		if a.Protocol() != assign.Cooperative {
			coop = false
		}
	}
	return &classicMember{g: g, cooperative: coop, gen: -1}, nil
}

func (m *classicMember) fence() (string, string, int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id, m.g.cfg.InstanceID, m.gen
}

func (m *classicMember) generation() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// fenced makes the member rejoin after a commit said its generation is
// stale. The answer to a commit of an earlier generation says nothing of
// the current one: the member has joined again since it was sent.
func (m *classicMember) fenced(code errs.Code, gen int32) {
	m.mu.Lock()
	inJoin, current := m.inJoin, m.gen
	m.mu.Unlock()
	if gen != current {
		return
	}
	if inJoin && (code == errs.RebalanceInProgress || code == errs.IllegalGeneration) {
		return
	}
	switch code {
	case errs.RebalanceInProgress:
		m.requestRejoin("a commit found a rebalance in progress")
	case errs.IllegalGeneration, errs.UnknownMemberID, errs.FencedInstanceID:
		m.markLost(code)
	}
}

func (m *classicMember) requestRejoin(reason string) {
	m.mu.Lock()
	if !m.needRejoin {
		m.needRejoin, m.reason = true, reason
	}
	m.mu.Unlock()
	m.g.wake()
}

// markLost records that the coordinator no longer counts the member in its
// generation: the next Poll drops its partitions as lost and rejoins.
func (m *classicMember) markLost(code errs.Code) {
	m.mu.Lock()
	m.lost, m.needRejoin = true, true
	m.reason = "the coordinator answered " + errs.Name(code)
	m.gen = -1
	if code == errs.UnknownMemberID || code == errs.FencedInstanceID {
		m.id = ""
	}
	m.mu.Unlock()
	m.g.wake()
}

// ensure joins or rejoins when needed and applies the new assignment.
//
// A cooperative member that still owns partitions does not wait for its
// join: Poll goes on returning their records while the rebalance runs
// (KIP-429 revokes only what moves, after the join), and the finished join
// wakes Poll, whose next call applies it. An eager member has revoked
// everything and waits.
func (m *classicMember) ensure(ctx context.Context) error {
	for {
		if m.joining == nil {
			need, err := m.needsJoin(ctx)
			if err != nil {
				return err
			}
			if !need {
				return nil
			}
			m.startJoin(ctx)
		}
		var r joinResult
		if m.cooperative && len(m.g.owned()) > 0 {
			select {
			case r = <-m.joining:
			default:
				return nil
			}
		} else {
			select {
			case r = <-m.joining:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		m.joining = nil
		m.mu.Lock()
		m.inJoin = false
		m.mu.Unlock()
		if r.err != nil {
			if err := m.joinFailed(ctx, r.err); err != nil {
				return err
			}
			continue
		}
		m.retry = backoff{}
		m.joined(ctx, r)
	}
}

// settle waits for a join in flight and applies its result. Only a
// cooperative member has one outside Poll: it went on reading while it
// rejoined.
func (m *classicMember) settle(ctx context.Context) bool {
	if m.joining == nil {
		return false
	}
	var r joinResult
	select {
	case r = <-m.joining:
	case <-ctx.Done():
		return false
	}
	m.joining = nil
	m.mu.Lock()
	m.inJoin = false
	m.mu.Unlock()
	if r.err != nil {
		return false
	}
	m.retry = backoff{}
	m.joined(ctx, r)
	return true
}

// needsJoin says whether the member must (re)join: it is in no generation,
// a rebalance was asked for, or a pattern subscription changed.
func (m *classicMember) needsJoin(ctx context.Context) (bool, error) {
	m.mu.Lock()
	need := m.gen < 0 || m.needRejoin
	m.mu.Unlock()
	if !need && m.counts != nil && time.Since(m.countsChecked) >= m.g.cfg.MetadataMaxAge {
		m.countsChecked = time.Now()
		if topic, changed := m.countsChanged(ctx); changed {
			m.requestRejoin(fmt.Sprintf("the partition count of topic %q changed", topic))
			return true, nil
		}
	}
	if need || m.g.pattern == nil || time.Since(m.checked) < m.g.cfg.MetadataMaxAge {
		return need, nil
	}
	m.checked = time.Now()
	topics, err := m.g.subscription(ctx)
	if err != nil {
		m.g.logWarn("checking the topic pattern failed", err)
		return false, nil
	}
	if !slices.Equal(topics, m.topics) {
		m.requestRejoin("the topics matching the pattern changed")
		return true, nil
	}
	return false, nil
}

// countsChanged refreshes the metadata of the topics the leader assigned
// and reports the first whose partition count differs.
func (m *classicMember) countsChanged(ctx context.Context) (string, bool) {
	for topic, n := range m.counts {
		if err := m.g.k.md.refresh(ctx, topic); err != nil {
			continue // checked again next time
		}
		if now, ok := m.g.k.md.known(topic); ok && now != n {
			return topic, true
		}
	}
	return "", false
}

// startJoin prepares the member for a rebalance (revoking or losing
// partitions as the protocol demands) and starts JoinGroup and SyncGroup.
func (m *classicMember) startJoin(ctx context.Context) {
	m.stopHeartbeat()
	m.mu.Lock()
	lost := m.lost || m.gen < 0
	m.mu.Unlock()
	m.joinStart = time.Now()
	owned := m.g.owned()
	switch {
	case lost:
		// Out of the generation, the member's partitions may have moved
		// on already: it must not commit them.
		m.g.losePartitions(ctx, owned)
	case !m.cooperative:
		// Eager: give up everything before joining.
		m.g.revokePartitions(ctx, owned)
	}
	topics, err := m.g.subscription(ctx)
	if err != nil {
		topics = m.topics // keep the last subscription
		m.g.logWarn("listing topics for the subscription failed", err)
	}
	m.topics = topics
	m.checked = time.Now()
	ownedMap := map[string][]int32{}
	for _, tp := range m.g.owned() {
		ownedMap[tp.Topic] = append(ownedMap[tp.Topic], tp.Partition)
	}
	// The flags are cleared only now: a commit refused during the
	// revocation above is answered by this very join.
	m.mu.Lock()
	id, gen, reason := m.id, m.gen, m.reason
	m.lost, m.needRejoin, m.reason = false, false, ""
	m.inJoin = true
	m.mu.Unlock()
	if reason == "" {
		reason = "joining"
	}
	ch := make(chan joinResult, 1)
	m.joining = ch
	go func() {
		ch <- m.joinAndSync(m.g.life, id, gen, topics, ownedMap, reason)
		// A cooperative member's Poll may be waiting for records.
		m.g.wake()
	}()
}

// joinFailed handles a failed join: errors that a new join cures are
// retried at once or after a backoff; others go to Poll (the next Poll
// tries again).
func (m *classicMember) joinFailed(ctx context.Context, err error) error {
	code := errs.CodeOf(err)
	m.mu.Lock()
	m.needRejoin = true
	switch code {
	case errs.IllegalGeneration, errs.UnknownMemberID, errs.FencedInstanceID:
		// The member is out of its generation: what it owns is lost.
		m.lost, m.gen = true, -1
		if code != errs.IllegalGeneration {
			m.id = ""
		}
	}
	m.mu.Unlock()
	if m.g.life.Err() != nil {
		return errors.New("group consumer is closed")
	}
	switch code {
	case errs.RebalanceInProgress, errs.IllegalGeneration, errs.UnknownMemberID, errs.MemberIDRequired:
		return nil // join again at once
	}
	if errs.IsRetriable(err) || code == errs.RequestTimedOut {
		if !m.retry.wait(ctx) {
			return ctx.Err()
		}
		return nil
	}
	// Wait before the next Poll tries again.
	m.retry.next()
	return err
}

// joined applies a completed rebalance: partitions no longer assigned are
// revoked (cooperative) and new ones are taken. A cooperative member that
// revoked partitions rejoins at once so they can go to their new owners
// (KIP-429's second rebalance).
func (m *classicMember) joined(ctx context.Context, r joinResult) {
	m.mu.Lock()
	m.id, m.gen, m.protocol = r.id, r.gen, r.protocol
	m.mu.Unlock()
	m.counts, m.countsChecked = r.counts, time.Now()
	owned := map[TopicPartition]bool{}
	for _, tp := range m.g.owned() {
		owned[tp] = true
	}
	revoked := diffTPs(owned, r.assignment)
	added := diffTPs(r.assignment, owned)
	// The session is kept while the revoked partitions are committed and
	// handed back: a slow commit must not expire the member, whose
	// partitions would then move without it.
	m.startHeartbeat(r.id, r.gen)
	m.g.revokePartitions(ctx, revoked)
	if len(revoked) > 0 && m.cooperative {
		m.requestRejoin("revoked partitions for their new owners")
	}
	m.g.gainPartitions(ctx, added)
	m.g.tel.rebalanced(ctx, m.joinStart)
}

// joinAndSync runs one JoinGroup (again with the member id the coordinator
// hands out to a first join, KIP-394) and one SyncGroup; the leader
// computes every member's assignment in between.
func (m *classicMember) joinAndSync(ctx context.Context, id string, gen int32, topics []string, owned map[string][]int32, reason string) joinResult {
	cfg := m.g.cfg
	req := &groupv1.JoinGroupRequest{
		GroupId: cfg.GroupID, SessionTimeoutMs: int32(cfg.SessionTimeout.Milliseconds()),
		RebalanceTimeoutMs: int32(cfg.RebalanceTimeout.Milliseconds()), MemberId: id,
		GroupInstanceId: cfg.InstanceID, ProtocolType: "consumer", Reason: reason,
	}
	for _, a := range cfg.Assignors {
		req.Protocols = append(req.Protocols, &groupv1.JoinGroupProtocol{
			Name: a.Name(), Metadata: assign.EncodeSubscription(a, topics, owned, gen, ""),
		})
	}
	var resp *groupv1.JoinGroupResponse
	for attempt := 0; ; attempt++ {
		var err error
		resp, err = m.join(ctx, req)
		if err != nil && req.MemberId == "" && resp.GetMemberId() != "" && attempt == 0 {
			// KIP-394: the first join only learns the member id.
			req.MemberId = resp.GetMemberId()
			m.mu.Lock()
			m.id = req.MemberId
			m.mu.Unlock()
			continue
		}
		if err != nil {
			return joinResult{err: err}
		}
		break
	}
	var assignments []*groupv1.SyncGroupAssignment
	var counts map[string]int32
	if resp.GetLeader() == resp.GetMemberId() {
		var err error
		if assignments, counts, err = m.lead(ctx, resp); err != nil {
			return joinResult{err: err}
		}
	}
	sync := &groupv1.SyncGroupRequest{
		GroupId: cfg.GroupID, GenerationId: resp.GetGenerationId(), MemberId: resp.GetMemberId(),
		GroupInstanceId: cfg.InstanceID, ProtocolType: "consumer", ProtocolName: resp.GetProtocolName(),
		Assignments: assignments,
	}
	sctx, span := m.g.tel.span(ctx, "group.sync", cfg.GroupID, attribute.String("member", resp.GetMemberId()),
		attribute.Int("generation", int(resp.GetGenerationId())), attribute.String("protocol", resp.GetProtocolName()))
	var sresp *groupv1.SyncGroupResponse
	sctx, cancel := m.callCtx(sctx)
	defer cancel()
	err := m.g.c.onGroupCoordinator(sctx, cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.SyncGroup(ctx, sync)
		if err != nil {
			return nil, err
		}
		sresp = r
		return r.GetError(), nil
	})
	endSpan(span, err)
	if err != nil {
		return joinResult{err: fmt.Errorf("syncing group %q: %w", cfg.GroupID, err)}
	}
	decoded, err := assign.DecodeAssignment(sresp.GetAssignment())
	if err != nil {
		return joinResult{err: errs.New(errs.InconsistentGroupProtocol, "decoding the assignment of group %q: %w", cfg.GroupID, err)}
	}
	set := map[TopicPartition]bool{}
	for topic, parts := range decoded {
		for _, p := range parts {
			set[TopicPartition{topic, p}] = true
		}
	}
	return joinResult{id: resp.GetMemberId(), gen: resp.GetGenerationId(), protocol: resp.GetProtocolName(), assignment: set, counts: counts}
}

// callCtx bounds a JoinGroup or SyncGroup: the coordinator holds them until
// the join phase ends, up to the rebalance timeout.
// The deadline also keeps the coordinator lookup's own request timeout
// from cutting the call short.
func (m *classicMember) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.g.cfg.RebalanceTimeout+m.g.c.cfg.RequestTimeout)
}

// join sends one JoinGroup. On error, the response (if any) is returned too,
// for the member id it may carry.
func (m *classicMember) join(ctx context.Context, req *groupv1.JoinGroupRequest) (*groupv1.JoinGroupResponse, error) {
	jctx, span := m.g.tel.span(ctx, "group.join", req.GetGroupId(), attribute.String("member", req.GetMemberId()),
		attribute.String("reason", req.GetReason()))
	var resp *groupv1.JoinGroupResponse
	jctx, cancel := m.callCtx(jctx)
	defer cancel()
	err := m.g.c.onGroupCoordinator(jctx, req.GetGroupId(), func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.JoinGroup(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		return r.GetError(), nil
	})
	if resp != nil {
		span.SetAttributes(attribute.String("member", resp.GetMemberId()), attribute.Int("generation", int(resp.GetGenerationId())),
			attribute.Bool("leader", resp.GetLeader() != "" && resp.GetLeader() == resp.GetMemberId()))
	}
	endSpan(span, err)
	if err != nil {
		return resp, fmt.Errorf("joining group %q: %w", req.GetGroupId(), err)
	}
	return resp, nil
}

// lead runs the assignor the coordinator chose over every member's
// subscription and returns the assignments to send with SyncGroup.
func (m *classicMember) lead(ctx context.Context, resp *groupv1.JoinGroupResponse) ([]*groupv1.SyncGroupAssignment, map[string]int32, error) {
	var assignor assign.Assignor
	for _, a := range m.g.cfg.Assignors {
		if a.Name() == resp.GetProtocolName() {
			assignor = a
		}
	}
	if assignor == nil {
		return nil, nil, errs.New(errs.InconsistentGroupProtocol, "the coordinator chose assignor %q, which this member does not have", resp.GetProtocolName())
	}
	members := make([]assign.Member, 0, len(resp.GetMembers()))
	topics := map[string]bool{}
	for _, jm := range resp.GetMembers() {
		mem, err := assign.DecodeSubscription(jm.GetMemberId(), jm.GetGroupInstanceId(), jm.GetMetadata())
		if err != nil {
			return nil, nil, errs.New(errs.InconsistentGroupProtocol, "decoding the subscription of member %s: %w", jm.GetMemberId(), err)
		}
		members = append(members, mem)
		for _, t := range mem.Topics {
			topics[t] = true
		}
	}
	counts := map[string]int32{}
	for t := range topics {
		n, err := m.g.k.md.partitionsWait(ctx, t, m.g.k.cfg.APITimeout)
		switch {
		case errs.Is(err, errs.UnknownTopicOrPartition):
			continue // subscribed but not created (yet): nothing to assign
		case err != nil:
			return nil, nil, fmt.Errorf("partition count of topic %q for the assignment: %w", t, err)
		}
		counts[t] = n
	}
	plan := assignor.Assign(members, counts)
	out := make([]*groupv1.SyncGroupAssignment, 0, len(members))
	for _, mem := range members {
		out = append(out, &groupv1.SyncGroupAssignment{MemberId: mem.ID, Assignment: assign.EncodeAssignment(plan[mem.ID], nil)})
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("members", len(members)))
	return out, counts, nil
}

// startHeartbeat starts heartbeating in generation gen.
func (m *classicMember) startHeartbeat(id string, gen int32) {
	m.stopHeartbeat()
	ctx, cancel := context.WithCancel(m.g.life)
	done := make(chan struct{})
	m.mu.Lock()
	m.hbCancel, m.hbDone = cancel, done
	m.mu.Unlock()
	go func() {
		defer close(done)
		m.heartbeat(ctx, id, gen)
	}()
}

func (m *classicMember) stopHeartbeat() {
	m.mu.Lock()
	cancel, done := m.hbCancel, m.hbDone
	m.hbCancel, m.hbDone = nil, nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// heartbeat keeps the member's session alive. It goes on during a
// rebalance until the member rejoins (the coordinator answers
// REBALANCE_IN_PROGRESS and keeps the session), and stops when the
// coordinator no longer knows the member in this generation, or when the
// application has not polled within the rebalance timeout: then the member
// leaves, as Kafka's does, so the group is not held up by it.
func (m *classicMember) heartbeat(ctx context.Context, id string, gen int32) {
	cfg := m.g.cfg
	t := time.NewTicker(cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if m.g.pollOverdue(now) {
				m.pollTimedOut(ctx, id)
				return
			}
		}
		start := time.Now()
		req := &groupv1.HeartbeatRequest{GroupId: cfg.GroupID, GenerationId: gen, MemberId: id, GroupInstanceId: cfg.InstanceID}
		hctx, cancel := context.WithTimeout(ctx, cfg.SessionTimeout)
		err := m.g.c.onGroupCoordinator(hctx, cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
			r, err := gc.Heartbeat(ctx, req)
			if err != nil {
				return nil, err
			}
			return r.GetError(), nil
		})
		cancel()
		if ctx.Err() != nil {
			return
		}
		code := errs.CodeOf(err)
		switch code {
		case errs.RebalanceInProgress:
			// Heartbeats go on until Poll rejoins; only the first answer
			// that asks for it gets a span.
			m.mu.Lock()
			first := !m.needRejoin
			m.mu.Unlock()
			if first {
				m.traceHeartbeat(ctx, start, id, gen, code)
			}
			m.requestRejoin("the coordinator started a rebalance")
		case errs.IllegalGeneration, errs.UnknownMemberID, errs.FencedInstanceID:
			m.traceHeartbeat(ctx, start, id, gen, code)
			m.markLost(code)
			return
		}
		// Other failures (no coordinator for now, a timeout) are retried on
		// the next tick; the coordinator's answer then says whether the
		// session survived.
	}
}

// traceHeartbeat records a span for a heartbeat whose answer starts a
// rebalance; routine heartbeats are not traced.
func (m *classicMember) traceHeartbeat(ctx context.Context, start time.Time, id string, gen int32, code errs.Code) {
	_, span := m.g.tel.tracer.Start(ctx, "group.heartbeat", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("group", m.g.cfg.GroupID), attribute.String("member", id),
			attribute.Int("generation", int(gen)), attribute.String("answer", errs.Name(code))))
	span.End()
}

// pollTimedOut leaves the group because the application stopped polling
// (max.poll.interval.ms); a static member only stops heartbeating, and its
// session expires.
func (m *classicMember) pollTimedOut(ctx context.Context, id string) {
	m.g.logWarn("leaving the group: Poll was not called within the rebalance timeout",
		fmt.Errorf("no Poll for more than %v", m.g.cfg.RebalanceTimeout))
	if m.g.cfg.InstanceID == "" {
		_ = m.sendLeave(ctx, id, "consumer poll timeout has expired") // the session expires anyway if it fails
	}
	m.mu.Lock()
	m.lost, m.needRejoin, m.gen = true, true, -1
	m.reason = "rejoining after a poll timeout"
	m.mu.Unlock()
}

// leave stops heartbeats and leaves the group; a static member keeps its
// membership until its session expires (KIP-345).
func (m *classicMember) leave(ctx context.Context) error {
	m.stopHeartbeat()
	m.mu.Lock()
	id := m.id
	m.gen = -1
	m.mu.Unlock()
	// A member between generations still holds its id in the group, so it
	// leaves too.
	if m.g.cfg.InstanceID != "" || id == "" {
		return nil
	}
	return m.sendLeave(ctx, id, "the consumer is closing")
}

func (m *classicMember) sendLeave(ctx context.Context, id, reason string) error {
	req := &groupv1.LeaveGroupRequest{GroupId: m.g.cfg.GroupID, Members: []*groupv1.LeavingMember{{MemberId: id, Reason: reason}}}
	err := m.g.c.onGroupCoordinator(ctx, m.g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.LeaveGroup(ctx, req)
		if err != nil {
			return nil, err
		}
		if e := r.GetError(); e != nil {
			return e, nil
		}
		for _, res := range r.GetResults() {
			if e := res.GetError(); e != nil {
				return e, nil
			}
		}
		return nil, nil
	})
	switch errs.CodeOf(err) {
	case errs.UnknownMemberID:
		return nil // already gone, which is what leaving wants
	}
	if err != nil {
		return fmt.Errorf("leaving group %q: %w", m.g.cfg.GroupID, err)
	}
	return nil
}
