package consumer

import (
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"time"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/planted"
)

// Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
const (
	joinEpoch        int32 = 0
	leaveEpoch       int32 = -1
	staticLeaveEpoch int32 = -2
)

// Config holds a group's settings.
type Config struct {
	// SessionTimeout is group.consumer.session.timeout.ms: a member silent
	// this long is removed. Default 45s.
	SessionTimeout time.Duration
	// HeartbeatInterval is group.consumer.heartbeat.interval.ms, sent to
	// members. Default 5s.
	HeartbeatInterval time.Duration
	// DefaultAssignor is the server assignor used when members name none:
	// "uniform" (Kafka's default) or "range".
	DefaultAssignor string
	// MaxSize is group.consumer.max.size; 0 means unlimited.
	MaxSize int
}

// withDefaults fills unset fields with Kafka's defaults.
func (c Config) withDefaults() Config {
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if _, ok := Assignors()[c.DefaultAssignor]; !ok {
		c.DefaultAssignor = UniformAssignorName
	}
	return c
}

// Topics is the cluster's topic view the group resolves subscriptions
// against.
type Topics interface {
	// Partitions returns the partition count of topic, 0 if it is unknown.
	Partitions(topic string) int32
	// Names lists every topic, for regex subscriptions.
	Names() []string
}

// Group is the state of one consumer-protocol (KIP-848) group: members,
// the group epoch, the target assignment and each member's current
// assignment. It does no I/O and takes no locks: the caller serialises calls
// per group.
//
// Invariants (checked by the property tests):
//   - owner holds every partition some member owns (assigned or pending
//     revocation), and a partition has at most one owner.
//   - targetEpoch == groupEpoch after every call (the target is computed
//     eagerly when the epoch is bumped).
//   - a member's epoch never decreases while it is a member.
type Group struct {
	id  string
	cfg Config

	members map[string]*member
	static  map[string]string // instance id -> member id

	groupEpoch  int32
	targetEpoch int32
	target      map[string]map[string][]int32 // member id -> topic -> partitions
	assignor    string                        // assignor of the last target

	// owner maps topic -> partition -> the member owning it.
	owner map[string]map[int32]string
	// partitions is the subscription metadata: the partition count of every
	// existing topic some member subscribes to.
	partitions map[string]int32
	// regexTopics holds the topics each subscribed regex matched when last
	// resolved.
	regexTopics map[string][]string
	// subs caches the union of the members' subscribed topics; nil when a
	// subscription, a member or a regex resolution changed.
	subs map[string]bool

	newMemberID func() string
}

// NewGroup returns an empty group.
func NewGroup(id string, cfg Config) *Group {
	return &Group{
		id:          id,
		cfg:         cfg.withDefaults(),
		members:     make(map[string]*member),
		static:      make(map[string]string),
		target:      make(map[string]map[string][]int32),
		owner:       make(map[string]map[int32]string),
		partitions:  make(map[string]int32),
		regexTopics: make(map[string][]string),
		newMemberID: randomMemberID,
	}
}

// randomMemberID returns a random UUID (version 4) string, the shape Kafka
// clients use for member ids.
func randomMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Heartbeat handles one ConsumerGroupHeartbeat of the group.
//
// owned_partitions is read as the member's complete owned set on every
// heartbeat: proto3 cannot tell an empty list from an absent one, and
// treating an empty list as "unchanged" would make a member that revoked
// everything unable to say so. A client must therefore send what it owns on
// every heartbeat; a partition it leaves out counts as released.
//
// topics may be nil when the caller has no topic view; the group then keeps
// the partition counts it saw last.
//
// subscribed_topic_names and subscribed_topic_regex replace the
// subscription when either is set; when both are empty the subscription is
// unchanged (to drop every topic, a member leaves). rebalance_timeout_ms and
// server_assignor 0/empty after the join mean unchanged.
func (g *Group) Heartbeat(req *groupv1.ConsumerGroupHeartbeatRequest, topics Topics, now time.Time) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	if err := g.validate(req); err != nil {
		return nil, err
	}
	switch req.GetMemberEpoch() {
	case leaveEpoch, staticLeaveEpoch:
		return g.leave(req, topics, now)
	case joinEpoch:
		return g.join(req, topics, now)
	default:
		return g.heartbeat(req, topics, now)
	}
}

// validate checks the request fields (Kafka's
// throwIfConsumerGroupHeartbeatRequestIsInvalid).
func (g *Group) validate(req *groupv1.ConsumerGroupHeartbeatRequest) error {
	if req.GetGroupId() == "" {
		return errs.Invalid(errs.InvalidRequest, "group_id", "must be set")
	}
	if req.GetGroupId() != g.id {
		return errs.Invalid(errs.InvalidRequest, "group_id", "is %q but the request reached group %q", req.GetGroupId(), g.id)
	}
	epoch := req.GetMemberEpoch()
	if epoch < staticLeaveEpoch {
		return errs.Invalid(errs.InvalidRequest, "member_epoch", "%d is not valid: use 0 to join, -1 to leave, -2 for a static member's temporary leave, or the current epoch", epoch)
	}
	if req.GetRebalanceTimeoutMs() < 0 {
		return errs.Invalid(errs.InvalidRequest, "rebalance_timeout_ms", "must not be negative, got %d", req.GetRebalanceTimeoutMs())
	}
	if epoch != joinEpoch && req.GetMemberId() == "" {
		return errs.Invalid(errs.InvalidRequest, "member_id", "must be set with member epoch %d; only a join (epoch 0) may leave it empty", epoch)
	}
	if epoch == staticLeaveEpoch && req.GetInstanceId() == "" {
		return errs.Invalid(errs.InvalidRequest, "instance_id", "must be set with member epoch -2 (a temporary leave is for static members); use -1 to leave")
	}
	if epoch == joinEpoch {
		if req.GetRebalanceTimeoutMs() == 0 {
			return errs.Invalid(errs.InvalidRequest, "rebalance_timeout_ms", "must be set when joining (the client's max.poll.interval.ms)")
		}
		if len(req.GetSubscribedTopicNames()) == 0 && req.GetSubscribedTopicRegex() == "" {
			return errs.Invalid(errs.InvalidRequest, "subscribed_topic_names", "subscribed_topic_names or subscribed_topic_regex must be set when joining")
		}
		if len(req.GetOwnedPartitions()) > 0 {
			return errs.Invalid(errs.InvalidRequest, "owned_partitions", "must be empty when joining: a member joins with no partitions")
		}
	}
	for i, name := range req.GetSubscribedTopicNames() {
		if name == "" {
			return errs.Invalid(errs.InvalidRequest, "subscribed_topic_names", "entry %d is empty", i)
		}
	}
	if re := req.GetSubscribedTopicRegex(); re != "" {
		if _, err := compileRegex(re); err != nil {
			return errs.Invalid(errs.InvalidRequest, "subscribed_topic_regex", "%q is not a valid RE2 expression: %v", re, err)
		}
	}
	if a := req.GetServerAssignor(); a != "" {
		if _, ok := Assignors()[a]; !ok {
			return errs.New(errs.UnsupportedAssignor, "server assignor %q is not supported; use %q or %q", a, UniformAssignorName, RangeAssignorName)
		}
	}
	return nil
}

// join handles member epoch 0: a new member, a static member's rejoin, or a
// member that lost its state (or our response) and asks again.
func (g *Group) join(req *groupv1.ConsumerGroupHeartbeatRequest, topics Topics, now time.Time) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	id := req.GetMemberId()
	if id == "" {
		id = g.newMemberID()
	}
	m := g.members[id]
	added := false
	instance := req.GetInstanceId()
	if instance != "" {
		if prevID, ok := g.static[instance]; ok && prevID != id {
			prev := g.members[prevID]
			if !prev.leftStatic {
				return nil, errs.New(errs.UnreleasedInstanceID,
					"instance id %q is still used by live member %s of group %s; stop that consumer (or let its session of %s end) before starting another with the same group.instance.id",
					instance, prevID, g.id, g.cfg.SessionTimeout)
			}
			if m != nil {
				// The joining id is itself a member: drop it so that the
				// static identity's state wins.
				g.removeMember(m)
				added = true
			}
			m = g.replaceStatic(prev, id)
		}
	}
	if m == nil {
		if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
			return nil, errs.New(errs.GroupMaxSizeReached,
				"group %s already has %d members, its group.consumer.max.size; stop a member or raise the limit",
				g.id, len(g.members))
		}
		m = &member{id: id, assigned: make(partitionEpochs), pending: make(partitionEpochs)}
		g.members[id] = m
		added = true // A new member changes what everyone gets.
	}
	m.leftStatic = false
	if instance != "" {
		m.instanceID = instance
		g.static[instance] = id
	}
	owned := map[tp]bool{} // validate checked that a join owns nothing.
	g.update(m, req, owned, topics, now, added)
	return g.respond(m, owned, true, nil), nil
}

// replaceStatic moves a static member's state to a new member id (KIP-345
// semantics in KIP-848: the new id takes over epoch and assignment).
func (g *Group) replaceStatic(prev *member, id string) *member {
	m := *prev
	m.id = id
	m.leftStatic = false
	delete(g.members, prev.id)
	g.members[id] = &m
	if t, ok := g.target[prev.id]; ok {
		delete(g.target, prev.id)
		g.target[id] = t
	}
	g.setOwnership(prev.id, []partitionEpochs{prev.assigned, prev.pending}, &m)
	return &m
}

// heartbeat handles a heartbeat with the member's current epoch.
func (g *Group) heartbeat(req *groupv1.ConsumerGroupHeartbeatRequest, topics Topics, now time.Time) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	m, err := g.memberFor(req)
	if err != nil {
		return nil, err
	}
	epoch := req.GetMemberEpoch()
	owned := ownedSet(req.GetOwnedPartitions())
	switch {
	case m.leftStatic:
		return nil, errs.New(errs.FencedMemberEpoch, "member %s left group %s temporarily (epoch -2); rejoin with member epoch 0", m.id, g.id)
	case epoch > m.epoch:
		return nil, errs.New(errs.FencedMemberEpoch, "member %s of group %s sent epoch %d but its epoch is %d; drop its partitions and rejoin with member epoch 0", m.id, g.id, epoch, m.epoch)
	case epoch < m.epoch:
		// KIP-848 tolerates the previous epoch when the response that
		// bumped it was lost, as long as the member owns nothing it should
		// not.
		if (epoch != m.prevEpoch || !subsetOf(owned, m.assigned)) && !planted.On(planted.StaleGenerationAccepted) {
			return nil, errs.New(errs.FencedMemberEpoch, "member %s of group %s sent stale epoch %d but its epoch is %d; drop its partitions and rejoin with member epoch 0", m.id, g.id, epoch, m.epoch)
		}
	}
	before := m.assigned
	g.update(m, req, owned, topics, now, false)
	return g.respond(m, owned, false, before), nil
}

// memberFor finds the member a heartbeat or leave names, checking its
// instance id.
func (g *Group) memberFor(req *groupv1.ConsumerGroupHeartbeatRequest) (*member, error) {
	if inst := req.GetInstanceId(); inst != "" {
		if cur, ok := g.static[inst]; ok && cur != req.GetMemberId() {
			return nil, errs.New(errs.FencedInstanceID, "instance id %q of group %s now belongs to member %s, not %s; another consumer with the same group.instance.id replaced this one", inst, g.id, cur, req.GetMemberId())
		}
	}
	m := g.members[req.GetMemberId()]
	if m == nil {
		return nil, errs.New(errs.UnknownMemberID, "member %s is not in group %s (it left or its session ended); rejoin with member epoch 0", req.GetMemberId(), g.id)
	}
	if inst := req.GetInstanceId(); inst != "" && m.instanceID != inst {
		return nil, errs.New(errs.FencedInstanceID, "member %s of group %s has instance id %q, not %q", m.id, g.id, m.instanceID, inst)
	}
	return m, nil
}

// leave handles member epochs -1 (leave) and -2 (a static member's
// temporary leave, which keeps its partitions for the session timeout).
func (g *Group) leave(req *groupv1.ConsumerGroupHeartbeatRequest, topics Topics, now time.Time) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	m, err := g.memberFor(req)
	if err != nil {
		return nil, err
	}
	resp := &groupv1.ConsumerGroupHeartbeatResponse{
		MemberId:            m.id,
		MemberEpoch:         req.GetMemberEpoch(),
		HeartbeatIntervalMs: int32(g.cfg.HeartbeatInterval / time.Millisecond),
	}
	if req.GetMemberEpoch() == staticLeaveEpoch {
		if m.instanceID == "" {
			return nil, errs.Invalid(errs.InvalidRequest, "instance_id", "member %s is not static; use member epoch -1 to leave", m.id)
		}
		m.leftStatic = true
		m.revokeDeadline = time.Time{}
		m.sessionDeadline = now.Add(g.cfg.SessionTimeout)
		return resp, nil
	}
	g.removeMember(m)
	g.refreshMetadata(topics)
	g.groupEpoch++
	g.computeTarget()
	return resp, nil
}

// update applies a heartbeat's fields to m, refreshes the group's view of
// its topics, recomputes the target when the group epoch moved, and
// reconciles m. changed says the membership changed already; the group
// epoch moves by one per heartbeat whatever changed.
func (g *Group) update(m *member, req *groupv1.ConsumerGroupHeartbeatRequest, owned map[tp]bool, topics Topics, now time.Time, changed bool) {
	m.sessionDeadline = now.Add(g.cfg.SessionTimeout)
	if r := req.GetRackId(); r != "" {
		m.rack = r
	}
	if t := req.GetRebalanceTimeoutMs(); t > 0 {
		m.rebalanceTimeout = time.Duration(t) * time.Millisecond
	}
	if a := req.GetServerAssignor(); a != "" && a != m.assignor {
		m.assignor = a
		changed = true
	}
	names := req.GetSubscribedTopicNames()
	regex := req.GetSubscribedTopicRegex()
	if len(names) > 0 || regex != "" {
		sorted := slices.Clone(names)
		sort.Strings(sorted)
		sorted = slices.Compact(sorted)
		if !slices.Equal(sorted, m.topicNames) || regex != m.regex {
			m.topicNames = sorted
			m.regex = regex
			m.re = nil
			if regex != "" {
				m.re, _ = compileRegex(regex) // validate compiled it already.
				if _, ok := g.regexTopics[regex]; !ok {
					g.regexTopics[regex] = resolveRegex(m.re, topics)
				}
			}
			g.dropUnusedRegexes()
			changed = true
		}
	}
	if g.refreshMetadata(topics) {
		changed = true
	}
	if changed {
		g.groupEpoch++
	}
	g.computeTarget()
	g.reconcile(m, owned, now)
}

// reconcile runs m's reconciliation step and keeps the owner map and the
// rebalance-timeout deadline in step with it.
func (g *Group) reconcile(m *member, owned map[tp]bool, now time.Time) {
	old := []partitionEpochs{m.assigned, m.pending}
	if !m.reconcile(g.target[m.id], g.targetEpoch, owned, g.holder) {
		return
	}
	g.setOwnership(m.id, old, m)
	if m.state == stateUnrevoked {
		// Kafka's rebalance timeout: the member must revoke within its
		// max.poll.interval.ms or it is fenced. Each new revocation
		// restarts the clock, as Kafka reschedules the timer.
		m.revokeDeadline = now.Add(m.rebalanceTimeout)
	} else {
		m.revokeDeadline = time.Time{}
	}
}

// respond builds the heartbeat response. The assignment is sent when the
// member joined, when its assigned partitions changed (before is what they
// were), or when what it reports owning differs from what it was told to own
// (Kafka resends the full assignment then). The second case matters even
// when the report matches the new assignment: a member still applying an
// older one must learn that it was replaced.
func (g *Group) respond(m *member, owned map[tp]bool, joined bool, before partitionEpochs) *groupv1.ConsumerGroupHeartbeatResponse {
	resp := &groupv1.ConsumerGroupHeartbeatResponse{
		MemberId:            m.id,
		MemberEpoch:         m.epoch,
		HeartbeatIntervalMs: int32(g.cfg.HeartbeatInterval / time.Millisecond),
	}
	if joined || !sameKeys(before, m.assigned) || !m.assigned.sameSet(owned) {
		resp.Assignment = &groupv1.Assignment{TopicPartitions: m.assigned.proto()}
	}
	return resp
}

// holder returns the member owning topic/p, or "".
func (g *Group) holder(topic string, p int32) string {
	return g.owner[topic][p]
}

// setOwnership moves the owner map from what id held (old: its previous
// assigned and pending sets) to what m holds now (nothing when m is nil).
func (g *Group) setOwnership(id string, old []partitionEpochs, m *member) {
	for _, pe := range old {
		for topic, ps := range pe {
			for p := range ps {
				if g.owner[topic][p] == id {
					delete(g.owner[topic], p)
				}
			}
			if len(g.owner[topic]) == 0 {
				delete(g.owner, topic)
			}
		}
	}
	if m == nil {
		return
	}
	for _, pe := range []partitionEpochs{m.assigned, m.pending} {
		for topic, ps := range pe {
			for p := range ps {
				if g.owner[topic] == nil {
					g.owner[topic] = make(map[int32]string)
				}
				if o, ok := g.owner[topic][p]; ok && o != m.id {
					// Reconciliation never hands out a held partition; if
					// this fires the state machine has a bug.
					panic(fmt.Sprintf("consumer group %s: partition %s-%d given to %s while %s owns it", g.id, topic, p, m.id, o))
				}
				g.owner[topic][p] = m.id
			}
		}
	}
}

// removeMember deletes m and frees its partitions. The caller bumps the
// group epoch and recomputes the target.
func (g *Group) removeMember(m *member) {
	delete(g.members, m.id)
	delete(g.target, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	g.setOwnership(m.id, []partitionEpochs{m.assigned, m.pending}, nil)
	g.dropUnusedRegexes()
}

// dropUnusedRegexes forgets resolved regexes no member uses any more. It is
// called whenever a subscription or the membership changed, so it also
// drops the cached union of subscriptions.
func (g *Group) dropUnusedRegexes() {
	g.subs = nil
	used := make(map[string]bool)
	for _, m := range g.members {
		if m.regex != "" {
			used[m.regex] = true
		}
	}
	for re := range g.regexTopics {
		if !used[re] {
			delete(g.regexTopics, re)
		}
	}
}
