package consumer

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// snapshotVersion is the layout version of Snapshot's encoding.
const snapshotVersion = 1

// Snapshot is what a coordinator that takes a group over needs to go on
// without fencing its members: epochs, the target assignment, and each
// member's subscription and current assignment with the epochs the
// partitions were assigned in. Sessions and revocation deadlines are not
// kept: they restart when the group is restored.
type Snapshot struct {
	Version     int                           `json:"v"`
	GroupEpoch  int32                         `json:"group_epoch"`
	TargetEpoch int32                         `json:"target_epoch"`
	Assignor    string                        `json:"assignor,omitempty"`
	Target      map[string]map[string][]int32 `json:"target,omitempty"`
	Partitions  map[string]int32              `json:"partitions,omitempty"`
	RegexTopics map[string][]string           `json:"regex_topics,omitempty"`
	Members     []MemberSnapshot              `json:"members,omitempty"`
	_           struct{}                      `json:"-"`
}

// MemberSnapshot is one member in a Snapshot.
type MemberSnapshot struct {
	ID                 string                     `json:"id"`
	InstanceID         string                     `json:"instance_id,omitempty"`
	Rack               string                     `json:"rack,omitempty"`
	Epoch              int32                      `json:"epoch"`
	PrevEpoch          int32                      `json:"prev_epoch"`
	State              int                        `json:"state"`
	LeftStatic         bool                       `json:"left_static,omitempty"`
	RebalanceTimeoutMs int64                      `json:"rebalance_timeout_ms"`
	TopicNames         []string                   `json:"topics,omitempty"`
	Regex              string                     `json:"regex,omitempty"`
	Assignor           string                     `json:"assignor,omitempty"`
	Assigned           map[string]map[int32]int32 `json:"assigned,omitempty"`
	Pending            map[string]map[int32]int32 `json:"pending,omitempty"`
}

// Snapshot returns the group's persistent state.
func (g *Group) Snapshot() *Snapshot {
	s := &Snapshot{Version: snapshotVersion, GroupEpoch: g.groupEpoch, TargetEpoch: g.targetEpoch, Assignor: g.assignor,
		Target: g.target, Partitions: g.partitions, RegexTopics: g.regexTopics}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := g.members[id]
		s.Members = append(s.Members, MemberSnapshot{ID: m.id, InstanceID: m.instanceID, Rack: m.rack,
			Epoch: m.epoch, PrevEpoch: m.prevEpoch, State: int(m.state), LeftStatic: m.leftStatic,
			RebalanceTimeoutMs: m.rebalanceTimeout.Milliseconds(), TopicNames: m.topicNames, Regex: m.regex,
			Assignor: m.assignor, Assigned: m.assigned, Pending: m.pending})
	}
	return s
}

// Encode returns the snapshot's bytes.
func (s *Snapshot) Encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encoding a group snapshot: %v", err)) // maps of strings and ints always encode
	}
	return b
}

// DecodeSnapshot reads bytes Encode wrote.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decoding a consumer group snapshot: %w", err)
	}
	if s.Version != snapshotVersion {
		return nil, fmt.Errorf("consumer group snapshot version %d is not %d", s.Version, snapshotVersion)
	}
	return &s, nil
}

// Restore rebuilds a group from a snapshot as of now: every member gets a
// full session, and a member still revoking a full rebalance timeout.
func Restore(id string, cfg Config, s *Snapshot, now time.Time) (*Group, error) {
	g := NewGroup(id, cfg)
	g.groupEpoch, g.targetEpoch, g.assignor = s.GroupEpoch, s.TargetEpoch, s.Assignor
	if s.Target != nil {
		g.target = s.Target
	}
	if s.Partitions != nil {
		g.partitions = s.Partitions
	}
	if s.RegexTopics != nil {
		g.regexTopics = s.RegexTopics
	}
	for _, ms := range s.Members {
		if ms.ID == "" || ms.State < int(stateStable) || ms.State > int(stateUnreleased) {
			return nil, fmt.Errorf("consumer group %s snapshot: member %q has state %d", id, ms.ID, ms.State)
		}
		m := &member{id: ms.ID, instanceID: ms.InstanceID, rack: ms.Rack, epoch: ms.Epoch, prevEpoch: ms.PrevEpoch,
			state: memberState(ms.State), leftStatic: ms.LeftStatic, rebalanceTimeout: time.Duration(ms.RebalanceTimeoutMs) * time.Millisecond,
			topicNames: ms.TopicNames, regex: ms.Regex, assignor: ms.Assignor,
			assigned: partitionEpochs(ms.Assigned), pending: partitionEpochs(ms.Pending),
			sessionDeadline: now.Add(g.cfg.SessionTimeout)}
		if m.assigned == nil {
			m.assigned = make(partitionEpochs)
		}
		if m.pending == nil {
			m.pending = make(partitionEpochs)
		}
		if m.regex != "" {
			re, err := compileRegex(m.regex)
			if err != nil {
				return nil, fmt.Errorf("consumer group %s snapshot: member %s: %w", id, m.id, err)
			}
			m.re = re
		}
		if m.state == stateUnrevoked {
			m.revokeDeadline = now.Add(m.rebalanceTimeout)
		}
		for _, pe := range []partitionEpochs{m.assigned, m.pending} {
			for topic, ps := range pe {
				for p := range ps {
					if other, ok := g.owner[topic][p]; ok {
						return nil, fmt.Errorf("consumer group %s snapshot: %s-%d owned by both %s and %s", id, topic, p, other, m.id)
					}
					if g.owner[topic] == nil {
						g.owner[topic] = make(map[int32]string)
					}
					g.owner[topic][p] = m.id
				}
			}
		}
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
	}
	return g, nil
}
