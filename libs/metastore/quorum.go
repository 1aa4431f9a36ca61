package metastore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"sync"
	"time"
)

// probeTimeout bounds how long a member may take to answer a status probe.
// Members on a healthy quorum answer in about a millisecond; a paused
// process accepts the connection but never answers.
const probeTimeout = 500 * time.Millisecond

// MemberStatus is one etcd member as the local member sees it.
type MemberStatus struct {
	Name string
	ID   uint64
	// Self is the local member.
	Self bool
	// Reachable: the member answered a status probe (the local member
	// always is).
	Reachable bool
	// Leader: the member leads the raft quorum (as it says itself, or, for
	// an unreachable member, as the local member last heard).
	Leader    bool
	Learner   bool
	RaftIndex uint64
}

// QuorumStatus is the health of the embedded etcd quorum.
type QuorumStatus struct {
	// Members lists every configured member, sorted by name.
	Members []MemberStatus
	// HasLeader: the local member follows (or is) a raft leader.
	HasLeader bool
	// Voters is the number of voting members; a majority is Voters/2+1.
	Voters int
	// ReachableVoters is how many voting members answered.
	ReachableVoters int
}

// HasMajority reports whether a majority of the voting members answered and
// the quorum has a raft leader, which is what metadata writes need.
func (q QuorumStatus) HasMajority() bool {
	return q.HasLeader && q.ReachableVoters >= q.Voters/2+1
}

// Majority reports whether a majority of the voting members answered,
// whether or not a raft leader is elected yet.
func (q QuorumStatus) Majority() bool { return q.ReachableVoters >= q.Voters/2+1 }

// HasLeader reports whether the local embedded member knows a raft leader.
// A member without a leader for longer than an election timeout cannot
// reach a majority. Always true for an external etcd, whose health this
// process does not see.
func (s *Store) HasLeader() bool {
	return s.etcd == nil || s.etcd.Server.Leader() != 0
}

// RaftTerm is the local member's raft term (0 for an external etcd). It
// grows with every raft election the member takes part in or learns of.
func (s *Store) RaftTerm() uint64 {
	if s.etcd == nil {
		return 0
	}
	return s.etcd.Server.Term()
}

// ElectionTimeout is the etcd election timeout, or 0 for an external etcd.
func (s *Store) ElectionTimeout() time.Duration {
	if s.etcd == nil {
		return 0
	}
	return time.Duration(s.cfg.ElectionMs) * time.Millisecond
}

// Quorum probes every member of the embedded etcd cluster (in parallel,
// each for at most probeTimeout) and reports which answer. It reads the
// membership from the local member, so it answers without a quorum. For an
// external etcd it returns an empty status with HasLeader true.
func (s *Store) Quorum(ctx context.Context) QuorumStatus {
	if s.etcd == nil {
		return QuorumStatus{HasLeader: true}
	}
	self := uint64(s.etcd.Server.MemberID())
	leader := uint64(s.etcd.Server.Leader())
	members := s.etcd.Server.Cluster().Members()
	out := QuorumStatus{HasLeader: leader != 0, Members: make([]MemberStatus, len(members))}
	var wg sync.WaitGroup
	for i, m := range members {
		ms := MemberStatus{Name: m.Name, ID: uint64(m.ID), Self: uint64(m.ID) == self, Learner: m.IsLearner, Leader: uint64(m.ID) == leader}
		if ms.Name == "" {
			ms.Name = fmt.Sprintf("%x", uint64(m.ID)) // a member that never started has no name yet
		}
		out.Members[i] = ms
		if ms.Self {
			out.Members[i].Reachable = true
			out.Members[i].RaftIndex = s.etcd.Server.CommittedIndex()
			continue
		}
		if len(m.ClientURLs) == 0 {
			continue // never started: cannot be reached
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if !accepts(pctx, m.ClientURLs[0]) {
				return
			}
			st, err := s.Client.Status(pctx, m.ClientURLs[0])
			if err != nil {
				return
			}
			out.Members[i].Reachable = true
			out.Members[i].Leader = st.Leader == uint64(m.ID)
			out.Members[i].RaftIndex = st.RaftIndex
		})
	}
	wg.Wait()
	for _, m := range out.Members {
		if m.Learner {
			continue
		}
		out.Voters++
		if m.Reachable {
			out.ReachableVoters++
		}
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	return out
}

// accepts reports whether a member's client URL accepts a TCP connection. A
// dead member refuses at once, while clientv3 would wait for it until the
// probe's deadline (its calls wait for a ready connection).
func accepts(ctx context.Context, clientURL string) bool {
	u, err := url.Parse(clientURL)
	if err != nil {
		return false
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}
	_ = conn.Close() // only the connect mattered
	return true
}
