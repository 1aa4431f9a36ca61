package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
const (
	epochJoin        = 0
	epochLeave       = -1
	epochLeaveStatic = -2
)

// nextMember is a member of a consumer-protocol group (KIP-848). A
// background loop sends ConsumerGroupHeartbeat: it joins with epoch 0,
// reports the subscription and the partitions the member owns, and learns
// the target assignment the coordinator computed. Poll reconciles: it
// revokes partitions that left the target (committing first), takes the new
// ones, and has the loop report the owned partitions right away, since the
// coordinator hands a partition to its next owner only once the previous
// owner said it let go.
type nextMember struct {
	g *GroupConsumer

	// Poll's goroutine only.
	started bool

	send   chan struct{} // heartbeat now
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	id       string
	epoch    int32
	inGroup  bool
	interval time.Duration
	// target is the latest assignment from the coordinator; pending until
	// Poll reconciled it.
	target  map[TopicPartition]bool
	pending bool
	// applying is the target Poll is applying now (partitions being
	// revoked and taken), nil otherwise.
	applying map[TopicPartition]bool
	targetAt time.Time
	// owned is what the member owns after the last reconciliation, as
	// reported to the coordinator.
	owned []TopicPartition
	// lost is set when the coordinator fenced the member: Poll drops every
	// partition before the loop joins again with epoch 0.
	lost bool
	// fences counts markLost calls: a heartbeat answer to a request sent
	// before the latest fence belongs to the old membership and is dropped
	// (Poll may already have cleared lost when it arrives).
	fences int
	// fatal is an error the coordinator answered that retrying cannot cure;
	// the next Poll returns it.
	fatal error
}

func newNextMember(g *GroupConsumer) *nextMember {
	return &nextMember{g: g, send: make(chan struct{}, 1), interval: g.cfg.HeartbeatInterval}
}

func (m *nextMember) fence() (string, string, int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id, m.g.cfg.InstanceID, m.epoch
}

func (m *nextMember) generation() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.inGroup {
		return -1
	}
	return m.epoch
}

// fenced drops the member's partitions after a commit found its epoch
// fenced; a stale epoch only means the next heartbeat brings a newer one.
func (m *nextMember) fenced(code errs.Code, _ int32) {
	switch code {
	case errs.FencedMemberEpoch, errs.UnknownMemberID:
		m.markLost(code)
	}
}

func (m *nextMember) markLost(code errs.Code) {
	m.mu.Lock()
	m.markLostLocked(code)
	m.mu.Unlock()
	m.g.wake()
}

// markLostSince marks the member lost unless a fence came after the one
// counted in fences: a heartbeat's fence then belongs to the membership
// the member has already left. It says whether it marked.
func (m *nextMember) markLostSince(fences int, code errs.Code) bool {
	m.mu.Lock()
	if m.fences != fences {
		m.mu.Unlock()
		return false
	}
	m.markLostLocked(code)
	m.mu.Unlock()
	m.g.wake()
	return true
}

func (m *nextMember) markLostLocked(code errs.Code) {
	m.lost, m.inGroup, m.pending, m.target = true, false, false, nil
	m.epoch = epochJoin
	m.fences++
	if code == errs.UnknownMemberID {
		m.id = ""
	}
}

func (m *nextMember) kick() {
	select {
	case m.send <- struct{}{}:
	default:
	}
}

// ensure starts the heartbeat loop on the first Poll and reconciles the
// owned partitions with the coordinator's target.
func (m *nextMember) ensure(ctx context.Context) error {
	if !m.started {
		m.started = true
		lctx, cancel := context.WithCancel(m.g.life)
		m.cancel, m.done = cancel, make(chan struct{})
		go func() {
			defer close(m.done)
			m.run(lctx)
		}()
	}
	m.mu.Lock()
	lost, fatal := m.lost, m.fatal
	m.fatal = nil
	m.mu.Unlock()
	if lost {
		m.g.losePartitions(ctx, m.g.owned())
		m.mu.Lock()
		m.lost, m.owned = false, nil
		m.mu.Unlock()
		m.kick()
	}
	if fatal != nil {
		return fatal
	}
	m.mu.Lock()
	if !m.pending {
		m.mu.Unlock()
		return nil
	}
	target := make(map[TopicPartition]bool, len(m.target))
	for tp := range m.target {
		target[tp] = true
	}
	m.pending = false
	m.applying = target
	at := m.targetAt
	m.mu.Unlock()
	owned := map[TopicPartition]bool{}
	for _, tp := range m.g.owned() {
		owned[tp] = true
	}
	m.g.revokePartitions(ctx, diffTPs(owned, target))
	m.g.gainPartitions(ctx, diffTPs(target, owned))
	m.mu.Lock()
	// A fence that came meanwhile supersedes this target.
	if !m.lost {
		m.owned = sortedTPs(target)
	}
	m.applying = nil
	m.mu.Unlock()
	m.kick()
	m.g.tel.rebalanced(ctx, at)
	return nil
}

// run heartbeats until ctx ends.
func (m *nextMember) run(ctx context.Context) {
	var b backoff
	for {
		m.mu.Lock()
		lost := m.lost
		m.mu.Unlock()
		if lost {
			// Rejoin only after Poll has dropped the lost partitions.
			select {
			case <-ctx.Done():
				return
			case <-m.send:
				continue
			}
		}
		if m.g.pollOverdue(time.Now()) {
			m.pollTimedOut(ctx)
			continue
		}
		wait := m.beat(ctx, &b)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.send:
		case <-t.C:
		}
		t.Stop()
	}
}

// request builds the next heartbeat. The subscription and the owned
// partitions are sent every time: the full state is always right, whatever
// the coordinator last saw.
func (m *nextMember) request(epoch int32) *groupv1.ConsumerGroupHeartbeatRequest {
	cfg := m.g.cfg
	m.mu.Lock()
	defer m.mu.Unlock()
	req := &groupv1.ConsumerGroupHeartbeatRequest{
		GroupId: cfg.GroupID, MemberId: m.id, MemberEpoch: epoch, InstanceId: cfg.InstanceID,
		RebalanceTimeoutMs: int32(cfg.RebalanceTimeout.Milliseconds()), ServerAssignor: cfg.ServerAssignor,
		SubscribedTopicNames: cfg.Topics, SubscribedTopicRegex: cfg.TopicPattern,
	}
	if epoch > 0 { // a join must come with nothing owned
		req.OwnedPartitions = topicPartitionsProto(m.reportedLocked())
		// Let the coordinator hold the answer while nothing changes, so a
		// new target reaches this member at once; the next heartbeat then
		// goes out as soon as the held one is answered (see beat).
		req.MaxWaitMs = int32(m.interval.Milliseconds())
	}
	return req
}

// reportedLocked is what a heartbeat reports as owned: the partitions the
// member holds, and also those of a target it received but Poll has not
// applied yet. The coordinator hands a partition on as soon as its owner's
// report leaves it out; a report built before Poll takes a new
// assignment's partitions must therefore already name them, or a
// partition this member is about to take could go to another member at the
// same time. Reporting more than is held only makes the coordinator wait
// for the next report.
func (m *nextMember) reportedLocked() []TopicPartition {
	if !m.pending && m.applying == nil {
		return m.owned
	}
	set := make(map[TopicPartition]bool, len(m.owned)+len(m.target)+len(m.applying))
	for _, tp := range m.owned {
		set[tp] = true
	}
	if m.pending {
		for tp := range m.target {
			set[tp] = true
		}
	}
	// A target Poll is applying now: its partitions are being taken.
	for tp := range m.applying {
		set[tp] = true
	}
	return sortedTPs(set)
}

// beat sends one heartbeat and returns how long to wait before the next.
func (m *nextMember) beat(ctx context.Context, b *backoff) time.Duration {
	m.mu.Lock()
	epoch, fences := m.epoch, m.fences
	m.mu.Unlock()
	req := m.request(epoch)
	start := time.Now()
	resp, kicked, err := m.callInterruptible(ctx, req)
	if ctx.Err() != nil {
		return 0
	}
	if kicked && err != nil {
		// A held heartbeat was cut short to report what Poll just
		// reconciled; a response lost that way is sent again on the next
		// one, which the coordinator accepts with the previous epoch.
		return 0
	}
	code := errs.CodeOf(err)
	switch {
	case err == nil:
		*b = backoff{}
		changed := resp.Assignment != nil
		m.mu.Lock()
		if m.lost || m.fences != fences {
			// A fence found by a commit or an offset fetch meanwhile wins,
			// even when Poll has already dropped the partitions: this
			// answer is the old membership's.
			m.mu.Unlock()
			return 0
		}
		m.id, m.epoch, m.inGroup = resp.GetMemberId(), resp.GetMemberEpoch(), true
		if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
			m.interval = time.Duration(ms) * time.Millisecond
		}
		if changed {
			m.target = assignmentSet(resp.GetAssignment())
			m.pending, m.targetAt = true, start
		}
		interval := m.interval
		m.mu.Unlock()
		if changed {
			m.traceHeartbeat(ctx, start, req, resp.GetMemberEpoch(), "assignment changed")
			m.g.wake()
		}
		// A coordinator that held the heartbeat (max_wait_ms) has already
		// spent the interval: go again at once. One that answered at once
		// (or a server without held heartbeats) gets the interval.
		if kicked || epoch == epochJoin || resp.GetMemberEpoch() != epoch {
			// After a join or an epoch bump (a coordinator answers those
			// at once, without holding), the next heartbeat goes now and
			// is held, so partitions their previous owners release reach
			// this member the moment they do.
			return 0
		}
		return max(interval-time.Since(start), 0)
	case code == errs.FencedMemberEpoch || code == errs.UnknownMemberID:
		if m.markLostSince(fences, code) {
			m.traceHeartbeat(ctx, start, req, epoch, errs.Name(code))
		}
		return 0
	case errs.IsRetriable(err) || code == errs.RequestTimedOut || code == errs.UnknownServerError:
		return b.next()
	default:
		m.mu.Lock()
		m.fatal = err
		interval := m.interval
		m.mu.Unlock()
		m.g.wake()
		return max(interval, b.next())
	}
}

// callInterruptible sends a heartbeat that the coordinator may hold (up to
// max_wait_ms) and cuts it short when Poll asks for a heartbeat now (after
// a revocation, the coordinator waits for the member to report it before it
// hands the partitions on). kicked says such a request came during the
// call: the next heartbeat is due at once.
func (m *nextMember) callInterruptible(ctx context.Context, req *groupv1.ConsumerGroupHeartbeatRequest) (*groupv1.ConsumerGroupHeartbeatResponse, bool, error) {
	if req.GetMaxWaitMs() <= 0 {
		resp, err := m.call(ctx, req)
		return resp, false, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := assignmentSet(&groupv1.Assignment{TopicPartitions: req.GetOwnedPartitions()})
	var kicked atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-m.send:
				// Only a release is worth cutting the held heartbeat short:
				// other members wait for it. A cut-short heartbeat may lose
				// an answer the coordinator already sent (it then accepts
				// the previous epoch only if what is reported is within the
				// new assignment), so taking partitions, which nobody waits
				// for, is reported by the next heartbeat in its turn.
				m.mu.Lock()
				released := m.lost || releasedAny(sent, m.reportedLocked())
				m.mu.Unlock()
				if !released {
					continue
				}
				kicked.Store(true)
				cancel()
				return
			case <-stop:
				return
			}
		}
	}()
	resp, err := m.call(cctx, req)
	close(stop)
	<-watched
	return resp, kicked.Load(), err
}

func (m *nextMember) call(ctx context.Context, req *groupv1.ConsumerGroupHeartbeatRequest) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	hctx, cancel := context.WithTimeout(ctx, m.g.c.cfg.RequestTimeout)
	defer cancel()
	var resp *groupv1.ConsumerGroupHeartbeatResponse
	err := m.g.c.onGroupCoordinator(hctx, m.g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.ConsumerGroupHeartbeat(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		return r.GetError(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat of group %q: %w", m.g.cfg.GroupID, err)
	}
	return resp, nil
}

// traceHeartbeat records a span for a heartbeat that changed the member's
// assignment or fenced it; routine heartbeats are not traced.
func (m *nextMember) traceHeartbeat(ctx context.Context, start time.Time, req *groupv1.ConsumerGroupHeartbeatRequest, epoch int32, outcome string) {
	_, span := m.g.tel.tracer.Start(ctx, "group.heartbeat", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("group", req.GetGroupId()), attribute.String("member", req.GetMemberId()),
			attribute.Int("epoch", int(epoch)), attribute.String("answer", outcome)))
	span.End()
}

// pollTimedOut leaves the group because the application stopped polling
// (max.poll.interval.ms); the next Poll drops the partitions as lost and
// joins again.
func (m *nextMember) pollTimedOut(ctx context.Context) {
	m.g.logWarn("leaving the group: Poll was not called within the rebalance timeout",
		fmt.Errorf("no Poll for more than %v", m.g.cfg.RebalanceTimeout))
	if err := m.sendLeave(ctx); err != nil {
		// The coordinator fences the member when its session expires anyway.
		m.g.logWarn("leaving the group after a poll timeout failed", err)
	}
	m.markLost(errs.FencedMemberEpoch)
}

// sendLeave tells the coordinator the member leaves (a static member:
// leaves for now, keeping its place until its session expires).
func (m *nextMember) sendLeave(ctx context.Context) error {
	m.mu.Lock()
	in := m.inGroup && m.id != ""
	m.mu.Unlock()
	if !in {
		return nil
	}
	epoch := int32(epochLeave)
	if m.g.cfg.InstanceID != "" {
		epoch = epochLeaveStatic
	}
	_, err := m.call(ctx, m.request(epoch))
	switch errs.CodeOf(err) {
	case errs.UnknownMemberID, errs.FencedMemberEpoch:
		return nil // already out of the group
	}
	return err
}

// leave stops the heartbeat loop and leaves the group.
// settle has nothing to wait for: the coordinator takes a commit of an
// older epoch for partitions the member still owns.
func (m *nextMember) settle(context.Context) bool { return false }

func (m *nextMember) leave(ctx context.Context) error {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
	err := m.sendLeave(ctx)
	m.mu.Lock()
	m.inGroup = false
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("leaving group %q: %w", m.g.cfg.GroupID, err)
	}
	return nil
}

// releasedAny reports whether a partition of sent is missing from now.
func releasedAny(sent map[TopicPartition]bool, now []TopicPartition) bool {
	have := make(map[TopicPartition]bool, len(now))
	for _, tp := range now {
		have[tp] = true
	}
	for tp := range sent {
		if !have[tp] {
			return true
		}
	}
	return false
}

func assignmentSet(a *groupv1.Assignment) map[TopicPartition]bool {
	out := map[TopicPartition]bool{}
	for _, tps := range a.GetTopicPartitions() {
		for _, p := range tps.GetPartitions() {
			out[TopicPartition{tps.GetTopic(), p}] = true
		}
	}
	return out
}

func topicPartitionsProto(tps []TopicPartition) []*groupv1.TopicPartitions {
	var out []*groupv1.TopicPartitions
	for _, tp := range tps {
		if n := len(out); n > 0 && out[n-1].Topic == tp.Topic {
			out[n-1].Partitions = append(out[n-1].Partitions, tp.Partition)
			continue
		}
		out = append(out, &groupv1.TopicPartitions{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	return out
}
