package groupcoord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/planted"
)

// Classic group states, Kafka's names.
const (
	stateEmpty               = "Empty"
	statePreparingRebalance  = "PreparingRebalance"
	stateCompletingRebalance = "CompletingRebalance"
	stateStable              = "Stable"
	stateDead                = "Dead"
)

// classicGroup is a group on Kafka's classic protocol: members join
// (JoinGroup), the leader computes the assignment on the client and
// distributes it (SyncGroup), members heartbeat; any membership change
// starts a new generation.
type classicGroup struct {
	state        string
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	// pending are member ids handed out by a first JoinGroup (KIP-394) and
	// not yet used, with the time they expire.
	pending map[string]time.Time
	// static maps group.instance.id to the member id holding it (KIP-345).
	static     map[string]string
	stateSince time.Time
	// joinDeadline ends the join phase of a rebalance whoever has not
	// rejoined; joinNotBefore holds an empty group's first rebalance open
	// for group.initial.rebalance.delay.ms.
	joinDeadline, joinNotBefore time.Time
	rebalanceStart              time.Time
	rebalanceReason             string
}

// member is one classic member.
type member struct {
	id, instanceID, clientID, host string
	sessionTimeout                 time.Duration
	rebalanceTimeout               time.Duration
	protocolType                   string
	protocols                      []*groupv1.JoinGroupProtocol
	assignment                     []byte
	// joinWait receives the JoinGroup answer while the member's JoinGroup
	// call waits; syncWait likewise for SyncGroup.
	joinWait chan *groupv1.JoinGroupResponse
	syncWait chan *groupv1.SyncGroupResponse
	deadline time.Time
	isNew    bool
}

func newClassic(now time.Time) *classicGroup {
	return &classicGroup{state: stateEmpty, members: map[string]*member{}, pending: map[string]time.Time{},
		static: map[string]string{}, stateSince: now}
}

func (g *classicGroup) transition(state string, now time.Time) {
	g.state = state
	g.stateSince = now
}

// abortWaiters answers every waiting JoinGroup and SyncGroup with e.
func (g *classicGroup) abortWaiters(e *errs.Error) {
	for _, m := range g.members {
		if m.joinWait != nil {
			m.joinWait <- &groupv1.JoinGroupResponse{Error: e.Proto(), MemberId: m.id}
			m.joinWait = nil
		}
		if m.syncWait != nil {
			m.syncWait <- &groupv1.SyncGroupResponse{Error: e.Proto()}
			m.syncWait = nil
		}
	}
}

// restoreSessions gives members restored from the log a full session.
func (g *classicGroup) restoreSessions(now time.Time) {
	for _, m := range g.members {
		m.deadline = now.Add(m.sessionTimeout)
	}
}

// subscribedTopics returns the topics the members subscribe to, decoded
// from their consumer-protocol metadata; ok is false when some metadata
// cannot be read (then the group is treated as subscribed to everything).
func (g *classicGroup) subscribedTopics() (map[string]bool, bool) {
	out := map[string]bool{}
	if g.protocolType != "consumer" {
		return out, len(g.members) == 0
	}
	for _, m := range g.members {
		md := m.metadataFor(g.protocol)
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(md); err != nil {
			return nil, false
		}
		for _, t := range meta.Topics {
			out[t] = true
		}
	}
	return out, true
}

func (m *member) metadataFor(protocol string) []byte {
	for _, p := range m.protocols {
		if p.GetName() == protocol {
			return p.GetMetadata()
		}
	}
	return nil
}

func newMemberID(clientID string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	if clientID == "" {
		clientID = "member"
	}
	return clientID + "-" + hex.EncodeToString(b)
}

func clientHost(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// JoinGroup joins a member to a classic group and waits for the join phase
// of the rebalance to end.
func (r *GroupCoordinator) JoinGroup(ctx context.Context, req *groupv1.JoinGroupRequest) (*groupv1.JoinGroupResponse, error) {
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	fail := func(e *errs.Error) (*groupv1.JoinGroupResponse, error) {
		return &groupv1.JoinGroupResponse{Error: e.Proto(), MemberId: req.GetMemberId()}, nil
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return fail(e)
	}
	session := time.Duration(req.GetSessionTimeoutMs()) * time.Millisecond
	rebalance := time.Duration(req.GetRebalanceTimeoutMs()) * time.Millisecond
	if req.GetRebalanceTimeoutMs() <= 0 {
		rebalance = session // JoinGroup v0 semantics
	}
	switch {
	case session < r.cfg.MinSessionTimeout || session > r.cfg.MaxSessionTimeout:
		return fail(errs.Invalid(errs.InvalidSessionTimeout, "session_timeout_ms", "session timeout %d ms is outside the broker's [%d, %d] ms (group.min/max.session.timeout.ms)",
			req.GetSessionTimeoutMs(), r.cfg.MinSessionTimeout.Milliseconds(), r.cfg.MaxSessionTimeout.Milliseconds()))
	case req.GetProtocolType() == "" || len(req.GetProtocols()) == 0:
		return fail(errs.Invalid(errs.InconsistentGroupProtocol, "protocols", "a member must name its protocol type and at least one protocol"))
	}
	ctx, span := r.tracer.Start(ctx, "group.join")
	defer span.End()
	span.SetAttributes(attribute.String("group.id", req.GetGroupId()))

	now := r.now()
	s.mu.Lock()
	g := s.groupLocked(req.GetGroupId(), true)
	if g.consumer != nil && !g.consumer.Empty() {
		s.mu.Unlock()
		return fail(errs.New(errs.InconsistentGroupProtocol, "group %q uses the consumer protocol (ConsumerGroupHeartbeat); a classic member cannot join it while it has members", g.id))
	}
	if g.classic == nil {
		g.consumer = nil
		g.classic = newClassic(now)
	}
	c := g.classic
	if c.state == stateDead {
		s.mu.Unlock()
		return fail(errs.New(errs.CoordinatorNotAvailable, "group %q is being deleted", g.id))
	}
	if len(c.members) > 0 && (req.GetProtocolType() != c.protocolType || !supportsAll(c, req.GetProtocols())) {
		s.mu.Unlock()
		return fail(errs.New(errs.InconsistentGroupProtocol, "group %q: protocol type %q with protocols %v shares no protocol with the current members (type %q)",
			g.id, req.GetProtocolType(), protocolNames(req.GetProtocols()), c.protocolType))
	}
	memberID := req.GetMemberId()
	instance := req.GetGroupInstanceId()
	var m *member
	switch {
	case memberID == "" && instance != "":
		if old, ok := c.static[instance]; ok {
			var stored <-chan *groupv1.JoinGroupResponse
			m, stored = s.replaceStaticLocked(g, old, req, session, rebalance, ctx, now)
			if m == nil {
				// The group stays stable (KIP-345): answer once the new
				// member id is stored, so a coordinator that takes over
				// knows it.
				s.mu.Unlock()
				select {
				case resp := <-stored:
					return resp, nil
				case <-ctx.Done():
					return fail(errs.New(errs.RequestTimedOut, "the rejoin of static member %q was not stored before the call ended; join again", instance))
				}
			}
		} else {
			if e := r.checkSizeLocked(c); e != nil {
				s.mu.Unlock()
				return fail(e)
			}
			m = s.addMemberLocked(g, newMemberID(instance), req, session, rebalance, ctx, now)
		}
	case memberID == "":
		if e := r.checkSizeLocked(c); e != nil {
			s.mu.Unlock()
			return fail(e)
		}
		id := newMemberID(clientIDOf(ctx))
		c.pending[id] = now.Add(session)
		s.mu.Unlock()
		return &groupv1.JoinGroupResponse{MemberId: id,
			Error: errs.New(errs.MemberIDRequired, "join again with the member id %q (KIP-394)", id).Proto()}, nil
	default:
		if instance != "" {
			if holder, ok := c.static[instance]; ok && holder != memberID {
				s.mu.Unlock()
				return fail(errs.New(errs.FencedInstanceID, "group %q: instance id %q is held by a newer member", g.id, instance))
			}
		}
		if _, ok := c.pending[memberID]; ok {
			delete(c.pending, memberID)
			if e := r.checkSizeLocked(c); e != nil {
				s.mu.Unlock()
				return fail(e)
			}
			m = s.addMemberLocked(g, memberID, req, session, rebalance, ctx, now)
		} else if m = c.members[memberID]; m == nil {
			s.mu.Unlock()
			return fail(errs.New(errs.UnknownMemberID, "group %q has no member %q; join again with an empty member id", g.id, memberID))
		} else {
			changed := !sameProtocols(m.protocols, req.GetProtocols())
			m.protocols = req.GetProtocols()
			m.sessionTimeout, m.rebalanceTimeout = session, rebalance
			m.deadline = now.Add(session)
			if m.joinWait != nil {
				// A retried join replaces the one still waiting.
				m.joinWait <- &groupv1.JoinGroupResponse{Error: errs.New(errs.RebalanceInProgress, "a newer JoinGroup of this member replaced this one").Proto(), MemberId: m.id}
			}
			switch {
			case c.state == statePreparingRebalance:
			case c.state == stateStable && !changed && m.id != c.leader:
				// Kafka answers an unchanged follower's join in a stable
				// group with the current generation: no rebalance.
				resp := &groupv1.JoinGroupResponse{GenerationId: c.generation, ProtocolType: c.protocolType,
					ProtocolName: c.protocol, Leader: c.leader, MemberId: m.id}
				s.mu.Unlock()
				return resp, nil
			default:
				s.prepareRebalanceLocked(g, now, "member "+m.id+" rejoined")
			}
		}
	}
	ch := make(chan *groupv1.JoinGroupResponse, 1)
	m.joinWait = ch
	s.maybeCompleteJoinLocked(g, now)
	s.mu.Unlock()
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		s.mu.Lock()
		if m.joinWait == ch {
			m.joinWait = nil
		}
		s.mu.Unlock()
		return fail(errs.New(errs.RebalanceInProgress, "the JoinGroup call ended before the rebalance's join phase did; join again"))
	}
}

func (r *GroupCoordinator) checkSizeLocked(c *classicGroup) *errs.Error {
	if r.cfg.MaxSize > 0 && len(c.members)+len(c.pending) >= r.cfg.MaxSize {
		return errs.New(errs.GroupMaxSizeReached, "the group has reached group.max.size=%d members", r.cfg.MaxSize)
	}
	return nil
}

func (s *shard) addMemberLocked(g *group, id string, req *groupv1.JoinGroupRequest, session, rebalance time.Duration, ctx context.Context, now time.Time) *member {
	c := g.classic
	m := &member{id: id, instanceID: req.GetGroupInstanceId(), clientID: clientIDOf(ctx), host: clientHost(ctx),
		sessionTimeout: session, rebalanceTimeout: rebalance, protocolType: req.GetProtocolType(),
		protocols: req.GetProtocols(), deadline: now.Add(session), isNew: true}
	if len(c.members) == 0 {
		c.protocolType = req.GetProtocolType()
	}
	c.members[id] = m
	if m.instanceID != "" {
		c.static[m.instanceID] = id
	}
	if c.state == statePreparingRebalance && !c.joinNotBefore.IsZero() {
		// group.initial.rebalance.delay.ms: each new member during the
		// initial delay extends it, up to the rebalance timeout.
		c.joinNotBefore = minTime(now.Add(s.c.cfg.InitialRebalanceDelay), c.joinDeadline)
	}
	if c.state != statePreparingRebalance {
		s.prepareRebalanceLocked(g, now, "member "+id+" joined")
	}
	return m
}

// replaceStaticLocked handles a static member that restarted (KIP-345): it
// takes a new member id and the old one is fenced. When the group stays
// stable it returns a nil member and a channel that receives the JoinGroup
// answer once the new member id is stored (the change is undone if storing
// fails); otherwise it returns the member to wait in the rebalance with.
func (s *shard) replaceStaticLocked(g *group, oldID string, req *groupv1.JoinGroupRequest, session, rebalance time.Duration, ctx context.Context, now time.Time) (*member, <-chan *groupv1.JoinGroupResponse) {
	c := g.classic
	old := c.members[oldID]
	newID := newMemberID(req.GetGroupInstanceId())
	fenced := errs.New(errs.FencedInstanceID, "group %q: instance id %q rejoined as a new member", g.id, req.GetGroupInstanceId())
	if old.joinWait != nil {
		old.joinWait <- &groupv1.JoinGroupResponse{Error: fenced.Proto(), MemberId: oldID}
		old.joinWait = nil
	}
	if old.syncWait != nil {
		old.syncWait <- &groupv1.SyncGroupResponse{Error: fenced.Proto()}
		old.syncWait = nil
	}
	delete(c.members, oldID)
	m := *old
	m.id, m.clientID, m.host = newID, clientIDOf(ctx), clientHost(ctx)
	m.sessionTimeout, m.rebalanceTimeout, m.deadline = session, rebalance, now.Add(session)
	m.protocols = req.GetProtocols()
	c.members[newID] = &m
	c.static[m.instanceID] = newID
	wasLeader := c.leader == oldID
	if wasLeader {
		c.leader = newID
	}
	// As Kafka does, only a change of the protocol the group would select
	// rebalances a stable group; other new metadata is stored as is. A
	// restarted client's metadata differs in its bytes as a rule (the
	// generation it last saw, KIP-792), and a v9 leader checks its stored
	// assignment against its own plan itself (KIP-814).
	changed := selectProtocol(c) != c.protocol
	if c.state == stateStable && !changed {
		out := make(chan *groupv1.JoinGroupResponse, 1)
		gen := c.generation
		s.persistGroupLocked(g, func(err *errs.Error) {
			if err == nil {
				out <- &groupv1.JoinGroupResponse{GenerationId: c.generation, ProtocolType: c.protocolType,
					ProtocolName: c.protocol, Leader: c.leader, MemberId: newID}
				return
			}
			// Undo, unless the group moved on meanwhile: the old member
			// id stays the stored (and so the real) one.
			if g.classic == c && c.generation == gen && c.static[m.instanceID] == newID {
				delete(c.members, newID)
				c.members[oldID] = old
				c.static[m.instanceID] = oldID
				if wasLeader {
					c.leader = oldID
				}
			}
			out <- &groupv1.JoinGroupResponse{Error: err.Proto(), MemberId: ""}
		})
		return nil, out
	}
	if c.state != statePreparingRebalance {
		s.prepareRebalanceLocked(g, now, "static member "+m.instanceID+" rejoined with new metadata")
	}
	return &m, nil
}

// clientIDOf returns the client id a caller sent in the "client-id" gRPC
// metadata header (Kafka's client.id, shown by DescribeGroups), or "".
func clientIDOf(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("client-id"); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func supportsAll(c *classicGroup, protocols []*groupv1.JoinGroupProtocol) bool {
	for _, p := range protocols {
		all := true
		for _, m := range c.members {
			if m.metadataFor(p.GetName()) == nil && !hasProtocol(m, p.GetName()) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func hasProtocol(m *member, name string) bool {
	for _, p := range m.protocols {
		if p.GetName() == name {
			return true
		}
	}
	return false
}

func protocolNames(ps []*groupv1.JoinGroupProtocol) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.GetName()
	}
	return out
}

func sameProtocols(a, b []*groupv1.JoinGroupProtocol) bool {
	return slices.EqualFunc(a, b, func(x, y *groupv1.JoinGroupProtocol) bool {
		return x.GetName() == y.GetName() && string(x.GetMetadata()) == string(y.GetMetadata())
	})
}

// prepareRebalanceLocked starts a rebalance: members must rejoin within the
// largest rebalance timeout. Pending SyncGroup calls learn of it.
func (s *shard) prepareRebalanceLocked(g *group, now time.Time, reason string) {
	c := g.classic
	if c.state == stateCompletingRebalance {
		for _, m := range c.members {
			m.assignment = nil
			if m.syncWait != nil {
				m.syncWait <- &groupv1.SyncGroupResponse{Error: errs.New(errs.RebalanceInProgress, "group %q started another rebalance: %s", g.id, reason).Proto()}
				m.syncWait = nil
			}
		}
	}
	var longest time.Duration
	for _, m := range c.members {
		longest = max(longest, m.rebalanceTimeout)
	}
	c.joinDeadline = now.Add(longest)
	c.joinNotBefore = time.Time{}
	if c.state == stateEmpty {
		c.joinNotBefore = minTime(now.Add(s.c.cfg.InitialRebalanceDelay), c.joinDeadline)
	}
	if c.rebalanceStart.IsZero() {
		c.rebalanceStart = now
		c.rebalanceReason = reason
	}
	c.transition(statePreparingRebalance, now)
	s.c.logger.Debug("rebalance started", slog.String("group", g.id), slog.String("reason", reason), slog.Int("generation", int(c.generation)))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maybeCompleteJoinLocked ends the join phase when every member has
// rejoined (after the initial delay), or at the join deadline, removing
// members that did not rejoin. It then starts the next generation and
// answers every waiting JoinGroup.
func (s *shard) maybeCompleteJoinLocked(g *group, now time.Time) {
	c := g.classic
	if c.state != statePreparingRebalance {
		return
	}
	if now.Before(c.joinNotBefore) {
		return
	}
	all := true
	for _, m := range c.members {
		if m.joinWait == nil {
			all = false
			break
		}
	}
	if !all && now.Before(c.joinDeadline) {
		return
	}
	for id, m := range c.members {
		if m.joinWait == nil {
			s.removeMemberLocked(c, id)
		}
	}
	c.generation++
	duration := now.Sub(c.rebalanceStart)
	c.rebalanceStart = time.Time{}
	s.c.m.rebalances.Add(context.Background(), 1, protocolAttr("classic"))
	s.c.m.rebalanceTime.Record(context.Background(), duration.Seconds(), protocolAttr("classic"))
	if len(c.members) == 0 {
		c.protocol, c.leader = "", ""
		c.transition(stateEmpty, now)
		s.persistGroupLocked(g, nil)
		return
	}
	c.protocol = selectProtocol(c)
	if _, ok := c.members[c.leader]; !ok {
		ids := make([]string, 0, len(c.members))
		for id := range c.members {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		c.leader = ids[0]
	}
	c.transition(stateCompletingRebalance, now)
	var all2 []*groupv1.JoinGroupMember
	for _, id := range sortedIDs(c.members) {
		m := c.members[id]
		all2 = append(all2, &groupv1.JoinGroupMember{MemberId: m.id, GroupInstanceId: m.instanceID, Metadata: m.metadataFor(c.protocol)})
	}
	for _, m := range c.members {
		resp := &groupv1.JoinGroupResponse{GenerationId: c.generation, ProtocolType: c.protocolType,
			ProtocolName: c.protocol, Leader: c.leader, MemberId: m.id}
		if m.id == c.leader {
			resp.Members = all2
		}
		m.joinWait <- resp
		m.joinWait = nil
		m.isNew = false
		m.deadline = now.Add(m.sessionTimeout)
	}
	s.c.logger.Info("group rebalanced", slog.String("group", g.id), slog.Int("generation", int(c.generation)),
		slog.Int("members", len(c.members)), slog.String("protocol", c.protocol), slog.String("reason", c.rebalanceReason),
		durationAttr(duration))
}

func sortedIDs(members map[string]*member) []string {
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// selectProtocol picks, among the protocols every member supports, the one
// most members prefer (each votes for its first supported candidate), as
// Kafka does; ties go to the name first in sort order.
func selectProtocol(c *classicGroup) string {
	var candidates []string
	for _, p := range c.members[sortedIDs(c.members)[0]].protocols {
		all := true
		for _, m := range c.members {
			if !hasProtocol(m, p.GetName()) {
				all = false
				break
			}
		}
		if all {
			candidates = append(candidates, p.GetName())
		}
	}
	votes := map[string]int{}
	for _, m := range c.members {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.GetName()) {
				votes[p.GetName()]++
				break
			}
		}
	}
	best := ""
	for _, name := range candidates {
		if best == "" || votes[name] > votes[best] || (votes[name] == votes[best] && name < best) {
			best = name
		}
	}
	return best
}

func (s *shard) removeMemberLocked(c *classicGroup, id string) {
	m := c.members[id]
	if m == nil {
		return
	}
	delete(c.members, id)
	if m.instanceID != "" && c.static[m.instanceID] == id {
		delete(c.static, m.instanceID)
	}
	if c.leader == id {
		c.leader = ""
	}
}

// SyncGroup hands each member its assignment; the leader's call carries
// them all. The assignment is persisted before anyone is answered.
func (r *GroupCoordinator) SyncGroup(ctx context.Context, req *groupv1.SyncGroupRequest) (*groupv1.SyncGroupResponse, error) {
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	fail := func(e *errs.Error) (*groupv1.SyncGroupResponse, error) {
		return &groupv1.SyncGroupResponse{Error: e.Proto()}, nil
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return fail(e)
	}
	ctx, span := r.tracer.Start(ctx, "group.sync")
	defer span.End()
	span.SetAttributes(attribute.String("group.id", req.GetGroupId()))
	s.mu.Lock()
	g := s.groupLocked(req.GetGroupId(), false)
	m, e := s.classicMemberLocked(g, req.GetMemberId(), req.GetGroupInstanceId(), req.GetGenerationId())
	if e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	c := g.classic
	if (req.GetProtocolType() != "" && req.GetProtocolType() != c.protocolType) || (req.GetProtocolName() != "" && req.GetProtocolName() != c.protocol) {
		s.mu.Unlock()
		return fail(errs.New(errs.InconsistentGroupProtocol, "group %q uses protocol %s/%s, not %s/%s", g.id, c.protocolType, c.protocol, req.GetProtocolType(), req.GetProtocolName()))
	}
	switch c.state {
	case statePreparingRebalance:
		s.mu.Unlock()
		return fail(errs.New(errs.RebalanceInProgress, "group %q is rebalancing; join again", g.id))
	case stateStable:
		resp := &groupv1.SyncGroupResponse{ProtocolType: c.protocolType, ProtocolName: c.protocol, Assignment: m.assignment}
		m.deadline = r.now().Add(m.sessionTimeout)
		s.mu.Unlock()
		return resp, nil
	}
	// CompletingRebalance.
	ch := make(chan *groupv1.SyncGroupResponse, 1)
	if m.syncWait != nil {
		m.syncWait <- &groupv1.SyncGroupResponse{Error: errs.New(errs.RebalanceInProgress, "a newer SyncGroup of this member replaced this one").Proto()}
	}
	m.syncWait = ch
	m.deadline = r.now().Add(m.sessionTimeout)
	if m.id == c.leader {
		assignments := map[string][]byte{}
		for _, a := range req.GetAssignments() {
			if _, ok := c.members[a.GetMemberId()]; ok {
				assignments[a.GetMemberId()] = a.GetAssignment()
			}
		}
		gen := c.generation
		for id, mm := range c.members {
			mm.assignment = assignments[id]
		}
		s.persistGroupLocked(g, func(err *errs.Error) {
			if g.classic != c || c.generation != gen || c.state != stateCompletingRebalance {
				return
			}
			if err != nil {
				for _, mm := range c.members {
					mm.assignment = nil
					if mm.syncWait != nil {
						mm.syncWait <- &groupv1.SyncGroupResponse{Error: err.Proto()}
						mm.syncWait = nil
					}
				}
				s.prepareRebalanceLocked(g, r.now(), "the assignment could not be stored: "+err.Message)
				return
			}
			now := r.now()
			c.transition(stateStable, now)
			for _, mm := range c.members {
				// A member's session runs from the moment it has its
				// assignment: a follower that waited in SyncGroup for a
				// slow leader was not heartbeating meanwhile.
				mm.deadline = now.Add(mm.sessionTimeout)
				if mm.syncWait != nil {
					mm.syncWait <- &groupv1.SyncGroupResponse{ProtocolType: c.protocolType, ProtocolName: c.protocol, Assignment: mm.assignment}
					mm.syncWait = nil
				}
			}
		})
	}
	s.mu.Unlock()
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		s.mu.Lock()
		if m.syncWait == ch {
			m.syncWait = nil
		}
		s.mu.Unlock()
		return fail(errs.New(errs.RebalanceInProgress, "the SyncGroup call ended before the leader's assignment was stored; join again"))
	}
}

// classicMemberLocked checks a member's identity and generation.
func (s *shard) classicMemberLocked(g *group, memberID, instanceID string, generation int32) (*member, *errs.Error) {
	if g == nil || g.classic == nil || g.classic.state == stateDead {
		return nil, errs.New(errs.UnknownMemberID, "group has no member %q; join first", memberID)
	}
	c := g.classic
	if instanceID != "" {
		if holder, ok := c.static[instanceID]; ok && holder != memberID {
			return nil, errs.New(errs.FencedInstanceID, "group %q: instance id %q is held by a newer member", g.id, instanceID)
		}
	}
	m := c.members[memberID]
	if m == nil {
		return nil, errs.New(errs.UnknownMemberID, "group %q has no member %q; join again with an empty member id", g.id, memberID)
	}
	if generation != c.generation && !(generation < c.generation && planted.On(planted.StaleGenerationAccepted)) {
		return nil, errs.New(errs.IllegalGeneration, "group %q is at generation %d, not %d; join again", g.id, c.generation, generation)
	}
	return m, nil
}

// Heartbeat keeps a member's session and tells it when to rejoin.
func (r *GroupCoordinator) Heartbeat(ctx context.Context, req *groupv1.HeartbeatRequest) (*groupv1.HeartbeatResponse, error) {
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return &groupv1.HeartbeatResponse{Error: e.Proto()}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(req.GetGroupId(), false)
	m, e := s.classicMemberLocked(g, req.GetMemberId(), req.GetGroupInstanceId(), req.GetGenerationId())
	if e != nil {
		return &groupv1.HeartbeatResponse{Error: e.Proto()}, nil
	}
	m.deadline = r.now().Add(m.sessionTimeout)
	if g.classic.state == statePreparingRebalance {
		_, span := r.tracer.Start(ctx, "group.heartbeat.rebalance")
		span.SetAttributes(attribute.String("group.id", g.id))
		span.End()
		return &groupv1.HeartbeatResponse{Error: errs.New(errs.RebalanceInProgress, "group %q is rebalancing; join again", g.id).Proto()}, nil
	}
	return &groupv1.HeartbeatResponse{}, nil
}

// LeaveGroup removes members, by member id or by static instance id.
func (r *GroupCoordinator) LeaveGroup(ctx context.Context, req *groupv1.LeaveGroupRequest) (*groupv1.LeaveGroupResponse, error) {
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return &groupv1.LeaveGroupResponse{Error: e.Proto()}, nil
	}
	if len(req.GetMembers()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "members", "name at least one leaving member")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(req.GetGroupId(), false)
	resp := &groupv1.LeaveGroupResponse{}
	now := r.now()
	removed := false
	for _, lm := range req.GetMembers() {
		res := &groupv1.LeaveGroupResult{MemberId: lm.GetMemberId(), GroupInstanceId: lm.GetGroupInstanceId()}
		resp.Results = append(resp.Results, res)
		if g == nil || g.classic == nil {
			res.Error = errs.New(errs.UnknownMemberID, "group %q has no classic member %q", req.GetGroupId(), lm.GetMemberId()).Proto()
			continue
		}
		c := g.classic
		id := lm.GetMemberId()
		if lm.GetGroupInstanceId() != "" {
			holder, ok := c.static[lm.GetGroupInstanceId()]
			switch {
			case !ok:
				res.Error = errs.New(errs.UnknownMemberID, "group %q has no member with instance id %q", g.id, lm.GetGroupInstanceId()).Proto()
				continue
			case id != "" && holder != id:
				res.Error = errs.New(errs.FencedInstanceID, "group %q: instance id %q is held by member %q, not %q", g.id, lm.GetGroupInstanceId(), holder, id).Proto()
				continue
			}
			id = holder
		}
		if _, ok := c.pending[id]; ok {
			delete(c.pending, id)
			continue
		}
		m := c.members[id]
		if m == nil {
			res.Error = errs.New(errs.UnknownMemberID, "group %q has no member %q", g.id, id).Proto()
			continue
		}
		gone := errs.New(errs.UnknownMemberID, "member %q left group %q", id, g.id)
		if m.joinWait != nil {
			m.joinWait <- &groupv1.JoinGroupResponse{Error: gone.Proto(), MemberId: id}
		}
		if m.syncWait != nil {
			m.syncWait <- &groupv1.SyncGroupResponse{Error: gone.Proto()}
		}
		s.removeMemberLocked(c, id)
		removed = true
	}
	if removed {
		c := g.classic
		if c.state == statePreparingRebalance {
			s.maybeCompleteJoinLocked(g, now)
		} else {
			s.prepareRebalanceLocked(g, now, "members left")
			s.maybeCompleteJoinLocked(g, now)
		}
	}
	return resp, nil
}

// classicTickLocked expires sessions and pending member ids and ends join
// phases whose deadline passed.
func (s *shard) classicTickLocked(g *group, now time.Time) {
	c := g.classic
	for id, until := range c.pending {
		if now.After(until) {
			delete(c.pending, id)
		}
	}
	var expired []string
	for id, m := range c.members {
		// A member waiting in JoinGroup is kept during the join phase
		// (its call is its heartbeat).
		if m.joinWait != nil && c.state == statePreparingRebalance {
			continue
		}
		if now.After(m.deadline) {
			expired = append(expired, id)
		}
	}
	for _, id := range expired {
		m := c.members[id]
		s.c.logger.Info("group member session expired", slog.String("group", g.id), slog.String("member", id), slog.String("instance", m.instanceID))
		if m.syncWait != nil {
			m.syncWait <- &groupv1.SyncGroupResponse{Error: errs.New(errs.UnknownMemberID, "member %q's session expired", id).Proto()}
			m.syncWait = nil
		}
		s.removeMemberLocked(c, id)
	}
	if len(expired) > 0 && c.state != statePreparingRebalance {
		s.prepareRebalanceLocked(g, now, "member sessions expired")
	}
	s.maybeCompleteJoinLocked(g, now)
}

// persistGroupLocked writes the group's metadata (Kafka's
// GroupMetadataValue) and runs done with the outcome under the shard lock.
func (s *shard) persistGroupLocked(g *group, done func(err *errs.Error)) {
	c := g.classic
	v := kmsg.NewGroupMetadataValue()
	v.ProtocolType = c.protocolType
	v.Generation = c.generation
	if c.protocol != "" {
		v.Protocol = kmsg.StringPtr(c.protocol)
	}
	if c.leader != "" {
		v.Leader = kmsg.StringPtr(c.leader)
	}
	v.CurrentStateTimestamp = c.stateSince.UnixMilli()
	if c.state == stateStable || c.state == stateCompletingRebalance {
		for _, id := range sortedIDs(c.members) {
			m := c.members[id]
			vm := kmsg.NewGroupMetadataValueMember()
			vm.MemberID, vm.ClientID, vm.ClientHost = m.id, m.clientID, m.host
			if m.instanceID != "" {
				vm.InstanceID = kmsg.StringPtr(m.instanceID)
			}
			vm.RebalanceTimeoutMillis = int32(m.rebalanceTimeout.Milliseconds())
			vm.SessionTimeoutMillis = int32(m.sessionTimeout.Milliseconds())
			vm.Subscription = m.metadataFor(c.protocol)
			vm.Assignment = m.assignment
			v.Members = append(v.Members, vm)
		}
	}
	val := groupValue(&v)
	s.writeLocked([]kv{{groupKey(g.id), val}}, func(int64) {
		if done != nil {
			done(nil)
		}
	}, func(err *errs.Error) {
		s.c.logger.Warn("group metadata not stored", slog.String("group", g.id), slogErr(err))
		if done != nil {
			done(err)
		}
	})
}

// restoreClassic rebuilds a classic group from its stored metadata: a
// stable group with its members and assignments (members must heartbeat
// within their session, counted from the load), or an empty group.
func restoreClassic(v *kmsg.GroupMetadataValue, now time.Time) *classicGroup {
	c := newClassic(time.UnixMilli(v.CurrentStateTimestamp))
	c.protocolType, c.generation = v.ProtocolType, v.Generation
	if v.Protocol != nil {
		c.protocol = *v.Protocol
	}
	if v.Leader != nil {
		c.leader = *v.Leader
	}
	for _, vm := range v.Members {
		m := &member{id: vm.MemberID, clientID: vm.ClientID, host: vm.ClientHost,
			sessionTimeout: time.Duration(vm.SessionTimeoutMillis) * time.Millisecond, rebalanceTimeout: time.Duration(vm.RebalanceTimeoutMillis) * time.Millisecond,
			protocolType: v.ProtocolType, assignment: vm.Assignment, deadline: now.Add(time.Duration(vm.SessionTimeoutMillis) * time.Millisecond)}
		if m.rebalanceTimeout <= 0 {
			m.rebalanceTimeout = m.sessionTimeout
		}
		m.protocols = []*groupv1.JoinGroupProtocol{{Name: c.protocol, Metadata: vm.Subscription}}
		if vm.InstanceID != nil {
			m.instanceID = *vm.InstanceID
			c.static[m.instanceID] = m.id
		}
		c.members[m.id] = m
	}
	if len(c.members) > 0 {
		c.state = stateStable
	}
	return c
}
