package assign

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

var allAssignors = []Assignor{Range(), RoundRobin(), Sticky(), CooperativeSticky()}

// input is one assignment problem.
type input struct {
	members    []Member
	partitions map[string]int32
}

// genPartitions draws up to five topics with 0 to 12 partitions; "t-unknown"
// is subscribed to at times but never has a partition count.
func genPartitions(t *rapid.T) map[string]int32 {
	n := rapid.IntRange(1, 5).Draw(t, "topics")
	parts := make(map[string]int32, n)
	for i := range n {
		parts[fmt.Sprintf("t%d", i)] = rapid.Int32Range(0, 12).Draw(t, "partitions")
	}
	return parts
}

func topicNames(parts map[string]int32) []string {
	return slices.Sorted(maps.Keys(parts))
}

// genMembers draws 1 to 7 members, some static, subscribed to the same
// topics when uniform and to random non-empty subsets otherwise.
func genMembers(t *rapid.T, parts map[string]int32, uniform bool) []Member {
	topics := append(topicNames(parts), "t-unknown")
	n := rapid.IntRange(1, 7).Draw(t, "members")
	var common []string
	if uniform {
		common = genSubscription(t, topics)
	}
	members := make([]Member, n)
	for i := range members {
		m := Member{ID: fmt.Sprintf("m%02d", rapid.IntRange(0, 99).Draw(t, "id")), Generation: -1}
		for slices.ContainsFunc(members[:i], func(o Member) bool { return o.ID == m.ID }) {
			m.ID += "x"
		}
		if rapid.IntRange(0, 3).Draw(t, "static") == 0 {
			m.InstanceID = fmt.Sprintf("i%d", i)
		}
		m.Topics = common
		if !uniform {
			m.Topics = genSubscription(t, topics)
		}
		members[i] = m
	}
	return members
}

func genSubscription(t *rapid.T, topics []string) []string {
	sub := rapid.SliceOfNDistinct(rapid.SampledFrom(topics), 1, len(topics), rapid.ID[string]).Draw(t, "subscription")
	slices.Sort(sub)
	return sub
}

// genClaims gives members random previous ownership, with random
// generations: stale, conflicting and invalid claims included.
func genClaims(t *rapid.T, in *input) {
	for i := range in.members {
		in.members[i].Generation = rapid.Int32Range(-1, 3).Draw(t, "generation")
	}
	for _, topic := range append(topicNames(in.partitions), "t-gone") {
		for p := range in.partitions[topic] + 1 { // one beyond the last
			for range rapid.IntRange(0, 2).Draw(t, "claimants") {
				m := &in.members[rapid.IntRange(0, len(in.members)-1).Draw(t, "claimant")]
				m.Owned = addOwned(m.Owned, topic, []int32{p})
			}
		}
	}
}

// genValidPrior gives members a previous assignment as a real previous
// round would leave it: each partition of a topic a member subscribes to
// owned by at most one such member, all in the same generation.
func genValidPrior(t *rapid.T, in *input, generation int32) {
	g := newGroup(in.members, in.partitions)
	for _, topic := range g.topics {
		for p := range in.partitions[topic] {
			c := rapid.IntRange(-1, len(g.consumers[topic])-1).Draw(t, "prior owner")
			if c < 0 {
				continue
			}
			id := g.members[g.consumers[topic][c]].ID
			i := slices.IndexFunc(in.members, func(m Member) bool { return m.ID == id })
			in.members[i].Owned = addOwned(in.members[i].Owned, topic, []int32{p})
		}
	}
	for i := range in.members {
		in.members[i].Generation = generation
	}
}

func shuffled(t *rapid.T, members []Member) []Member {
	out := slices.Clone(members)
	for i := len(out) - 1; i > 0; i-- {
		j := rapid.IntRange(0, i).Draw(t, "shuffle")
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// claimsOf returns, per topic and partition, the newest generation claiming
// it and the members claiming it in that generation.
func claimsOf(members []Member) map[string]map[int32][]string {
	gens := map[string]map[int32]int32{}
	claims := map[string]map[int32][]string{}
	for _, m := range members {
		for topic, ps := range m.Owned {
			if claims[topic] == nil {
				claims[topic], gens[topic] = map[int32][]string{}, map[int32]int32{}
			}
			for _, p := range ps {
				gen, ok := gens[topic][p]
				switch {
				case !ok || m.Generation > gen:
					gens[topic][p], claims[topic][p] = m.Generation, []string{m.ID}
				case m.Generation == gen:
					claims[topic][p] = append(claims[topic][p], m.ID)
				}
			}
		}
	}
	return claims
}

// checkValid checks that got assigns each partition at most once, only to a
// subscriber, and every partition of a subscribed topic, except, under the
// cooperative protocol, partitions some member still claims.
func checkValid(t require.TestingT, a Assignor, in input, got plan) {
	ids := map[string]Member{}
	for _, m := range in.members {
		ids[m.ID] = m
	}
	require.Len(t, got, len(ids), "one entry per member")
	seen := map[string]map[int32]string{}
	for id, topics := range got {
		m, ok := ids[id]
		require.True(t, ok, "unknown member %s", id)
		for topic, ps := range topics {
			require.Contains(t, m.Topics, topic, "%s is assigned %s without subscribing", id, topic)
			require.NotEmpty(t, ps, "empty partition list for %s of %s", topic, id)
			require.True(t, slices.IsSorted(ps), "unsorted partitions %v", ps)
			for _, p := range ps {
				require.True(t, p >= 0 && p < in.partitions[topic], "%s %d out of range", topic, p)
				if seen[topic] == nil {
					seen[topic] = map[int32]string{}
				}
				prev, dup := seen[topic][p]
				require.False(t, dup, "%s %d assigned to %s and %s", topic, p, prev, id)
				seen[topic][p] = id
			}
		}
	}
	claims := claimsOf(in.members)
	for _, m := range in.members {
		for _, topic := range m.Topics {
			for p := range in.partitions[topic] {
				if _, ok := seen[topic][p]; ok {
					continue
				}
				require.True(t, a.Protocol() == Cooperative && len(claims[topic][p]) > 0,
					"%s %d unassigned though %s subscribes", topic, p, m.ID)
			}
		}
	}
}

// checkBalanced checks that no member could take a partition from one with
// at least two more, directly (Kafka's AbstractStickyAssignor.isBalanced)
// or through a chain, and so that members with equal subscriptions differ
// by at most one.
func checkBalanced(t require.TestingT, in input, got plan) {
	subs := map[string][]string{}
	for _, m := range in.members {
		subs[m.ID] = m.Topics
	}
	// reach[a] holds the members a can pass partitions to, transitively.
	reach := map[string]map[string]bool{}
	for a := range got {
		reach[a] = map[string]bool{}
		for b := range got {
			if a == b {
				continue
			}
			for topic := range got[a] {
				if slices.Contains(subs[b], topic) {
					reach[a][b] = true
				}
			}
		}
	}
	for k := range got {
		for a := range got {
			for b := range got {
				if reach[a][k] && reach[k][b] && a != b {
					reach[a][b] = true
				}
			}
		}
	}
	for a := range got {
		for b := range reach[a] {
			require.LessOrEqual(t, count(got[a]), count(got[b])+1,
				"%s has %d partitions, %s only %d and could take from it: %v", a, count(got[a]), b, count(got[b]), got)
		}
		for b := range got {
			if slices.Equal(subs[a], subs[b]) {
				require.InDelta(t, count(got[a]), count(got[b]), 1, "equal subscriptions of %s and %s", a, b)
			}
		}
	}
}

func TestPropertyValidAndDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := input{partitions: genPartitions(t)}
		in.members = genMembers(t, in.partitions, rapid.Bool().Draw(t, "uniform"))
		genClaims(t, &in)
		for _, a := range allAssignors {
			got := a.Assign(in.members, in.partitions)
			checkValid(t, a, in, got)
			require.Equal(t, got, a.Assign(in.members, in.partitions), "%s twice", a.Name())
			require.Equal(t, got, a.Assign(shuffled(t, in.members), in.partitions), "%s with members reordered", a.Name())
		}
	})
}

func TestPropertyBalanced(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := input{partitions: genPartitions(t)}
		uniform := rapid.Bool().Draw(t, "uniform")
		in.members = genMembers(t, in.partitions, uniform)
		genClaims(t, &in)
		checkBalanced(t, in, Sticky().Assign(in.members, in.partitions))
		if uniform {
			// Round robin deals evenly when everyone takes every topic,
			// range per topic.
			rr := RoundRobin().Assign(in.members, in.partitions)
			rg := Range().Assign(in.members, in.partitions)
			for _, a := range in.members {
				for _, b := range in.members {
					require.InDelta(t, count(rr[a.ID]), count(rr[b.ID]), 1)
					for _, topic := range a.Topics {
						require.InDelta(t, len(rg[a.ID][topic]), len(rg[b.ID][topic]), 1)
					}
				}
			}
		}
	})
}

// TestPropertyCooperativeIsStickyMinusTransfers checks that cooperative-sticky
// plans what sticky plans and withholds exactly the partitions that would be
// handed from a current owner to another member in the same round.
func TestPropertyCooperativeIsStickyMinusTransfers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := input{partitions: genPartitions(t)}
		in.members = genMembers(t, in.partitions, rapid.Bool().Draw(t, "uniform"))
		genClaims(t, &in)
		eager := Sticky().Assign(in.members, in.partitions)
		coop := CooperativeSticky().Assign(in.members, in.partitions)
		claims := claimsOf(in.members)
		for id, topics := range eager {
			for topic, ps := range topics {
				for _, p := range ps {
					owners := claims[topic][p]
					inTransit := len(owners) > 0 && !slices.Contains(owners, id)
					require.Equal(t, !inTransit, slices.Contains(coop[id][topic], p),
						"%s %d planned for %s, current owners %v", topic, p, id, owners)
				}
			}
		}
		for id, topics := range coop {
			for topic, ps := range topics {
				for _, p := range ps {
					require.Contains(t, eager[id][topic], p)
				}
			}
		}
	})
}

// minMoves returns the fewest partitions that must leave their owners for
// a balanced assignment when every member subscribes to the same topics:
// owned[i] is how many valid partitions member i owns, n the partition
// count. The n%len(owned) members allowed one extra partition are best the
// ones owning the most.
func minMoves(owned []int, n int) int {
	owned = slices.Clone(owned)
	slices.SortFunc(owned, func(a, b int) int { return b - a })
	q, r := n/len(owned), n%len(owned)
	moves := 0
	for i, c := range owned {
		limit := q
		if i < r {
			limit++
		}
		moves += max(0, c-limit)
	}
	return moves
}

// movesFrom counts the partitions that members of members owned and that
// got gives to someone else (or withholds).
func movesFrom(members []Member, got plan) int {
	moves := 0
	for _, m := range members {
		for topic, ps := range m.Owned {
			for _, p := range ps {
				if !slices.Contains(got[m.ID][topic], p) {
					moves++
				}
			}
		}
	}
	return moves
}

func TestPropertyStickyMovesTheMinimumWhenOneMemberJoinsOrLeaves(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := input{partitions: genPartitions(t)}
		in.members = genMembers(t, in.partitions, true)
		genClaims(t, &in)
		const gen = 5
		// The group settles into a balanced assignment first.
		settled := Sticky().Assign(in.members, in.partitions)
		for i := range in.members {
			in.members[i].Owned, in.members[i].Generation = settled[in.members[i].ID], gen
		}

		next := slices.Clone(in.members)
		if len(next) > 1 && rapid.Bool().Draw(t, "leave") {
			next = slices.Delete(next, 0, 1)
		} else {
			next = append(next, Member{ID: "joiner", Topics: in.members[0].Topics, Generation: -1})
		}
		n := 0
		for _, topic := range next[0].Topics {
			n += int(in.partitions[topic])
		}
		owned := make([]int, len(next))
		for i, m := range next {
			owned[i] = count(m.Owned)
		}
		want := minMoves(owned, n)

		got := Sticky().Assign(next, in.partitions)
		checkBalanced(t, input{next, in.partitions}, got)
		require.Equal(t, want, movesFrom(next, got), "sticky moved more than needed: %v -> %v", next, got)

		// Cooperative: the first round revokes the same partitions and
		// gives them to nobody; the second, one generation on, hands
		// them over and takes nothing more away.
		first := CooperativeSticky().Assign(next, in.partitions)
		require.Equal(t, want, movesFrom(next, first))
		for id, topics := range first {
			for topic, ps := range topics {
				for _, p := range ps {
					owners := claimsOf(next)[topic][p]
					require.True(t, len(owners) == 0 || slices.Contains(owners, id),
						"%s %d given to %s while %v own it", topic, p, id, owners)
				}
			}
		}
		again := slices.Clone(next)
		for i := range again {
			again[i].Owned, again[i].Generation = first[again[i].ID], gen+1
		}
		second := CooperativeSticky().Assign(again, in.partitions)
		require.Zero(t, movesFrom(again, second), "second round revokes again")
		checkValid(t, Sticky(), input{again, in.partitions}, second)
		checkBalanced(t, input{again, in.partitions}, second)
	})
}

// TestPropertyStickyOptimalOnSmallGroups compares sticky with an exhaustive
// search over every assignment of a small group with any subscriptions:
// the loads must have the least sum of squares possible, and among such
// assignments ours must move the fewest previously owned partitions.
func TestPropertyStickyOptimalOnSmallGroups(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := map[string]int32{"t0": rapid.Int32Range(0, 4).Draw(t, "t0"), "t1": rapid.Int32Range(0, 4).Draw(t, "t1")}
		n := rapid.IntRange(1, 4).Draw(t, "members")
		in := input{partitions: parts}
		for i := range n {
			in.members = append(in.members, Member{ID: fmt.Sprintf("m%d", i), Topics: genSubscription(t, []string{"t0", "t1"})})
		}
		genValidPrior(t, &in, 1)

		type tp struct {
			topic string
			p     int32
		}
		var all []tp
		for _, topic := range []string{"t0", "t1"} {
			if !slices.ContainsFunc(in.members, func(m Member) bool { return slices.Contains(m.Topics, topic) }) {
				continue
			}
			for p := range parts[topic] {
				all = append(all, tp{topic, p})
			}
		}
		bestSquares, bestMoves := -1, 0
		owner := make([]int, len(all))
		var walk func(i int)
		walk = func(i int) {
			if i == len(all) {
				got := plan{}
				for _, m := range in.members {
					got[m.ID] = map[string][]int32{}
				}
				for j, o := range owner {
					id := in.members[o].ID
					got[id][all[j].topic] = append(got[id][all[j].topic], all[j].p)
				}
				squares := 0
				for _, topics := range got {
					squares += count(topics) * count(topics)
				}
				moves := movesFrom(in.members, got)
				if bestSquares < 0 || squares < bestSquares || squares == bestSquares && moves < bestMoves {
					bestSquares, bestMoves = squares, moves
				}
				return
			}
			for o, m := range in.members {
				if slices.Contains(m.Topics, all[i].topic) {
					owner[i] = o
					walk(i + 1)
				}
			}
		}
		walk(0)

		got := Sticky().Assign(in.members, parts)
		squares := 0
		for _, topics := range got {
			squares += count(topics) * count(topics)
		}
		require.Equal(t, max(bestSquares, 0), squares, "balance of %v", got)
		require.Equal(t, bestMoves, movesFrom(in.members, got), "moves of %v from %v", got, in.members)
	})
}
