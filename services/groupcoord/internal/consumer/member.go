package consumer

import (
	"regexp"
	"slices"
	"time"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
)

// memberState is where a member stands in its reconciliation (Kafka's
// MemberState).
type memberState int

const (
	// stable: the member has every partition of its target it can have.
	stateStable memberState = iota
	// unrevoked: the member must give up partitionsPendingRevocation before
	// it moves to the target epoch.
	stateUnrevoked
	// unreleased: the member is at the target epoch but waits for partitions
	// that another member still holds.
	stateUnreleased
)

func (s memberState) String() string {
	switch s {
	case stateUnrevoked:
		return "UNREVOKED_PARTITIONS"
	case stateUnreleased:
		return "UNRELEASED_PARTITIONS"
	default:
		return "STABLE"
	}
}

// partitionEpochs maps topic -> partition -> the group epoch at which the
// partition was assigned to the member (KIP-1251's assignment epoch).
type partitionEpochs map[string]map[int32]int32

func (pe partitionEpochs) has(topic string, p int32) bool {
	_, ok := pe[topic][p]
	return ok
}

func (pe partitionEpochs) put(topic string, p, epoch int32) {
	if pe[topic] == nil {
		pe[topic] = make(map[int32]int32)
	}
	pe[topic][p] = epoch
}

func (pe partitionEpochs) count() int {
	n := 0
	for _, ps := range pe {
		n += len(ps)
	}
	return n
}

// sameSet reports whether pe holds exactly the partitions of set.
func (pe partitionEpochs) sameSet(set map[tp]bool) bool {
	if pe.count() != len(set) {
		return false
	}
	for k := range set {
		if !pe.has(k.topic, k.partition) {
			return false
		}
	}
	return true
}

// sameKeys reports whether a and b hold the same partitions.
func sameKeys(a, b partitionEpochs) bool {
	if a.count() != b.count() {
		return false
	}
	for topic, ps := range a {
		for p := range ps {
			if !b.has(topic, p) {
				return false
			}
		}
	}
	return true
}

// proto renders the partitions as sorted TopicPartitions.
func (pe partitionEpochs) proto() []*groupv1.TopicPartitions {
	out := make([]*groupv1.TopicPartitions, 0, len(pe))
	for _, topic := range sortedTopics(pe) {
		if len(pe[topic]) == 0 {
			continue
		}
		ps := make([]int32, 0, len(pe[topic]))
		for p := range pe[topic] {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		out = append(out, &groupv1.TopicPartitions{Topic: topic, Partitions: ps})
	}
	return out
}

// member is one consumer-protocol member.
type member struct {
	id         string
	instanceID string
	rack       string

	// epoch is the member epoch; leftStatic (epoch -2 on the wire) keeps it
	// so that a rejoin can resume.
	epoch int32
	// prevEpoch is the epoch before the last bump: a heartbeat with it is
	// accepted when the response that carried the bump was lost (KIP-848).
	prevEpoch int32
	state     memberState
	// leftStatic is set when a static member left temporarily (epoch -2): it
	// keeps its partitions until its session ends or its instance rejoins.
	leftStatic bool

	rebalanceTimeout time.Duration
	// topicNames is sorted; regex is the source and re the compiled,
	// anchored form.
	topicNames []string
	regex      string
	re         *regexp.Regexp
	assignor   string

	assigned partitionEpochs
	pending  partitionEpochs // pending revocation, with their assignment epochs

	sessionDeadline time.Time
	// revokeDeadline is set while the member is in stateUnrevoked: past it
	// the member is fenced for not revoking within its rebalance timeout.
	revokeDeadline time.Time
}

// owns reports whether the member holds p (assigned or pending revocation).
func (m *member) owns(topic string, p int32) bool {
	return m.assigned.has(topic, p) || m.pending.has(topic, p)
}

// ownedSet parses owned_partitions into a set.
func ownedSet(req []*groupv1.TopicPartitions) map[tp]bool {
	out := make(map[tp]bool)
	for _, t := range req {
		for _, p := range t.GetPartitions() {
			out[tp{t.GetTopic(), p}] = true
		}
	}
	return out
}

// ownsAnyOf reports whether owned holds a partition of pe.
func ownsAnyOf(owned map[tp]bool, pe partitionEpochs) bool {
	for k := range owned {
		if pe.has(k.topic, k.partition) {
			return true
		}
	}
	return false
}

// subsetOf reports whether every partition of owned is in pe.
func subsetOf(owned map[tp]bool, pe partitionEpochs) bool {
	for k := range owned {
		if !pe.has(k.topic, k.partition) {
			return false
		}
	}
	return true
}

// reconcile moves m one step toward its target assignment, following
// KIP-848's CurrentAssignmentBuilder:
//
//   - Partitions the member keeps stay; partitions leaving its target become
//     pending revocation, and while the member still reports any of them in
//     owned_partitions it stays in its epoch (stateUnrevoked) and is told
//     only what it keeps.
//   - Once it no longer owns them, it moves to the target epoch and receives
//     the new partitions that no other member holds; partitions still held
//     elsewhere wait (stateUnreleased) and are handed over on a later
//     heartbeat after their owner let go.
//
// holder returns the member currently owning a partition, or "". owned is
// the member's report (its complete owned set; see Group.Heartbeat). It
// reports whether the member changed.
func (m *member) reconcile(target map[string][]int32, targetEpoch int32, owned map[tp]bool, holder func(string, int32) string) bool {
	switch m.state {
	case stateStable:
		if m.epoch == targetEpoch {
			return false
		}
	case stateUnrevoked:
		if ownsAnyOf(owned, m.pending) {
			return false
		}
	case stateUnreleased:
	}

	keep := make(partitionEpochs)
	revoke := make(partitionEpochs)
	inTarget := make(map[tp]bool)
	for topic, ps := range target {
		for _, p := range ps {
			inTarget[tp{topic, p}] = true
		}
	}
	for topic, ps := range m.assigned {
		for p, e := range ps {
			if inTarget[tp{topic, p}] {
				keep.put(topic, p, e)
			} else {
				revoke.put(topic, p, e)
			}
		}
	}
	var add []tp
	unreleased := false
	for k := range inTarget {
		if keep.has(k.topic, k.partition) {
			continue
		}
		if h := holder(k.topic, k.partition); h != "" && h != m.id {
			unreleased = true
			continue
		}
		add = append(add, k)
	}

	if len(revoke) > 0 && ownsAnyOf(owned, revoke) {
		m.state = stateUnrevoked
		m.assigned = keep
		m.pending = revoke
		return true
	}
	for _, k := range add {
		keep.put(k.topic, k.partition, targetEpoch)
	}
	m.assigned = keep
	m.pending = make(partitionEpochs)
	m.setEpoch(targetEpoch)
	if unreleased {
		m.state = stateUnreleased
	} else {
		m.state = stateStable
	}
	return true
}

func (m *member) setEpoch(e int32) {
	if e != m.epoch {
		m.prevEpoch = m.epoch
		m.epoch = e
	}
}

// subscribes reports whether the member subscribes to topic, by name or
// through its regex.
func (m *member) subscribes(topic string) bool {
	if _, ok := slices.BinarySearch(m.topicNames, topic); ok {
		return true
	}
	return m.re != nil && m.re.MatchString(topic)
}
