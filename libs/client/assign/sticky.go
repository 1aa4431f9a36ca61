package assign

import (
	"slices"
)

// Sticky returns Kafka's "sticky" assignor (KIP-54, with the KIP-341
// generation fix): the assignment is as balanced as the subscriptions
// allow, and within that keeps every member's previous partitions where it
// can. Members are eager: they revoke everything before each rebalance and
// carry their previous assignment in the subscription's user data.
//
// Balanced means what Kafka's StickyAssignor aims for and more: no member
// could take a partition from a member with at least two more, directly or
// along a chain of members that each hand one partition on. Members with
// equal subscriptions therefore differ by at most one partition. Of all
// such assignments it picks one that takes the fewest partitions from the
// members that owned them (for groups of up to 200 members; larger groups
// get a greedy approximation, see maxCycleMembers). A partition claimed by
// several members goes to the newest generation's claimant (KIP-341); two
// claims in the same generation cancel each other, as in Kafka.
func Sticky() Assignor { return stickyAssignor{} }

// CooperativeSticky returns Kafka's "cooperative-sticky" assignor (KIP-429):
// the sticky assignment, except that a partition that changes owner is left
// out of its new owner's assignment in this round. The old owner sees it
// gone and revokes it, which triggers a follow-up rebalance in which the
// partition, now owned by nobody, reaches its new owner. No partition is
// consumed by two members at once.
func CooperativeSticky() Assignor { return stickyAssignor{cooperative: true} }

type stickyAssignor struct{ cooperative bool }

func (s stickyAssignor) Name() string {
	if s.cooperative {
		return cooperativeStickyName
	}
	return stickyName
}

func (s stickyAssignor) Protocol() RebalanceProtocol {
	if s.cooperative {
		return Cooperative
	}
	return Eager
}

func (s stickyAssignor) Assign(members []Member, partitions map[string]int32) map[string]map[string][]int32 {
	g := newGroup(members, partitions)
	b := newBalancer(g)
	b.claim()
	b.assignUnowned()
	b.repair()
	b.stick()
	return b.plan(s.cooperative)
}

// noMember marks a partition without an owner or a keeper.
const noMember = -1

// balancer holds the state of one sticky assignment. Partitions are
// numbered consecutively, topic by topic in g.topics order.
type balancer struct {
	g      *group
	base   []int // base[ti] is the number of topic g.topics[ti]'s partition 0
	topic  []int // topic[p] is the index in g.topics of partition p's topic
	owner  []int // owner[p] is the member assigned p so far
	keeper []int // keeper[p] is the member that owned p and may keep it
	// claimGen[p] is the newest generation any member claims p in, and
	// claims[p] the members claiming it in that generation (cooperative
	// transfers need them).
	claimGen []int32
	claims   [][]int
	load     []int
	// kept[m][ti] holds the partitions of topic ti that member m is
	// assigned and kept from before; moved[m][ti] the others, which can be
	// handed on without moving one more partition away from its owner.
	kept, moved []map[int][]int
	subTopics   [][]int // subTopics[m] lists the topic indexes m subscribes to, sorted
	consumers   [][]int // consumers[ti] lists the members subscribed to topic ti, sorted
}

func newBalancer(g *group) *balancer {
	b := &balancer{g: g, base: make([]int, len(g.topics)+1)}
	index := make(map[string]int, len(g.topics))
	for ti, t := range g.topics {
		index[t] = ti
		b.base[ti+1] = b.base[ti] + int(g.counts[t])
	}
	n := b.base[len(g.topics)]
	b.topic = make([]int, n)
	b.owner = make([]int, n)
	b.keeper = make([]int, n)
	b.claimGen = make([]int32, n)
	b.claims = make([][]int, n)
	for ti := range g.topics {
		for p := b.base[ti]; p < b.base[ti+1]; p++ {
			b.topic[p] = ti
			b.owner[p] = noMember
			b.keeper[p] = noMember
		}
	}
	m := len(g.members)
	b.load = make([]int, m)
	b.kept = make([]map[int][]int, m)
	b.moved = make([]map[int][]int, m)
	b.subTopics = make([][]int, m)
	b.consumers = make([][]int, len(g.topics))
	for i := range g.members {
		b.kept[i] = make(map[int][]int)
		b.moved[i] = make(map[int][]int)
		for _, t := range g.subs[i] {
			b.subTopics[i] = append(b.subTopics[i], index[t])
		}
	}
	for ti, t := range g.topics {
		b.consumers[ti] = g.consumers[t]
	}
	return b
}

// partition returns the number of partition p of topic t, or -1 when the
// group cannot assign it (unknown topic, nobody subscribed, out of range).
func (b *balancer) partition(t string, p int32) int {
	ti, ok := slices.BinarySearch(b.g.topics, t)
	if !ok || p < 0 || int(p) >= b.base[ti+1]-b.base[ti] {
		return -1
	}
	return b.base[ti] + int(p)
}

// claim records every member's owned partitions and lets each partition's
// owner keep it where that is safe. Claims can conflict when a member
// missed a rebalance and rejoins with stale ownership (KIP-341, KIP-792):
// the newest generation wins; two members claiming a partition in the same
// generation both lose it, as in Kafka's AbstractStickyAssignor, because
// nothing says which of them is right. A member keeps a partition only
// while it still subscribes to its topic.
func (b *balancer) claim() {
	for i := range b.claimGen {
		b.claimGen[i] = -1
	}
	for m := range b.g.members {
		gen := b.g.members[m].Generation
		topics := make([]string, 0, len(b.g.members[m].Owned))
		for t := range b.g.members[m].Owned {
			topics = append(topics, t)
		}
		slices.Sort(topics)
		for _, t := range topics {
			ps := slices.Clone(b.g.members[m].Owned[t])
			slices.Sort(ps)
			for _, p := range slices.Compact(ps) {
				n := b.partition(t, p)
				if n < 0 {
					continue
				}
				switch {
				case len(b.claims[n]) == 0 || gen > b.claimGen[n]:
					b.claimGen[n] = gen
					b.claims[n] = append(b.claims[n][:0], m)
				case gen == b.claimGen[n]:
					b.claims[n] = append(b.claims[n], m)
				}
			}
		}
	}
	for p, claimants := range b.claims {
		if len(claimants) != 1 {
			continue
		}
		m := claimants[0]
		if _, ok := slices.BinarySearch(b.subTopics[m], b.topic[p]); !ok {
			continue
		}
		b.keeper[p] = m
		b.give(p, m)
	}
}

// give assigns partition p, owned by nobody yet, to member m.
func (b *balancer) give(p, m int) {
	b.owner[p] = m
	b.load[m]++
	ti := b.topic[p]
	if b.keeper[p] == m {
		b.kept[m][ti] = append(b.kept[m][ti], p)
	} else {
		b.moved[m][ti] = append(b.moved[m][ti], p)
	}
}

// take removes one partition of topic ti from member m, preferring one that
// m did not keep from before, and returns it.
func (b *balancer) take(m, ti int) int {
	from := b.moved[m]
	if len(from[ti]) == 0 {
		from = b.kept[m]
	}
	ps := from[ti]
	p := ps[len(ps)-1]
	if len(ps) == 1 {
		delete(from, ti)
	} else {
		from[ti] = ps[:len(ps)-1]
	}
	b.owner[p] = noMember
	b.load[m]--
	return p
}

// assignUnowned gives every partition nobody keeps to its least loaded
// subscriber, the partitions of topics with the fewest subscribers first:
// they have the fewest places to go.
func (b *balancer) assignUnowned() {
	var free []int
	for p, o := range b.owner {
		if o == noMember && len(b.consumers[b.topic[p]]) > 0 {
			free = append(free, p)
		}
	}
	slices.SortStableFunc(free, func(x, y int) int {
		return len(b.consumers[b.topic[x]]) - len(b.consumers[b.topic[y]])
	})
	for _, p := range free {
		best := noMember
		for _, m := range b.consumers[b.topic[p]] {
			if best == noMember || b.load[m] < b.load[best] {
				best = m
			}
		}
		b.give(p, best)
	}
}

// repair moves partitions until no member can pass one partition, directly
// or along a chain of members, to a member with at least two fewer. That is
// the optimality condition of a semi-matching (Harvey, Ladner, Lovász,
// Tamir, "Semi-matchings for bipartite graphs and load balancing", 2006):
// the loads are then as even as the subscriptions allow, by every measure at
// once. Of all chains that even the loads out, each step takes one that
// moves the fewest partitions away from the members that kept them; stick
// then undoes what these greedy choices cost in stickiness. Every step
// lowers the sum of squared loads, so the loop ends.
func (b *balancer) repair() {
	s := newSearch(len(b.g.members), len(b.g.topics))
	for {
		levels := slices.Clone(b.load)
		slices.Sort(levels)
		levels = slices.Compact(levels)
		best, bestCost := noMember, 0
		var bestNext []int
		var bestTopic []int
		for _, level := range levels {
			if level+2 > levels[len(levels)-1] {
				break
			}
			u, cost := b.findPath(s, level)
			if u == noMember || best != noMember && cost >= bestCost {
				continue
			}
			best, bestCost = u, cost
			bestNext = append(bestNext[:0], s.next...)
			bestTopic = append(bestTopic[:0], s.topic...)
			if cost == 0 {
				break
			}
		}
		if best == noMember {
			return
		}
		// Move one partition along each step, starting at the source so
		// that a member can pass on the partition it was just given
		// rather than one it kept.
		for x := best; bestNext[x] != noMember; x = bestNext[x] {
			b.give(b.take(x, bestTopic[x]), bestNext[x])
		}
	}
}

// search is the scratch state of one path search.
type search struct {
	dist  []int
	next  []int // next[x] is the member x passes a partition to, or noMember at a target
	topic []int // topic[x] is the topic of that partition
	deque []int
	// topicDist[ti] is the distance of the closest member topic ti was
	// expanded from.
	topicDist []int
}

func newSearch(members, topics int) *search {
	return &search{dist: make([]int, members), next: make([]int, members), topic: make([]int, members), topicDist: make([]int, topics)}
}

// findPath searches, backwards from every member with the given load, the
// chains along which each member passes one partition to the next; a step
// costs nothing when the member passes a partition it did not keep from
// before, else one. It returns the member with a load of at least level+2
// that starts the cheapest chain, ties going to the highest load and then
// to Kafka's member order, with the chain's cost; or noMember.
func (b *balancer) findPath(s *search, level int) (int, int) {
	const unreached = int(^uint(0) >> 1)
	s.deque = s.deque[:0]
	for ti := range s.topicDist {
		s.topicDist[ti] = unreached
	}
	for m := range s.dist {
		s.dist[m], s.next[m] = unreached, noMember
		if b.load[m] == level {
			s.dist[m] = 0
			s.deque = append(s.deque, m)
		}
	}
	// A 0-1 breadth-first search: cost-0 steps go to the front of the
	// deque, cost-1 steps to the back.
	head := 0
	for head < len(s.deque) {
		y := s.deque[head]
		head++
		for _, ti := range b.subTopics[y] {
			// A step's cost depends on the giver and the topic, not on
			// the receiver: a topic expanded from a member as close as
			// y offers nothing new.
			if s.topicDist[ti] <= s.dist[y] {
				continue
			}
			s.topicDist[ti] = s.dist[y]
			for _, x := range b.consumers[ti] {
				cost := 0
				if len(b.moved[x][ti]) == 0 {
					if len(b.kept[x][ti]) == 0 {
						continue
					}
					cost = 1
				}
				d := s.dist[y] + cost
				if d >= s.dist[x] {
					continue
				}
				s.dist[x], s.next[x], s.topic[x] = d, y, ti
				if cost == 0 && head > 0 {
					head--
					s.deque[head] = x
				} else if cost == 0 {
					s.deque = slices.Insert(s.deque, 0, x)
				} else {
					s.deque = append(s.deque, x)
				}
			}
		}
	}
	best := noMember
	for u, d := range s.dist {
		if d == unreached || b.load[u] < level+2 {
			continue
		}
		if best == noMember || d < s.dist[best] || d == s.dist[best] && b.load[u] > b.load[best] {
			best = u
		}
	}
	if best == noMember {
		return noMember, 0
	}
	return best, s.dist[best]
}

// plan returns the assignment. For the cooperative protocol a partition
// goes to its planned member only if that member owns it or nobody does:
// otherwise the current owners must revoke it first (KIP-429), so it is
// left out of this round. Ownership is judged by the newest generation
// claiming the partition (KIP-792): a stale claim is no ownership, so a
// partition planned back to a member that only claims it from an older
// generation waits too, while the newer owner revokes.
func (b *balancer) plan(cooperative bool) map[string]map[string][]int32 {
	plan := b.g.emptyPlan()
	for p, m := range b.owner {
		if m == noMember {
			continue
		}
		if cooperative && len(b.claims[p]) > 0 && !slices.Contains(b.claims[p], m) {
			continue
		}
		ti := b.topic[p]
		t := b.g.topics[ti]
		id := b.g.members[m].ID
		plan[id][t] = append(plan[id][t], int32(p-b.base[ti]))
	}
	return plan
}
