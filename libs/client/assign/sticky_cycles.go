package assign

import "slices"

// maxCycleMembers bounds the group size for which stick runs: each of its
// rounds is a Bellman-Ford search over all pairs of members, O(members³).
// Larger groups keep the balance that repair reaches and the stickiness of
// its cheapest chains, which is close to but not always the minimum.
const maxCycleMembers = 200

// edge is the cheapest single move from one member to another: passing
// partition p costs cost moves (-1 when p returns to the member that kept
// it, 0 when p was not kept by the giver, 1 when it was).
type edge struct {
	cost int64
	p    int
	ok   bool
}

// stick makes a balanced assignment as sticky as possible. The assignment is
// a min-cost flow: partitions flow to members, a member's n-th partition
// costs w·(2n-1), so the loads' sum of squares dominates, and a partition
// given to a member other than the one that kept it costs 1 more. A flow is
// optimal exactly when its residual graph has no negative cycle. Here the
// residual graph reduces to the members (an edge x→y: x passes one partition
// to y) and one node standing for the loads (y→loads: y takes one partition
// more; loads→x: x one fewer). stick cancels negative cycles until there
// is none: a chain from x to y with load[x] = load[y]+1 that gives back more
// kept partitions than it takes, or a ring of members that does. repair has
// already evened the loads, and w exceeds any chain's move count, so no
// cycle trades balance for stickiness.
func (b *balancer) stick() {
	n := len(b.g.members)
	if n < 2 || n > maxCycleMembers {
		return
	}
	w := int64(n + 1)
	edges := make([][]edge, n)
	for x := range edges {
		edges[x] = make([]edge, n)
	}
	// Node n stands for the loads.
	dist := make([]int64, n+1)
	pred := make([]int, n+1)
	for {
		b.buildEdges(edges)
		for i := range dist {
			dist[i], pred[i] = 0, noMember
		}
		relax := func(x, y int, c int64) bool {
			if dist[x]+c < dist[y] {
				dist[y], pred[y] = dist[x]+c, x
				return true
			}
			return false
		}
		last := noMember
		for range n + 1 {
			last = noMember
			for x := range n {
				for y := range n {
					if edges[x][y].ok && relax(x, y, edges[x][y].cost) {
						last = y
					}
				}
				if relax(x, n, w*int64(2*b.load[x]+1)) {
					last = n
				}
				if b.load[x] > 0 && relax(n, x, -w*int64(2*b.load[x]-1)) {
					last = x
				}
			}
			if last == noMember {
				return
			}
		}
		// A relaxation in round n+1 means a negative cycle; walking back
		// n+1 steps from it lands on the cycle.
		x := last
		for range n + 1 {
			if x = pred[x]; x == noMember {
				return // unreachable: a cycle has predecessors all round
			}
		}
		cycle := []int{x}
		for y := pred[x]; y != x; y = pred[y] {
			cycle = append(cycle, y)
		}
		slices.Reverse(cycle)
		// Each giver passes the partition chosen when the edges were
		// built; it held it before the cycle, so the order of the moves
		// does not matter.
		type move struct{ p, to int }
		var moves []move
		for i, from := range cycle {
			to := cycle[(i+1)%len(cycle)]
			if from == n || to == n {
				continue
			}
			moves = append(moves, move{edges[from][to].p, to})
		}
		for _, mv := range moves {
			b.takePartition(mv.p)
			b.give(mv.p, mv.to)
		}
	}
}

// buildEdges fills edges[x][y] with the cheapest partition x can pass to y.
func (b *balancer) buildEdges(edges [][]edge) {
	for x := range edges {
		clear(edges[x])
	}
	returnTo := make(map[int]int) // keeper -> a partition x holds that it kept
	for x := range edges {
		for _, ti := range b.subTopics[x] {
			moved, kept := b.moved[x][ti], b.kept[x][ti]
			if len(moved) == 0 && len(kept) == 0 {
				continue
			}
			clear(returnTo)
			for _, p := range moved {
				if k := b.keeper[p]; k != noMember {
					returnTo[k] = p
				}
			}
			for _, y := range b.consumers[ti] {
				if y == x {
					continue
				}
				var e edge
				if p, ok := returnTo[y]; ok {
					e = edge{cost: -1, p: p, ok: true}
				} else if len(moved) > 0 {
					e = edge{cost: 0, p: moved[len(moved)-1], ok: true}
				} else {
					e = edge{cost: 1, p: kept[len(kept)-1], ok: true}
				}
				if cur := edges[x][y]; !cur.ok || e.cost < cur.cost {
					edges[x][y] = e
				}
			}
		}
	}
}

// takePartition removes partition p from its owner.
func (b *balancer) takePartition(p int) {
	m, ti := b.owner[p], b.topic[p]
	from := b.moved[m]
	if b.keeper[p] == m {
		from = b.kept[m]
	}
	ps := from[ti]
	i := slices.Index(ps, p)
	ps = slices.Delete(ps, i, i+1)
	if len(ps) == 0 {
		delete(from, ti)
	} else {
		from[ti] = ps
	}
	b.owner[p] = noMember
	b.load[m]--
}
