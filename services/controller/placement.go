package controller

import (
	"fmt"
	"slices"
	"sort"
)

// node is a storage node that can hold replicas.
type node struct {
	id   int32
	rack string
}

// assignReplicas places numPartitions new partitions (numbered from
// firstPartition) with rf replicas each on nodes, following Kafka's
// placement: nodes are ordered so that racks alternate, partition p's first
// replica (its preferred leader) is node (start+p) mod n, and the other
// replicas follow at a shift that grows every n partitions, so leaders and
// replicas spread evenly. With racks, each partition's replicas cover as
// many racks as possible. start lets the caller begin at the node that leads
// the fewest partitions.
func assignReplicas(nodes []node, numPartitions, rf, firstPartition, start int) ([][]int32, error) {
	n := len(nodes)
	if rf < 1 {
		return nil, fmt.Errorf("replication factor %d must be at least 1", rf)
	}
	if rf > n {
		return nil, fmt.Errorf("replication factor %d is larger than the %d live storage nodes", rf, n)
	}
	list := rackAlternated(nodes)
	racks := map[string]bool{}
	for _, nd := range list {
		racks[nd.rack] = true
	}
	out := make([][]int32, 0, numPartitions)
	for i := range numPartitions {
		p := firstPartition + i
		shift := p / n
		first := (p + start) % n
		replicas := []int32{list[first].id}
		used := map[string]bool{list[first].rack: true}
		// Two passes: first only nodes on racks not used yet, then any.
		for pass := 0; pass < 2 && len(replicas) < rf; pass++ {
			for k := 0; k < n-1 && len(replicas) < rf; k++ {
				idx := (first + 1 + (shift+k)%max(n-1, 1)) % n
				cand := list[idx]
				if slices.Contains(replicas, cand.id) {
					continue
				}
				if pass == 0 && used[cand.rack] && len(used) < len(racks) {
					continue
				}
				replicas = append(replicas, cand.id)
				used[cand.rack] = true
			}
		}
		out = append(out, replicas)
	}
	return out, nil
}

// rackAlternated orders nodes by id within each rack, then interleaves the
// racks: racks a:[1,2], b:[3,4], c:[5] give 1,3,5,2,4.
func rackAlternated(nodes []node) []node {
	byRack := map[string][]node{}
	var rackNames []string
	for _, nd := range nodes {
		if _, ok := byRack[nd.rack]; !ok {
			rackNames = append(rackNames, nd.rack)
		}
		byRack[nd.rack] = append(byRack[nd.rack], nd)
	}
	sort.Strings(rackNames)
	for _, r := range rackNames {
		sort.Slice(byRack[r], func(i, j int) bool { return byRack[r][i].id < byRack[r][j].id })
	}
	out := make([]node, 0, len(nodes))
	for i := 0; len(out) < len(nodes); i++ {
		for _, r := range rackNames {
			if i < len(byRack[r]) {
				out = append(out, byRack[r][i])
			}
		}
	}
	return out
}

// leastLoadedStart returns the position, in rack-alternated order, of the
// node that is preferred leader of the fewest partitions.
func leastLoadedStart(nodes []node, preferredCount map[int32]int) int {
	list := rackAlternated(nodes)
	best := 0
	for i, nd := range list {
		if preferredCount[nd.id] < preferredCount[list[best].id] {
			best = i
		}
	}
	return best
}
