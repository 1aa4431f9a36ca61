package consumer

import (
	"slices"
	"sort"
)

// Assignor computes a group's target assignment on the server (KIP-848
// server-side assignors). Assign must be deterministic: the same Spec always
// gives the same result, so a coordinator that replays its log or a test that
// repeats a run sees the same assignment.
type Assignor interface {
	// Name is the name members ask for in server_assignor.
	Name() string
	// Assign returns member id -> topic -> sorted partitions. Every member of
	// the spec has an entry (possibly empty); no partition goes to two
	// members; a member only gets partitions of topics it subscribes to.
	Assign(spec Spec) map[string]map[string][]int32
}

// Spec is the input of an Assignor.
type Spec struct {
	// Members sorted by ID.
	Members []MemberSpec
	// Partitions is the partition count of every topic some member
	// subscribes to and that exists.
	Partitions map[string]int32
}

// MemberSpec is one member as an Assignor sees it.
type MemberSpec struct {
	ID         string
	InstanceID string
	Rack       string
	// Topics is the set of topics the member subscribes to (resolved regex
	// included).
	Topics map[string]bool
	// Current is the member's previous target assignment, which the
	// assignors keep where balance allows (stickiness).
	Current map[string][]int32
}

// Names of the built-in assignors, as members send them.
const (
	UniformAssignorName = "uniform"
	RangeAssignorName   = "range"
)

// Assignors returns the built-in server assignors by name.
func Assignors() map[string]Assignor {
	return map[string]Assignor{
		UniformAssignorName: UniformAssignor{},
		RangeAssignorName:   RangeAssignor{},
	}
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

func tpLess(a, b tp) bool {
	if a.topic != b.topic {
		return a.topic < b.topic
	}
	return a.partition < b.partition
}

// sortedTopics returns the keys of m in order.
func sortedTopics[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// UniformAssignor spreads every partition over the members subscribed to its
// topic so that members with the same subscription differ by at most one
// partition, keeping current owners where that balance allows (like Kafka's
// UniformAssignor, which is its default).
type UniformAssignor struct{}

// Name implements Assignor.
func (UniformAssignor) Name() string { return UniformAssignorName }

// Assign implements Assignor. It first keeps every valid current partition,
// then gives each unowned partition to the least loaded eligible member, then
// moves partitions from the most to the least loaded eligible member until no
// move can narrow a gap of two or more. Each move lowers the sum of squared
// counts, so the loop ends; once no move is possible, two members with the
// same subscription cannot differ by more than one (the fuller one would
// hold a partition the other may take).
func (UniformAssignor) Assign(spec Spec) map[string]map[string][]int32 {
	n := len(spec.Members)
	// owned[i] is kept sorted by (topic, partition) so that moves take from
	// the end without scanning.
	owned := make([][]tp, n)
	taken := make(map[tp]bool)
	for i, m := range spec.Members {
		for _, topic := range sortedTopics(m.Current) {
			count, ok := spec.Partitions[topic]
			if !ok || !m.Topics[topic] {
				continue
			}
			ps := slices.Clone(m.Current[topic])
			slices.Sort(ps)
			for _, p := range ps {
				k := tp{topic, p}
				if p < 0 || p >= count || taken[k] {
					continue // Members sorted by id: the first claim wins.
				}
				taken[k] = true
				owned[i] = append(owned[i], k)
			}
		}
	}

	// Hand out unowned partitions, topic by topic, to the least loaded
	// eligible member (ties by member order).
	for _, topic := range sortedTopics(spec.Partitions) {
		var eligible []int
		for i, m := range spec.Members {
			if m.Topics[topic] {
				eligible = append(eligible, i)
			}
		}
		if len(eligible) == 0 {
			continue
		}
		for p := int32(0); p < spec.Partitions[topic]; p++ {
			k := tp{topic, p}
			if taken[k] {
				continue
			}
			best := eligible[0]
			for _, i := range eligible[1:] {
				if len(owned[i]) < len(owned[best]) {
					best = i
				}
			}
			taken[k] = true
			owned[best] = insertSorted(owned[best], k)
		}
	}

	// Balance: move one partition at a time from a fuller to an emptier
	// member that may take it, preferring the largest gap.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	for {
		sort.SliceStable(order, func(a, b int) bool { return len(owned[order[a]]) > len(owned[order[b]]) })
		moved := false
		for _, hi := range order {
			for j := n - 1; j >= 0 && !moved; j-- {
				lo := order[j]
				if len(owned[hi])-len(owned[lo]) < 2 {
					break
				}
				if at := movable(owned[hi], spec.Members[lo].Topics); at >= 0 {
					k := owned[hi][at]
					owned[hi] = slices.Delete(owned[hi], at, at+1)
					owned[lo] = insertSorted(owned[lo], k)
					moved = true
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			break
		}
	}

	out := make(map[string]map[string][]int32, n)
	for i, m := range spec.Members {
		byTopic := make(map[string][]int32)
		for _, k := range owned[i] {
			byTopic[k.topic] = append(byTopic[k.topic], k.partition)
		}
		out[m.ID] = byTopic
	}
	return out
}

// movable returns the index in from (sorted) of the partition a member
// subscribed to topics may take, or -1: the last one, so a member keeps its
// lower partitions and the choice is deterministic.
func movable(from []tp, topics map[string]bool) int {
	for i := len(from) - 1; i >= 0; i-- {
		if topics[from[i].topic] {
			return i
		}
	}
	return -1
}

// insertSorted inserts k into the sorted list.
func insertSorted(list []tp, k tp) []tp {
	at, _ := slices.BinarySearchFunc(list, k, func(a, b tp) int {
		if tpLess(a, b) {
			return -1
		}
		if tpLess(b, a) {
			return 1
		}
		return 0
	})
	return slices.Insert(list, at, k)
}

// RangeAssignor gives each member subscribed to a topic a contiguous range of
// its partitions: with n partitions and m members, every member gets n/m and
// n%m members one more, so members subscribed to co-partitioned topics get
// the same partition numbers of each (a join of topic A partition 3 with
// topic B partition 3 stays on one member). Like Kafka's server-side
// RangeAssignor it is sticky: a member keeps the current partitions that fit
// its quota, and only the rest is redistributed (see assignRangeTopic).
type RangeAssignor struct{}

// Name implements Assignor.
func (RangeAssignor) Name() string { return RangeAssignorName }

// Assign implements Assignor.
func (RangeAssignor) Assign(spec Spec) map[string]map[string][]int32 {
	out := make(map[string]map[string][]int32, len(spec.Members))
	for _, m := range spec.Members {
		out[m.ID] = make(map[string][]int32)
	}
	for _, topic := range sortedTopics(spec.Partitions) {
		count := spec.Partitions[topic]
		var members []MemberSpec
		for _, m := range spec.Members {
			if m.Topics[topic] {
				members = append(members, m)
			}
		}
		if len(members) == 0 || count <= 0 {
			continue
		}
		assignRangeTopic(topic, count, members, out)
	}
	for _, byTopic := range out {
		for _, ps := range byTopic {
			slices.Sort(ps)
		}
	}
	return out
}

// assignRangeTopic assigns one topic's partitions among members (sorted by
// id).
//
// Every member gets count/len(members) partitions, and count%len(members)
// of them one more: first those that already held more than that (so they
// keep it), then the others in member order. A member keeps its current
// partitions up to its quota; the freed and never-owned partitions then
// fill the members below quota in member order, lowest partitions first.
// Without current partitions this is exactly the range rule: contiguous
// ranges with the extra partitions on the first members. The result depends
// only on the partition numbers involved, so topics with the same count,
// the same subscribers and the same current assignment get the same
// partition numbers (co-partitioning survives rebalances).
func assignRangeTopic(topic string, count int32, members []MemberSpec, out map[string]map[string][]int32) {
	m := int32(len(members))
	base, extra := count/m, count%m
	current := make([][]int32, len(members))
	for i, ms := range members {
		for _, p := range ms.Current[topic] {
			if p >= 0 && p < count {
				current[i] = append(current[i], p)
			}
		}
		slices.Sort(current[i])
		current[i] = slices.Compact(current[i])
	}
	quota := make([]int32, len(members))
	for i := range members {
		quota[i] = base
	}
	for i := range members {
		if extra > 0 && int32(len(current[i])) > base {
			quota[i]++
			extra--
		}
	}
	for i := range members {
		if extra > 0 && quota[i] == base {
			quota[i]++
			extra--
		}
	}
	taken := make([]bool, count)
	got := make([][]int32, len(members))
	for i := range members {
		for _, p := range current[i] {
			if taken[p] || int32(len(got[i])) >= quota[i] {
				continue
			}
			taken[p] = true
			got[i] = append(got[i], p)
		}
	}
	next := int32(0)
	for i := range members {
		for int32(len(got[i])) < quota[i] {
			for taken[next] {
				next++
			}
			taken[next] = true
			got[i] = append(got[i], next)
		}
		if len(got[i]) > 0 {
			out[members[i].ID][topic] = got[i]
		}
	}
}
