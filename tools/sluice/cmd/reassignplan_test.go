package cmd

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// sixOnThree is 6 partitions with 2 replicas over nodes 1-3, leaders spread.
func sixOnThree() map[planKey][]int32 {
	return map[planKey][]int32{
		{"t", 0}: {1, 2}, {"t", 1}: {2, 3}, {"t", 2}: {3, 1},
		{"t", 3}: {1, 3}, {"t", 4}: {2, 1}, {"t", 5}: {3, 2},
	}
}

func counts(a map[planKey][]int32) (replicas, leaders map[int32]int) {
	replicas, leaders = map[int32]int{}, map[int32]int{}
	for _, rs := range a {
		leaders[rs[0]]++
		for _, r := range rs {
			replicas[r]++
		}
	}
	return
}

func TestProposeScaleOut(t *testing.T) {
	cur := sixOnThree()
	next, changed, err := proposeAssignment(cur, []int32{1, 2, 3, 4})
	require.NoError(t, err)
	reps, leads := counts(next)
	for _, b := range []int32{1, 2, 3, 4} {
		require.Equal(t, 3, reps[b], "replicas on %d: %v", b, next)
		require.GreaterOrEqual(t, leads[b], 1)
		require.LessOrEqual(t, leads[b], 2)
	}
	// Node 4 needs 3 replicas; no more than that may be copied.
	require.Equal(t, 3, movedReplicas(cur, next))
	require.NotEmpty(t, changed)
	for k, rs := range next {
		require.Len(t, rs, 2)
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(rs))), 2, "%v: distinct replicas", k)
	}
}

func TestProposeDrain(t *testing.T) {
	cur := sixOnThree()
	// First scale out to 4 nodes, then drain node 3.
	four, _, err := proposeAssignment(cur, []int32{1, 2, 3, 4})
	require.NoError(t, err)
	next, _, err := proposeAssignment(four, []int32{1, 2, 4})
	require.NoError(t, err)
	reps, _ := counts(next)
	require.Zero(t, reps[3])
	require.Equal(t, 4, reps[1])
	require.Equal(t, 4, reps[2])
	require.Equal(t, 4, reps[4])
	// Only node 3's replicas move.
	_, before := counts(four)
	_ = before
	r3, _ := counts(four)
	require.Equal(t, r3[3], movedReplicas(four, next))
}

func TestProposeBalancedIsStable(t *testing.T) {
	cur := sixOnThree()
	next, changed, err := proposeAssignment(cur, []int32{1, 2, 3})
	require.NoError(t, err)
	require.Empty(t, changed, "a balanced assignment is left alone: %v", next)
}

func TestProposeRefusesTooFewBrokers(t *testing.T) {
	_, _, err := proposeAssignment(sixOnThree(), []int32{1})
	require.ErrorContains(t, err, "only 1 brokers")
}

func TestParsePlan(t *testing.T) {
	p, err := parsePlan([]byte(`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}`))
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2}, p.Partitions[0].Replicas)
	for _, bad := range []string{
		`{"version":2,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}`,
		`{"version":1,"partitions":[]}`,
		`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}`,
		`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}`,
		`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["any"]}]}`,
	} {
		_, err := parsePlan([]byte(bad))
		require.Error(t, err, fmt.Sprint(bad))
	}
}
