package controller

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metastore"
)

// quorumProbeTTL is how long one probe of the quorum answers for, so a
// burst of calls costs one probe.
const quorumProbeTTL = 500 * time.Millisecond

// quorumView remembers the last quorum probe and every controller seen, so
// a dead member is still named by its node id and address after its
// presence key is gone.
type quorumView struct {
	mu      sync.Mutex
	at      time.Time
	last    metastore.QuorumStatus
	running chan struct{}                             // closed when the probe in flight ends
	byName  map[string]*controllerv1.ControllerMember // etcd member name -> last presence seen
}

// probe returns a quorum status no older than maxAge, probing if needed
// (one probe at a time; callers share it). With stale set, a status up to
// staleAge (2 s) old is returned at once and refreshed in the background, so a
// caller polling DescribeCluster does not wait for a paused member's probe
// timeout each time.
func (c *Controller) probe(ctx context.Context, maxAge time.Duration, stale bool) metastore.QuorumStatus {
	const staleAge = 2 * time.Second
	v := &c.quorum
	v.mu.Lock()
	age := time.Since(v.at)
	if age < maxAge {
		defer v.mu.Unlock()
		return v.last
	}
	done := v.running
	if done == nil {
		done = make(chan struct{})
		v.running = done
		go func() {
			// Not the caller's ctx: a background refresh outlives the call.
			q := c.store.Quorum(context.WithoutCancel(ctx))
			v.mu.Lock()
			v.last, v.at, v.running = q, time.Now(), nil
			v.mu.Unlock()
			close(done)
		}()
	}
	if stale && !v.at.IsZero() && age < staleAge {
		defer v.mu.Unlock()
		return v.last
	}
	v.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// remember records the controllers present in etcd.
func (c *Controller) remember(present []*controllerv1.ControllerMember) {
	c.quorum.mu.Lock()
	defer c.quorum.mu.Unlock()
	if c.quorum.byName == nil {
		c.quorum.byName = map[string]*controllerv1.ControllerMember{}
	}
	for _, m := range present {
		if m.GetEtcdMember() != "" {
			c.quorum.byName[m.GetEtcdMember()] = &controllerv1.ControllerMember{
				NodeId: m.GetNodeId(), Address: m.GetAddress(), EtcdMember: m.GetEtcdMember(),
			}
		}
	}
}

// nodeIDSuffix reads the node id from a default member name
// ("controller-<node-id>").
var nodeIDSuffix = regexp.MustCompile(`-(\d+)$`)

// seen returns what is known of the controller hosting an etcd member: its
// last presence, or a node id read from the default member name.
func (c *Controller) seen(name string) *controllerv1.ControllerMember {
	c.quorum.mu.Lock()
	m := c.quorum.byName[name]
	c.quorum.mu.Unlock()
	if m != nil {
		return proto.Clone(m).(*controllerv1.ControllerMember) // callers fill in state
	}
	out := &controllerv1.ControllerMember{NodeId: -1, EtcdMember: name}
	if sub := nodeIDSuffix.FindStringSubmatch(name); sub != nil {
		if id, err := strconv.ParseInt(sub[1], 10, 32); err == nil {
			out.NodeId = int32(id)
		}
	}
	return out
}

// quorumAlive reports whether the etcd quorum has a majority as far as the
// local member can tell: it knows a raft leader (a leader that loses its
// majority steps down within an election timeout, and so does a follower's
// idea of it), or a majority of the voting members answered the probe (a
// raft election is under way and will end with a leader). Either is enough:
// the local member is leaderless during every raft election, and a probe
// may miss a live member that is slow to answer on a loaded machine.
//
// While the quorum is alive the holder of the election key is the active
// controller, also in the middle of a raft election: no leader can expire
// its lease meanwhile, and a new leader renews every lease when it takes
// over. Only a lost majority (no leader and too few members answer) means
// that no controller is active.
func quorumAlive(q metastore.QuorumStatus) bool {
	return q.HasLeader || q.Majority()
}

// quorumLost returns CONTROLLER_QUORUM_UNAVAILABLE, naming the members this
// controller reaches and those it does not, when the etcd quorum has no
// majority (see quorumAlive); nil otherwise. Only a member without a raft
// leader probes the others.
func (c *Controller) quorumLost(ctx context.Context) error {
	if c.store == nil || c.store.HasLeader() {
		return nil
	}
	q := c.probe(ctx, quorumProbeTTL, false)
	q.HasLeader = false // the local member has none now, whatever the probe saw
	if quorumAlive(q) {
		return nil // an election under way: the usual answers apply
	}
	c.mu.RLock()
	if c.st != nil {
		present := c.st.controllers()
		c.mu.RUnlock()
		c.remember(present)
	} else {
		c.mu.RUnlock()
	}
	reachable, unreachable := c.memberIDs(q)
	return errs.New(errs.ControllerQuorumUnavailable,
		"controller quorum has no majority: reachable members %v, unreachable %v (%d of %d voting members answer, %d needed); metadata cannot change until enough controllers are back",
		reachable, unreachable, q.ReachableVoters, q.Voters, q.Voters/2+1)
}

// memberIDs lists the node ids of the reachable and unreachable voting
// members, sorted.
func (c *Controller) memberIDs(q metastore.QuorumStatus) (reachable, unreachable []int32) {
	for _, m := range q.Members {
		if m.Learner {
			continue
		}
		id := c.seen(m.Name).GetNodeId()
		if m.Reachable {
			reachable = append(reachable, id)
		} else {
			unreachable = append(unreachable, id)
		}
	}
	slices.Sort(reachable)
	slices.Sort(unreachable)
	return reachable, unreachable
}

// quorumStatus renders a probe for DescribeCluster.
func (c *Controller) quorumStatus(q metastore.QuorumStatus) *controllerv1.QuorumStatus {
	reachable, unreachable := c.memberIDs(q)
	return &controllerv1.QuorumStatus{
		HasMajority: q.HasMajority(),
		Voters:      int32(q.Voters),
		Reachable:   reachable,
		Unreachable: unreachable,
		AnsweredBy:  c.nodeID,
	}
}

// describeControllers lists every configured quorum member with its state
// and etcd role: present controllers from etcd, and members that do not
// answer as unreachable, so a dead or paused controller stays visible.
// activeID is the holder of the election key, or -1.
func (c *Controller) describeControllers(q metastore.QuorumStatus, present []*controllerv1.ControllerMember, activeID int32) []*controllerv1.ControllerMember {
	byMember := map[string]*controllerv1.ControllerMember{}
	for _, m := range present {
		byMember[m.GetEtcdMember()] = m
	}
	var out []*controllerv1.ControllerMember
	listed := map[int32]bool{}
	alive := quorumAlive(q)
	for _, em := range q.Members {
		m := byMember[em.Name]
		if m == nil {
			m = c.seen(em.Name)
		}
		m.EtcdLeader = em.Leader && em.Reachable
		switch {
		case !em.Reachable:
			m.State, m.EtcdRole = controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE, controllerv1.EtcdRole_ETCD_ROLE_UNSPECIFIED
		case em.Leader:
			m.EtcdRole = controllerv1.EtcdRole_ETCD_ROLE_LEADER
		case em.Learner:
			m.EtcdRole = controllerv1.EtcdRole_ETCD_ROLE_LEARNER
		default:
			m.EtcdRole = controllerv1.EtcdRole_ETCD_ROLE_FOLLOWER
		}
		// The holder of the election key is active while the quorum is
		// alive (its key expires with its lease if it is dead), also while
		// the local member waits for a raft election to end. A probe may be
		// up to 2 s old, so a just-resumed active member can show as
		// unreachable meanwhile.
		m.Active = alive && activeID >= 0 && m.GetNodeId() == activeID
		switch {
		case !em.Reachable:
		case m.Active:
			m.State = controllerv1.ControllerState_CONTROLLER_STATE_ACTIVE
		default:
			m.State = controllerv1.ControllerState_CONTROLLER_STATE_STANDBY
		}
		listed[m.GetNodeId()] = true
		out = append(out, m)
	}
	// Present controllers outside the membership (an external etcd, which
	// this process cannot probe).
	for _, m := range present {
		if listed[m.GetNodeId()] {
			continue
		}
		m.State = controllerv1.ControllerState_CONTROLLER_STATE_STANDBY
		if m.GetActive() {
			m.State = controllerv1.ControllerState_CONTROLLER_STATE_ACTIVE
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *controllerv1.ControllerMember) int { return int(a.GetNodeId()) - int(b.GetNodeId()) })
	return out
}
