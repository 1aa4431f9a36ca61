package consumer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func members(ids ...string) []MemberSpec {
	var out []MemberSpec
	for _, id := range ids {
		out = append(out, MemberSpec{ID: id, Topics: map[string]bool{"a": true, "b": true}})
	}
	return out
}

func TestRangeAssignsContiguousRanges(t *testing.T) {
	out := RangeAssignor{}.Assign(Spec{Members: members("m1", "m2", "m3"), Partitions: map[string]int32{"a": 7, "b": 7}})
	require.Equal(t, map[string][]int32{"a": {0, 1, 2}, "b": {0, 1, 2}}, out["m1"])
	require.Equal(t, map[string][]int32{"a": {3, 4}, "b": {3, 4}}, out["m2"])
	require.Equal(t, map[string][]int32{"a": {5, 6}, "b": {5, 6}}, out["m3"])
}

func TestRangeIsSticky(t *testing.T) {
	spec := Spec{Members: members("m1", "m2", "m3"), Partitions: map[string]int32{"a": 6}}
	spec.Members[0].Current = map[string][]int32{"a": {4, 5}}
	spec.Members[1].Current = map[string][]int32{"a": {0, 1, 2, 3}}
	out := RangeAssignor{}.Assign(spec)
	require.Equal(t, []int32{4, 5}, out["m1"]["a"])
	require.Equal(t, []int32{0, 1}, out["m2"]["a"], "m2 keeps its lowest two")
	require.Equal(t, []int32{2, 3}, out["m3"]["a"])
}

func TestUniformIsStickyAndBalanced(t *testing.T) {
	spec := Spec{Members: members("m1", "m2", "m3"), Partitions: map[string]int32{"a": 4, "b": 2}}
	spec.Members[0].Current = map[string][]int32{"a": {0, 1, 2}, "b": {0, 1}}
	spec.Members[1].Current = map[string][]int32{"a": {3}}
	out := UniformAssignor{}.Assign(spec)
	require.Equal(t, map[string][]int32{"a": {0, 1}}, out["m1"], "m1 gives up its last partitions")
	require.Equal(t, map[string][]int32{"a": {2, 3}}, out["m2"], "m2 keeps a-3")
	require.Equal(t, map[string][]int32{"b": {0, 1}}, out["m3"])
}

func TestUniformHonoursSubscriptions(t *testing.T) {
	spec := Spec{Members: members("m1", "m2"), Partitions: map[string]int32{"a": 4, "b": 4}}
	spec.Members[1].Topics = map[string]bool{"b": true}
	out := UniformAssignor{}.Assign(spec)
	require.Equal(t, map[string][]int32{"a": {0, 1, 2, 3}}, out["m1"])
	require.Equal(t, map[string][]int32{"b": {0, 1, 2, 3}}, out["m2"])
}
