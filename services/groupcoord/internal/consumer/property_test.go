package consumer

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// convergeRounds bounds the heartbeat rounds (every member once) a group
// needs to reach its target once membership stops changing: one round to
// tell members what to revoke, one in which they report it and take what
// is free, one for partitions freed later in the previous round.
const convergeRounds = 4

// sim drives a group with modelled consumers.
type sim struct {
	t       *rapid.T
	g       *Group
	topics  fakeTopics
	now     time.Time
	clients map[string]*client // by pool key; alive members and away statics
	away    map[string]bool    // static consumers that left with epoch -2
	epochs  map[string]int32   // highest epoch seen per member id
}

var subscriptions = []struct {
	names []string
	regex string
}{
	{names: []string{"t0", "t1"}},
	{names: []string{"t0", "t1", "t2"}},
	{regex: "t[01]"}, // Resolves to the same topics as the first.
	{names: []string{"t2"}},
}

func (s *sim) step() {
	t := s.t
	switch rapid.IntRange(0, 9).Draw(t, "action") {
	case 0, 1: // A consumer joins.
		key := fmt.Sprintf("m%d", rapid.IntRange(0, 5).Draw(t, "who"))
		if _, ok := s.clients[key]; ok {
			return
		}
		sub := subscriptions[rapid.IntRange(0, len(subscriptions)-1).Draw(t, "sub")]
		c := newClient(key, sub.names...)
		c.regex = sub.regex
		if rapid.Bool().Draw(t, "static") {
			c.instance = "inst-" + key
		}
		s.clients[key] = c
		s.join(c)
	case 2, 3, 4, 5: // Heartbeats, some reporting late.
		for _, key := range s.liveKeys() {
			if rapid.IntRange(0, 3).Draw(t, "skip") == 0 {
				continue
			}
			c := s.clients[key]
			if rapid.IntRange(0, 3).Draw(t, "late") != 0 {
				c.apply()
			}
			s.beat(key, c)
		}
	case 6: // A consumer leaves, for good or (static) temporarily.
		keys := s.liveKeys()
		if len(keys) == 0 {
			return
		}
		key := keys[rapid.IntRange(0, len(keys)-1).Draw(t, "leaver")]
		c := s.clients[key]
		req := c.hbRequest()
		req.MemberEpoch = -1
		temporary := c.instance != "" && rapid.Bool().Draw(t, "temporary")
		if temporary {
			req.MemberEpoch = -2
		}
		_, err := s.g.Heartbeat(req, s.topics, s.now)
		require.NoError(t, err)
		c.held, c.told = map[tp]bool{}, nil
		if temporary {
			s.away[key] = true
		} else {
			delete(s.clients, key)
		}
	case 7: // A static consumer that left temporarily comes back with a new id.
		if keys := sortedTopics(s.away); len(keys) > 0 {
			key := keys[rapid.IntRange(0, len(keys)-1).Draw(t, "returning")]
			c := s.clients[key]
			c.id += "'"
			delete(s.away, key)
			s.join(c)
		}
	case 8: // Time passes; sessions or rebalance timeouts may end.
		s.now = s.now.Add(time.Duration(rapid.IntRange(1, 50).Draw(t, "seconds")) * time.Second)
		for _, id := range s.g.Expire(s.now) {
			for key, c := range s.clients {
				if c.id == id {
					// The consumer's own timers end too: it drops its
					// partitions (Kafka's client does on poll timeout).
					delete(s.clients, key)
					delete(s.away, key)
				}
			}
		}
	case 9: // A topic grows.
		topic := fmt.Sprintf("t%d", rapid.IntRange(0, 2).Draw(t, "topic"))
		s.topics[topic] += int32(rapid.IntRange(1, 3).Draw(t, "grow"))
		s.g.TopicsChanged(s.topics)
	}
}

func (s *sim) liveKeys() []string {
	var out []string
	for key := range s.clients {
		if !s.away[key] {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

func (s *sim) join(c *client) {
	c.held, c.told = map[tp]bool{}, nil
	resp, err := s.g.Heartbeat(c.joinRequest(), s.topics, s.now)
	require.NoError(s.t, err)
	c.take(resp)
	c.apply()
}

func (s *sim) beat(key string, c *client) {
	s.now = s.now.Add(time.Second)
	resp, err := s.g.Heartbeat(c.hbRequest(), s.topics, s.now)
	switch {
	case err == nil:
		c.take(resp)
	case errs.Is(err, errs.FencedMemberEpoch):
		s.join(c) // Drop everything and rejoin, as a client must.
	case errs.Is(err, errs.UnknownMemberID):
		delete(s.clients, key)
	default:
		s.t.Fatalf("heartbeat of %s: %v", c.id, err)
	}
}

// check asserts the invariants that hold after every call.
func (s *sim) check(before map[string]map[tp]bool) {
	t := s.t
	checkOwners(t, s.g)
	require.Equal(t, s.g.groupEpoch, s.g.targetEpoch, "target computed eagerly")

	// What consumers hold never overlaps, and a consumer may commit what it
	// holds with the epoch it knows (KIP-1251 keeps a heartbeat that bumped
	// the epoch meanwhile from failing the commit).
	holder := map[tp]string{}
	for key, c := range s.clients {
		for k := range c.held {
			prev, dup := holder[k]
			require.False(t, dup, "%s-%d held by consumers %s and %s", k.topic, k.partition, prev, key)
			holder[k] = key
		}
		if s.away[key] || len(c.held) == 0 {
			continue
		}
		for _, epoch := range []int32{c.heldEpoch, c.epoch} {
			check, err := s.g.CommitValidator(c.id, epoch)
			require.NoError(t, err, "commit by %s with epoch %d", c.id, epoch)
			for k := range c.held {
				if check != nil {
					require.NoError(t, check(k.topic, k.partition), "commit by %s with epoch %d", c.id, epoch)
				}
			}
		}
	}

	for id, m := range s.g.members {
		// Epochs never go down.
		require.GreaterOrEqual(t, m.epoch, s.epochs[id], "epoch of %s", id)
		s.epochs[id] = m.epoch
		// A member only loses partitions that left its target.
		target := targetSet(s.g.target[id])
		for k := range before[id] {
			if !m.assigned.has(k.topic, k.partition) {
				require.False(t, target[k], "%s lost %s-%d, still in its target", id, k.topic, k.partition)
			}
		}
	}
	checkTarget(t, s.g)
}

// checkTarget asserts the target gives every subscribed partition to one
// subscriber and, for uniform, balances members with equal subscriptions.
func checkTarget(t require.TestingT, g *Group) {
	seen := map[tp]string{}
	counts := map[string][]int{}
	for id, m := range g.members {
		subs := g.subscribedTopics(m)
		n := 0
		for topic, ps := range g.target[id] {
			require.True(t, subs[topic], "%s got %s without subscribing", id, topic)
			for _, p := range ps {
				k := tp{topic, p}
				_, dup := seen[k]
				require.False(t, dup, "%s-%d targeted twice", topic, p)
				seen[k] = id
				n++
			}
		}
		key := strings.Join(sortedTopics(subs), ",")
		counts[key] = append(counts[key], n)
	}
	for topic, count := range g.partitions {
		subscribed := false
		for _, m := range g.members {
			subscribed = subscribed || g.subscribedTopics(m)[topic]
		}
		for p := int32(0); p < count && subscribed; p++ {
			_, ok := seen[tp{topic, p}]
			require.True(t, ok, "%s-%d not targeted", topic, p)
		}
	}
	if g.assignor == UniformAssignorName {
		for key, cs := range counts {
			sort.Ints(cs)
			require.LessOrEqual(t, cs[len(cs)-1]-cs[0], 1, "uniform: members subscribed to %s hold %v", key, cs)
		}
	}
}

func snapshot(g *Group) map[string]map[tp]bool {
	out := map[string]map[tp]bool{}
	for id, m := range g.members {
		out[id] = assignedSet(m)
	}
	return out
}

// converge brings back static consumers that are away, then has every
// consumer heartbeat (applying what it was told at once) for at most
// convergeRounds rounds, and asserts that the group reached its target.
func (s *sim) converge() {
	for _, key := range sortedTopics(s.away) {
		c := s.clients[key]
		c.id += "'"
		delete(s.away, key)
		s.join(c)
	}
	for round := 0; round < convergeRounds; round++ {
		for _, key := range s.liveKeys() {
			before := snapshot(s.g)
			c := s.clients[key]
			c.apply()
			s.beat(key, c)
			c.apply()
			s.check(before)
		}
	}
	require.Equal(s.t, s.g.Empty(), s.g.State() == "Empty")
	if !s.g.Empty() {
		require.Equal(s.t, "Stable", s.g.State(), "not converged after %d rounds", convergeRounds)
	}
	for _, c := range s.clients {
		m := s.g.members[c.id]
		require.NotNil(s.t, m, "consumer %s", c.id)
		require.Equal(s.t, tpSet(targetSet(s.g.target[c.id])), tpSet(c.held), "consumer %s holds its target", c.id)
		require.Equal(s.t, s.g.targetEpoch, m.epoch)
	}
}

func TestPropertyGroupInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		assignor := rapid.SampledFrom([]string{UniformAssignorName, RangeAssignorName}).Draw(rt, "assignor")
		s := &sim{
			t:       rt,
			g:       NewGroup(testGroup, Config{DefaultAssignor: assignor}),
			topics:  fakeTopics{},
			now:     t0,
			clients: map[string]*client{},
			away:    map[string]bool{},
			epochs:  map[string]int32{},
		}
		for i := range 3 {
			s.topics[fmt.Sprintf("t%d", i)] = int32(rapid.IntRange(1, 6).Draw(rt, "partitions"))
		}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			before := snapshot(s.g)
			s.step()
			s.check(before)
		}
		s.converge()
	})
}

// TestPropertyJoinNeverPausesOthers checks that when one member joins a
// stable group, every member whose target still covers what it holds keeps
// all of it, advances on its next heartbeat and never revokes.
func TestPropertyJoinNeverPausesOthers(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		assignor := rapid.SampledFrom([]string{UniformAssignorName, RangeAssignorName}).Draw(rt, "assignor")
		s := &sim{
			t: rt, g: NewGroup(testGroup, Config{DefaultAssignor: assignor}),
			topics: fakeTopics{"t0": int32(rapid.IntRange(1, 12).Draw(rt, "t0")), "t1": int32(rapid.IntRange(1, 12).Draw(rt, "t1"))},
			now:    t0, clients: map[string]*client{}, away: map[string]bool{}, epochs: map[string]int32{},
		}
		n := rapid.IntRange(1, 5).Draw(rt, "members")
		for i := range n {
			c := newClient(fmt.Sprintf("m%d", i), "t0", "t1")
			s.clients[c.id] = c
			s.join(c)
		}
		s.converge()

		held := map[string]map[tp]bool{}
		for key, c := range s.clients {
			held[key] = c.held
		}
		c := newClient("new", "t0", "t1")
		s.clients["new"] = c
		s.join(c)
		keeps := map[string]bool{}
		for key := range held {
			target := targetSet(s.g.target[key])
			keeps[key] = true
			for k := range held[key] {
				keeps[key] = keeps[key] && target[k]
			}
		}
		for round := 0; round < convergeRounds; round++ {
			for _, key := range s.liveKeys() {
				c := s.clients[key]
				before := len(c.held)
				resp, err := s.g.Heartbeat(c.hbRequest(), s.topics, s.now)
				require.NoError(rt, err)
				c.take(resp)
				c.apply()
				if keeps[key] {
					require.GreaterOrEqual(rt, len(c.held), before, "%s lost partitions", key)
					for k := range held[key] {
						require.True(rt, c.held[k], "%s lost %v", key, k)
					}
					require.Equal(rt, s.g.targetEpoch, c.epoch, "%s waited", key)
				}
			}
		}
		require.Equal(rt, "Stable", s.g.State())
	})
}

// TestPropertyAssignors checks both assignors on random specs: valid,
// deterministic, and balanced (uniform overall for equal subscriptions,
// range per topic).
func TestPropertyAssignors(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := Spec{Partitions: map[string]int32{}}
		nt := rapid.IntRange(1, 4).Draw(rt, "topics")
		for i := range nt {
			spec.Partitions[fmt.Sprintf("t%d", i)] = int32(rapid.IntRange(1, 20).Draw(rt, "count"))
		}
		nm := rapid.IntRange(1, 6).Draw(rt, "members")
		for i := range nm {
			ms := MemberSpec{ID: fmt.Sprintf("m%d", i), Topics: map[string]bool{}, Current: map[string][]int32{}}
			for topic, count := range spec.Partitions {
				if rapid.IntRange(0, 3).Draw(rt, "sub") > 0 {
					ms.Topics[topic] = true
				}
				// Current may be stale: out-of-range or unsubscribed
				// partitions, or partitions another member claims too.
				for p := int32(0); p < count+2; p++ {
					if rapid.IntRange(0, 4).Draw(rt, "cur") == 0 {
						ms.Current[topic] = append(ms.Current[topic], p)
					}
				}
			}
			spec.Members = append(spec.Members, ms)
		}
		for _, a := range Assignors() {
			first := a.Assign(spec)
			require.Equal(rt, first, a.Assign(spec), "%s is deterministic", a.Name())
			seen := map[tp]bool{}
			for _, ms := range spec.Members {
				for topic, ps := range first[ms.ID] {
					require.True(rt, ms.Topics[topic])
					for _, p := range ps {
						require.False(rt, seen[tp{topic, p}], "%s gave %s-%d twice", a.Name(), topic, p)
						require.Less(rt, p, spec.Partitions[topic])
						seen[tp{topic, p}] = true
					}
				}
			}
			for topic, count := range spec.Partitions {
				var subs []int
				for _, ms := range spec.Members {
					if ms.Topics[topic] {
						subs = append(subs, len(first[ms.ID][topic]))
					}
				}
				for p := int32(0); p < count && len(subs) > 0; p++ {
					require.True(rt, seen[tp{topic, p}], "%s left %s-%d out", a.Name(), topic, p)
				}
				if a.Name() == RangeAssignorName && len(subs) > 0 {
					sort.Ints(subs)
					require.LessOrEqual(rt, subs[len(subs)-1]-subs[0], 1, "range balances each topic: %v", subs)
				}
			}
			if a.Name() == UniformAssignorName {
				byKey := map[string][]int{}
				for _, ms := range spec.Members {
					n := 0
					for _, ps := range first[ms.ID] {
						n += len(ps)
					}
					key := strings.Join(sortedTopics(ms.Topics), ",")
					byKey[key] = append(byKey[key], n)
				}
				for key, cs := range byKey {
					sort.Ints(cs)
					require.LessOrEqual(rt, cs[len(cs)-1]-cs[0], 1, "uniform: %s got %v", key, cs)
				}
			}
		}
	})
}

// TestPropertyRangeKeepsCoPartitioning feeds the range assignor its own
// output through random membership changes and checks that two topics with
// the same partition count always give each member the same partitions.
func TestPropertyRangeKeepsCoPartitioning(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		count := int32(rapid.IntRange(1, 30).Draw(rt, "count"))
		spec := Spec{Partitions: map[string]int32{"left": count, "right": count}}
		prev := map[string]map[string][]int32{}
		for range rapid.IntRange(1, 8).Draw(rt, "rebalances") {
			spec.Members = nil
			for i := range 8 {
				if rapid.Bool().Draw(rt, "present") {
					id := fmt.Sprintf("m%d", i)
					spec.Members = append(spec.Members, MemberSpec{ID: id, Topics: map[string]bool{"left": true, "right": true}, Current: prev[id]})
				}
			}
			out := RangeAssignor{}.Assign(spec)
			for _, ms := range spec.Members {
				require.Equal(rt, out[ms.ID]["left"], out[ms.ID]["right"], "member %s", ms.ID)
			}
			prev = out
		}
	})
}
