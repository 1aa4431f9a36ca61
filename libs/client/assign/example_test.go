package assign_test

import (
	"fmt"

	"github.com/sluice-io/sluice/libs/client/assign"
)

// A member joins a group of one that used cooperative-sticky: the first
// round only takes partitions away from their owner, the second hands them
// to the newcomer.
func Example() {
	a := assign.CooperativeSticky()
	partitions := map[string]int32{"orders": 4}

	// Each member sends its subscription in JoinGroup; the leader decodes
	// them all.
	join := map[string][]byte{
		"m-1": assign.EncodeSubscription(a, []string{"orders"}, map[string][]int32{"orders": {0, 1, 2, 3}}, 1, ""),
		"m-2": assign.EncodeSubscription(a, []string{"orders"}, nil, -1, ""),
	}
	var members []assign.Member
	for _, id := range []string{"m-1", "m-2"} {
		m, err := assign.DecodeSubscription(id, "", join[id])
		if err != nil {
			panic(err)
		}
		members = append(members, m)
	}
	first := a.Assign(members, partitions)
	fmt.Println("first round: ", first["m-1"], first["m-2"])

	// m-1 revokes partitions 2 and 3 and rejoins; the group is now in
	// generation 2.
	for i := range members {
		members[i].Owned, members[i].Generation = first[members[i].ID], 2
	}
	second := a.Assign(members, partitions)
	fmt.Println("second round:", second["m-1"], second["m-2"])

	// The leader sends each member its share in SyncGroup.
	got, err := assign.DecodeAssignment(assign.EncodeAssignment(second["m-2"], nil))
	if err != nil {
		panic(err)
	}
	fmt.Println("m-2 reads:   ", got)
	// Output:
	// first round:  map[orders:[0 1]] map[]
	// second round: map[orders:[0 1]] map[orders:[2 3]]
	// m-2 reads:    map[orders:[2 3]]
}
