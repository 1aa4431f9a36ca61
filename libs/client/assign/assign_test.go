package assign

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type plan = map[string]map[string][]int32

func TestByName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto RebalanceProtocol
	}{
		{"range", Eager},
		{"roundrobin", Eager},
		{"sticky", Eager},
		{"cooperative-sticky", Cooperative},
	} {
		a, ok := ByName(tc.name)
		require.True(t, ok, tc.name)
		require.Equal(t, tc.name, a.Name())
		require.Equal(t, tc.proto, a.Protocol(), tc.name)
	}
	_, ok := ByName("uniform")
	require.False(t, ok)
	require.Equal(t, "COOPERATIVE", Cooperative.String())
}

func TestRangeTwoMembersTwoTopics(t *testing.T) {
	// Kafka's RangeAssignor javadoc example.
	members := []Member{
		{ID: "c1", Topics: []string{"t0", "t1"}},
		{ID: "c0", Topics: []string{"t0", "t1"}},
	}
	got := Range().Assign(members, map[string]int32{"t0": 3, "t1": 3})
	require.Equal(t, plan{
		"c0": {"t0": {0, 1}, "t1": {0, 1}},
		"c1": {"t0": {2}, "t1": {2}},
	}, got)
}

func TestRangeStaticMembersFirst(t *testing.T) {
	// Kafka orders static members by instance id before dynamic ones
	// (AbstractPartitionAssignor.MemberInfo), so a static member keeps
	// its range across restarts that change its member id.
	members := []Member{
		{ID: "a", Topics: []string{"t"}},
		{ID: "z", InstanceID: "i2", Topics: []string{"t"}},
		{ID: "y", InstanceID: "i1", Topics: []string{"t"}},
	}
	got := Range().Assign(members, map[string]int32{"t": 5})
	require.Equal(t, plan{
		"y": {"t": {0, 1}},
		"z": {"t": {2, 3}},
		"a": {"t": {4}},
	}, got)
}

func TestRangeUnknownAndUnsubscribedTopics(t *testing.T) {
	members := []Member{
		{ID: "a", Topics: []string{"known", "unknown"}},
		{ID: "b", Topics: []string{"known"}},
		{ID: "c", Topics: []string{"other"}},
	}
	got := Range().Assign(members, map[string]int32{"known": 1, "other": 0, "nobody": 4})
	require.Equal(t, plan{"a": {"known": {0}}, "b": {}, "c": {}}, got)
}

func TestRoundRobinEqualSubscriptions(t *testing.T) {
	// Kafka's RoundRobinAssignor javadoc, first example.
	members := []Member{
		{ID: "c0", Topics: []string{"t0", "t1"}},
		{ID: "c1", Topics: []string{"t0", "t1"}},
	}
	got := RoundRobin().Assign(members, map[string]int32{"t0": 3, "t1": 3})
	require.Equal(t, plan{
		"c0": {"t0": {0, 2}, "t1": {1}},
		"c1": {"t0": {1}, "t1": {0, 2}},
	}, got)
}

func TestRoundRobinUnequalSubscriptions(t *testing.T) {
	// Kafka's RoundRobinAssignor javadoc, second example.
	members := []Member{
		{ID: "c2", Topics: []string{"t0", "t1", "t2"}},
		{ID: "c0", Topics: []string{"t0"}},
		{ID: "c1", Topics: []string{"t0", "t1"}},
	}
	got := RoundRobin().Assign(members, map[string]int32{"t0": 1, "t1": 2, "t2": 3})
	require.Equal(t, plan{
		"c0": {"t0": {0}},
		"c1": {"t1": {0}},
		"c2": {"t1": {1}, "t2": {0, 1, 2}},
	}, got)
}

func TestStickyMemberLeaves(t *testing.T) {
	// franz-go's StickyBalancer doc example: when M2 leaves, M0 and M1
	// keep everything and only M2's partitions move.
	members := []Member{
		{ID: "m0", Topics: []string{"t0", "t1", "t2"}, Owned: map[string][]int32{"t0": {0, 1, 2}}, Generation: 1},
		{ID: "m1", Topics: []string{"t0", "t1", "t2"}, Owned: map[string][]int32{"t1": {0, 1, 2}}, Generation: 1},
	}
	got := Sticky().Assign(members, map[string]int32{"t0": 3, "t1": 3, "t2": 3})
	require.Equal(t, []int32{0, 1, 2}, got["m0"]["t0"])
	require.Equal(t, []int32{0, 1, 2}, got["m1"]["t1"])
	require.Len(t, append(got["m0"]["t2"], got["m1"]["t2"]...), 3)
	require.ElementsMatch(t, []int{4, 5}, []int{count(got["m0"]), count(got["m1"])})
}

func TestStickyUnequalSubscriptions(t *testing.T) {
	// KIP-54's example: c0 subscribes to t0 only. Balance gives c0 all
	// of t0 and c1 all of t1, whatever c1 held before.
	members := []Member{
		{ID: "c0", Topics: []string{"t0"}, Generation: -1},
		{ID: "c1", Topics: []string{"t0", "t1"}, Owned: map[string][]int32{"t0": {0, 1}, "t1": {0, 1}}, Generation: 2},
	}
	got := Sticky().Assign(members, map[string]int32{"t0": 2, "t1": 2})
	require.Equal(t, plan{"c0": {"t0": {0, 1}}, "c1": {"t1": {0, 1}}}, got)
}

func TestStickyNewestGenerationWins(t *testing.T) {
	// b missed a rebalance and still claims p0 from generation 4; a owns
	// it in generation 5 and keeps it (KIP-341).
	members := []Member{
		{ID: "a", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0}}, Generation: 5},
		{ID: "b", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0, 1}}, Generation: 4},
	}
	got := Sticky().Assign(members, map[string]int32{"t": 2})
	require.Equal(t, plan{"a": {"t": {0}}, "b": {"t": {1}}}, got)
}

func TestStickySameGenerationConflictLosesClaim(t *testing.T) {
	// a and b both claim p1 in generation 3: neither claim counts, as in
	// Kafka, so p1 is free; a keeps p0 and b, the least loaded, gets p1.
	members := []Member{
		{ID: "a", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0, 1}}, Generation: 3},
		{ID: "b", Topics: []string{"t"}, Owned: map[string][]int32{"t": {1}}, Generation: 3},
	}
	got := Sticky().Assign(members, map[string]int32{"t": 3})
	require.Equal(t, plan{"a": {"t": {0, 2}}, "b": {"t": {1}}}, got)
}

func TestStickyDropsUnsubscribedAndVanishedPartitions(t *testing.T) {
	members := []Member{
		{ID: "a", Topics: []string{"t"}, Owned: map[string][]int32{"t": {3, 7}, "gone": {0}, "u": {0}}, Generation: 1},
		{ID: "b", Topics: []string{"t", "u"}, Generation: 1},
	}
	got := Sticky().Assign(members, map[string]int32{"t": 4, "u": 1})
	// p7 no longer exists; a stopped subscribing to u.
	require.Equal(t, []int32{3}, got["a"]["t"][len(got["a"]["t"])-1:])
	require.Equal(t, []int32{0}, got["b"]["u"])
	require.Equal(t, 5, count(got["a"])+count(got["b"]))
	require.InDelta(t, count(got["a"]), count(got["b"]), 1)
}

func TestCooperativeStickyTwoRounds(t *testing.T) {
	parts := map[string]int32{"t": 4}
	round1 := CooperativeSticky().Assign([]Member{
		{ID: "a", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0, 1, 2, 3}}, Generation: 1},
		{ID: "b", Topics: []string{"t"}, Generation: -1},
	}, parts)
	// b's two partitions are still a's: a revokes them first.
	require.Equal(t, plan{"a": {"t": {0, 1}}, "b": {}}, round1)

	round2 := CooperativeSticky().Assign([]Member{
		{ID: "a", Topics: []string{"t"}, Owned: round1["a"], Generation: 2},
		{ID: "b", Topics: []string{"t"}, Owned: round1["b"], Generation: 2},
	}, parts)
	require.Equal(t, plan{"a": {"t": {0, 1}}, "b": {"t": {2, 3}}}, round2)
}

func TestCooperativeStickyStaleClaimIsNoOwnership(t *testing.T) {
	// b claims p1 from generation 1 but a owns it in generation 2. The
	// plan moves p1 to b; b's stale claim must not pass for ownership,
	// or a and b would both consume p1 until a's next rebalance.
	members := []Member{
		{ID: "a", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0, 1}}, Generation: 2},
		{ID: "b", Topics: []string{"t"}, Owned: map[string][]int32{"t": {1}}, Generation: 1},
	}
	require.Equal(t, plan{"a": {"t": {0}}, "b": {"t": {1}}}, Sticky().Assign(members, map[string]int32{"t": 2}))
	require.Equal(t, plan{"a": {"t": {0}}, "b": {}}, CooperativeSticky().Assign(members, map[string]int32{"t": 2}))
}

func TestAssignNoMembersAndDuplicates(t *testing.T) {
	for _, a := range []Assignor{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
		require.Empty(t, a.Assign(nil, map[string]int32{"t": 3}), a.Name())
		got := a.Assign([]Member{
			{ID: "a", Topics: []string{"t"}},
			{ID: "a", Topics: []string{"t"}},
		}, map[string]int32{"t": 3})
		require.Equal(t, plan{"a": {"t": {0, 1, 2}}}, got, a.Name())
	}
}

func count(topics map[string][]int32) int {
	n := 0
	for _, ps := range topics {
		n += len(ps)
	}
	return n
}
