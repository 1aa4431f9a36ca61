package consumer_test

import (
	"fmt"
	"time"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/services/groupcoord/internal/consumer"
)

type topics map[string]int32

func (t topics) Partitions(name string) int32 { return t[name] }

func (t topics) Names() []string {
	var out []string
	for name := range t {
		out = append(out, name)
	}
	return out
}

// A member joins with epoch 0 and then heartbeats with the epoch it got,
// reporting what it owns; the coordinator answers with the assignment only
// when it changed.
func ExampleGroup() {
	g := consumer.NewGroup("orders-app", consumer.Config{})
	view := topics{"orders": 3}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	resp, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{
		GroupId:              "orders-app",
		MemberId:             "member-a",
		MemberEpoch:          0,
		RebalanceTimeoutMs:   300_000,
		SubscribedTopicNames: []string{"orders"},
	}, view, now)
	if err != nil {
		panic(err)
	}
	for _, tp := range resp.GetAssignment().GetTopicPartitions() {
		fmt.Println(resp.GetMemberEpoch(), tp.GetTopic(), tp.GetPartitions())
	}

	resp, err = g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{
		GroupId:         "orders-app",
		MemberId:        "member-a",
		MemberEpoch:     resp.GetMemberEpoch(),
		OwnedPartitions: resp.GetAssignment().GetTopicPartitions(),
	}, view, now.Add(5*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.GetMemberEpoch(), resp.Assignment == nil, g.State())
	// Output:
	// 1 orders [0 1 2]
	// 1 true Stable
}
