package assign

import (
	"fmt"
	"testing"
)

// benchGroup returns members subscribed to every topic (or, when mixed,
// every member to a third of them), owning a round-robin assignment made
// before one member joined.
func benchGroup(members, topics int, partitions int32, mixed bool) ([]Member, map[string]int32) {
	parts := make(map[string]int32, topics)
	var all []string
	for i := range topics {
		t := fmt.Sprintf("topic-%03d", i)
		parts[t] = partitions
		all = append(all, t)
	}
	ms := make([]Member, members)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("member-%04d", i), Topics: all, Generation: 7}
		if mixed {
			var sub []string
			for j, t := range all {
				if (i+j)%3 == 0 {
					sub = append(sub, t)
				}
			}
			ms[i].Topics = sub
		}
	}
	prior := RoundRobin().Assign(ms[1:], parts)
	for i := range ms[1:] {
		ms[i+1].Owned = prior[ms[i+1].ID]
	}
	return ms, parts
}

func BenchmarkSticky(b *testing.B) {
	for _, tc := range []struct {
		members, topics int
		partitions      int32
		mixed           bool
	}{
		{10, 10, 10, false},
		{100, 50, 20, false},
		{100, 50, 20, true},
		{200, 100, 50, false},
		{200, 100, 50, true},
		{500, 100, 50, false},
		{500, 100, 50, true},
	} {
		ms, parts := benchGroup(tc.members, tc.topics, tc.partitions, tc.mixed)
		b.Run(fmt.Sprintf("members=%d/partitions=%d/mixed=%v", tc.members, int32(tc.topics)*tc.partitions, tc.mixed), func(b *testing.B) {
			for b.Loop() {
				Sticky().Assign(ms, parts)
			}
		})
	}
}
