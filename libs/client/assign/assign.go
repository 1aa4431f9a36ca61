package assign

import (
	"cmp"
	"slices"
)

// RebalanceProtocol says how an assignor moves partitions: Eager (every
// member revokes everything before a rebalance) or Cooperative (KIP-429:
// only moved partitions are revoked, in a second rebalance).
type RebalanceProtocol int

const (
	// Eager members revoke every partition before they join a rebalance.
	Eager RebalanceProtocol = iota
	// Cooperative members keep consuming across a rebalance and revoke
	// only the partitions the new assignment takes away (KIP-429).
	Cooperative
)

// String returns the protocol's name as Kafka's RebalanceProtocol spells it.
func (p RebalanceProtocol) String() string {
	switch p {
	case Eager:
		return "EAGER"
	case Cooperative:
		return "COOPERATIVE"
	default:
		return "UNKNOWN"
	}
}

// Member is one group member as the group leader sees it in a JoinGroup
// response: its ids, its subscription and what it owned before this
// rebalance.
type Member struct {
	ID, InstanceID string
	// Topics is the subscription, sorted.
	Topics []string
	// Owned holds the partitions owned before this rebalance
	// (ConsumerMemberMetadata v1+ OwnedPartitions, or the sticky user data).
	Owned map[string][]int32
	// Generation is the generation Owned is from; -1 when unknown.
	Generation int32
	// Rack is the ConsumerMemberMetadata v3 rack, "" when unknown.
	Rack string
}

// Assignor computes a group's assignment on the leader, as Kafka's
// ConsumerPartitionAssignor does for the classic group protocol.
type Assignor interface {
	// Name returns Kafka's protocol name: "range", "roundrobin",
	// "sticky" or "cooperative-sticky".
	Name() string
	// Protocol says whether members rebalance eagerly or cooperatively.
	Protocol() RebalanceProtocol
	// Assign computes every member's assignment: member id -> topic ->
	// sorted partitions. partitions gives each topic's partition count
	// (topics missing from it are unknown and assigned nothing).
	// Deterministic for the same input, whatever the order of members.
	// Every member has an entry, empty when it is assigned nothing, so
	// the leader answers each member in SyncGroup.
	Assign(members []Member, partitions map[string]int32) map[string]map[string][]int32
}

// ByName returns the assignor Kafka knows by name ("range", "roundrobin",
// "sticky", "cooperative-sticky").
func ByName(name string) (Assignor, bool) {
	switch name {
	case rangeName:
		return Range(), true
	case roundRobinName:
		return RoundRobin(), true
	case stickyName:
		return Sticky(), true
	case cooperativeStickyName:
		return CooperativeSticky(), true
	default:
		return nil, false
	}
}

const (
	rangeName             = "range"
	roundRobinName        = "roundrobin"
	stickyName            = "sticky"
	cooperativeStickyName = "cooperative-sticky"
)

// memberCompare orders members as Kafka's AbstractPartitionAssignor.MemberInfo
// does: static members (with an instance id) first, by instance id, then
// dynamic members by member id. Member id breaks ties so that the order is
// total even for duplicated instance ids.
func memberCompare(a, b *Member) int {
	switch {
	case a.InstanceID != "" && b.InstanceID != "":
		if c := cmp.Compare(a.InstanceID, b.InstanceID); c != 0 {
			return c
		}
	case a.InstanceID != "":
		return -1
	case b.InstanceID != "":
		return 1
	}
	return cmp.Compare(a.ID, b.ID)
}

// group is the input of an assignment in a canonical form: members in
// Kafka's order with duplicated ids dropped, each subscription sorted,
// deduplicated and cut to topics with a known, positive partition count.
type group struct {
	members []Member
	// subs[i] is members[i]'s usable subscription, sorted.
	subs [][]string
	// topics lists every topic some member can be assigned, sorted.
	topics []string
	// consumers maps a topic to the indexes of its subscribers, in order.
	consumers map[string][]int
	counts    map[string]int32
}

func newGroup(members []Member, partitions map[string]int32) *group {
	sorted := slices.Clone(members)
	slices.SortStableFunc(sorted, func(a, b Member) int { return memberCompare(&a, &b) })
	// A member id must appear once; a broker never sends it twice, and
	// keeping the first copy in canonical order keeps the result
	// independent of the input order.
	seen := make(map[string]bool, len(sorted))
	sorted = slices.DeleteFunc(sorted, func(m Member) bool {
		dup := seen[m.ID]
		seen[m.ID] = true
		return dup
	})

	g := &group{
		members:   sorted,
		subs:      make([][]string, len(sorted)),
		consumers: make(map[string][]int),
		counts:    partitions,
	}
	for i := range sorted {
		sub := slices.Clone(sorted[i].Topics)
		slices.Sort(sub)
		sub = slices.Compact(sub)
		sub = slices.DeleteFunc(sub, func(t string) bool { return partitions[t] <= 0 })
		g.subs[i] = sub
		for _, t := range sub {
			g.consumers[t] = append(g.consumers[t], i)
		}
	}
	for t := range g.consumers {
		g.topics = append(g.topics, t)
	}
	slices.Sort(g.topics)
	return g
}

// emptyPlan returns a plan with an empty entry for every member.
func (g *group) emptyPlan() map[string]map[string][]int32 {
	plan := make(map[string]map[string][]int32, len(g.members))
	for i := range g.members {
		plan[g.members[i].ID] = make(map[string][]int32)
	}
	return plan
}

// sortPlan sorts every partition list of plan.
func sortPlan(plan map[string]map[string][]int32) {
	for _, topics := range plan {
		for _, ps := range topics {
			slices.Sort(ps)
		}
	}
}
