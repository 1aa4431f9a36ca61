package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRackAlternated(t *testing.T) {
	got := rackAlternated([]node{{1, "a"}, {2, "a"}, {3, "b"}, {4, "b"}, {5, "c"}})
	var ids []int32
	for _, n := range got {
		ids = append(ids, n.id)
	}
	require.Equal(t, []int32{1, 3, 5, 2, 4}, ids)
}

func TestAssignSpreadsLeadersAndReplicasEvenly(t *testing.T) {
	for _, tc := range []struct{ nodes, partitions, rf int }{{3, 6, 3}, {3, 30, 2}, {5, 50, 3}, {6, 12, 3}, {4, 7, 1}} {
		var nodes []node
		for i := range tc.nodes {
			nodes = append(nodes, node{id: int32(i + 1)})
		}
		asg, err := assignReplicas(nodes, tc.partitions, tc.rf, 0, 0)
		require.NoError(t, err)
		require.Len(t, asg, tc.partitions)
		leaders, replicas := map[int32]int{}, map[int32]int{}
		for _, r := range asg {
			require.Len(t, r, tc.rf)
			seen := map[int32]bool{}
			for _, id := range r {
				require.False(t, seen[id], "replica %d twice in %v", id, r)
				seen[id] = true
				replicas[id]++
			}
			leaders[r[0]]++
		}
		require.LessOrEqual(t, spread(leaders, tc.nodes), 1, "leaders %v", leaders)
		require.LessOrEqual(t, spread(replicas, tc.nodes), tc.rf, "replicas %v", replicas)
	}
}

func spread(counts map[int32]int, n int) int {
	lo, hi := 1<<30, 0
	for i := 1; i <= n; i++ {
		c := counts[int32(i)]
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi - lo
}

func TestAssignCoversRacks(t *testing.T) {
	nodes := []node{{1, "a"}, {2, "a"}, {3, "b"}, {4, "b"}, {5, "c"}, {6, "c"}}
	rack := map[int32]string{}
	for _, n := range nodes {
		rack[n.id] = n.rack
	}
	asg, err := assignReplicas(nodes, 24, 3, 0, 2)
	require.NoError(t, err)
	for _, r := range asg {
		racks := map[string]bool{}
		for _, id := range r {
			racks[rack[id]] = true
		}
		require.Len(t, racks, 3, "partition replicas %v must span the three racks", r)
	}
	// Fewer racks than replicas: every rack used, then any node.
	asg, err = assignReplicas([]node{{1, "a"}, {2, "a"}, {3, "b"}}, 3, 3, 0, 0)
	require.NoError(t, err)
	for _, r := range asg {
		require.ElementsMatch(t, []int32{1, 2, 3}, r)
	}
}

func TestAssignRefusesTooFewNodes(t *testing.T) {
	_, err := assignReplicas([]node{{1, ""}, {2, ""}}, 1, 3, 0, 0)
	require.ErrorContains(t, err, "replication factor 3 is larger than the 2 live storage nodes")
}

func TestLeastLoadedStart(t *testing.T) {
	nodes := []node{{1, ""}, {2, ""}, {3, ""}}
	require.Equal(t, 2, leastLoadedStart(nodes, map[int32]int{1: 4, 2: 4, 3: 1}))
}
