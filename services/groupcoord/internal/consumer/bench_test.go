package consumer

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// joinResult measures one member joining a stable group.
type joinResult struct {
	heartbeats int // heartbeats from the join until every member has its target
	rounds     int // rounds of one heartbeat per member
	revoked    int // members that had to give partitions up
	moved      int // partitions that changed owner
}

// joinOneMore builds a stable group of members consumers on topics×perTopic
// partitions, adds one more and heartbeats in rounds (each member once, in
// id order, applying what it is told at once) until every member holds its
// target.
func joinOneMore(tb testing.TB, assignor string, members, topicCount int, perTopic int32) joinResult {
	g := NewGroup(testGroup, Config{DefaultAssignor: assignor})
	topics := fakeTopics{}
	var names []string
	for i := range topicCount {
		name := fmt.Sprintf("topic-%d", i)
		topics[name] = perTopic
		names = append(names, name)
	}
	var clients []*client
	now := t0
	for i := range members {
		c := newClient(fmt.Sprintf("member-%02d", i), names...)
		clients = append(clients, c)
		join(tb, g, c, topics, now)
	}
	for range convergeRounds {
		for _, c := range clients {
			beat(tb, g, c, topics, now)
		}
	}
	require.Equal(tb, "Stable", g.State())
	before := g.Owners()

	c := newClient(fmt.Sprintf("member-%02d", members), names...)
	clients = append(clients, c)
	join(tb, g, c, topics, now)
	res := joinResult{heartbeats: 1}
	revoked := map[string]bool{}
	done := func() bool {
		if g.State() != "Stable" {
			return false
		}
		for _, c := range clients {
			if !sameTPs(c.held, targetSet(g.target[c.id])) {
				return false
			}
		}
		return true
	}
	for !done() {
		res.rounds++
		require.LessOrEqual(tb, res.rounds, 10, "no convergence")
		for _, c := range clients {
			now = now.Add(time.Millisecond)
			beat(tb, g, c, topics, now)
			res.heartbeats++
			if g.members[c.id].state == stateUnrevoked {
				revoked[c.id] = true
			}
			if done() {
				break
			}
		}
	}
	res.revoked = len(revoked)
	for topic, ps := range g.Owners() {
		for p, id := range ps {
			if before[topic][p] != id {
				res.moved++
			}
		}
	}
	return res
}

func sameTPs(a, b map[tp]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestOneMoreMemberOn900Partitions records the KIP-848 anchor scenario: 10
// members on 9 topics of 100 partitions, one more joins.
func TestOneMoreMemberOn900Partitions(t *testing.T) {
	for _, a := range []string{UniformAssignorName, RangeAssignorName} {
		res := joinOneMore(t, a, 10, 9, 100)
		t.Logf("%s: %d heartbeats (%d rounds) until every member had its target; %d of 10 members revoked partitions; %d of 900 partitions moved",
			a, res.heartbeats, res.rounds, res.revoked, res.moved)
		require.LessOrEqual(t, res.rounds, 3)
		if a == UniformAssignorName {
			require.LessOrEqual(t, res.moved, 82, "uniform moves only what the newcomer gets")
		}
	}
}

func BenchmarkOneMoreMemberOn900Partitions(b *testing.B) {
	for _, a := range []string{UniformAssignorName, RangeAssignorName} {
		b.Run(a, func(b *testing.B) {
			var res joinResult
			for b.Loop() {
				res = joinOneMore(b, a, 10, 9, 100)
			}
			b.ReportMetric(float64(res.heartbeats), "heartbeats")
			b.ReportMetric(float64(res.rounds), "rounds")
			b.ReportMetric(float64(res.revoked), "revoking-members")
			b.ReportMetric(float64(res.moved), "moved-partitions")
		})
	}
}

// BenchmarkHeartbeatStable measures one steady-state heartbeat of a member
// of an 11-member group on 900 partitions.
func BenchmarkHeartbeatStable(b *testing.B) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{}
	var names []string
	for i := range 9 {
		name := fmt.Sprintf("topic-%d", i)
		topics[name] = 100
		names = append(names, name)
	}
	var clients []*client
	for i := range 11 {
		c := newClient(fmt.Sprintf("member-%02d", i), names...)
		clients = append(clients, c)
		join(b, g, c, topics, t0)
	}
	for range convergeRounds {
		for _, c := range clients {
			beat(b, g, c, topics, t0)
		}
	}
	req := clients[0].hbRequest()
	b.ResetTimer()
	for b.Loop() {
		if _, err := g.Heartbeat(req, topics, t0); err != nil {
			b.Fatal(err)
		}
	}
}
