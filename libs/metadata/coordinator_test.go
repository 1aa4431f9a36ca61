package metadata

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
)

func coordImage(leaderRoles []string, coordinators ...int32) *Image {
	img := Empty()
	alive := commonv1.BrokerState_BROKER_STATE_ALIVE
	img.Brokers[1] = &commonv1.Broker{Id: 1, Roles: leaderRoles, State: alive}
	for _, id := range coordinators {
		img.Brokers[id] = &commonv1.Broker{Id: id, Roles: []string{"group-coordinator"}, State: alive}
	}
	t := &Topic{Name: "__consumer_offsets", Internal: true}
	for p := int32(0); p < 50; p++ {
		t.Partitions = append(t.Partitions, &commonv1.PartitionState{Topic: t.Name, Partition: p, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}})
	}
	img.Topics[t.Name] = t
	return img
}

func TestCoordinatorIsTheLeaderWhenItRunsTheRole(t *testing.T) {
	img := coordImage([]string{"storage-node", "group-coordinator"}, 7)
	b, atLeader := img.CoordinatorOf("__consumer_offsets", 3, "group-coordinator")
	require.True(t, atLeader)
	require.Equal(t, int32(1), b.GetId())
}

func TestCoordinatorsOfTheirOwnShareAndMoveLittle(t *testing.T) {
	img := coordImage([]string{"storage-node", "replication"}, 11, 12, 13)
	owners := func(img *Image) map[int32]int32 {
		out := map[int32]int32{}
		for p := int32(0); p < 50; p++ {
			b, atLeader := img.CoordinatorOf("__consumer_offsets", p, "group-coordinator")
			require.False(t, atLeader)
			require.NotNil(t, b)
			out[p] = b.GetId()
		}
		return out
	}
	before := owners(img)
	count := map[int32]int{}
	for _, n := range before {
		count[n]++
	}
	for _, n := range []int32{11, 12, 13} {
		require.GreaterOrEqual(t, count[n], 8, "node %d's share of 50 partitions over 3 nodes: %v", n, count)
	}
	// Node 12 dies: only its partitions move.
	img.Brokers[12] = &commonv1.Broker{Id: 12, Roles: []string{"group-coordinator"}, State: commonv1.BrokerState_BROKER_STATE_FENCED}
	after := owners(img)
	for p, n := range before {
		if n != 12 {
			require.Equal(t, n, after[p], "partition %d moved although its coordinator lives", p)
		} else {
			require.NotEqual(t, int32(12), after[p])
		}
	}
	// No coordinator process at all: nobody.
	img = coordImage([]string{"storage-node"})
	b, _ := img.CoordinatorOf("__consumer_offsets", 0, "group-coordinator")
	require.Nil(t, b)
}

// AnyOf picks one live process of the role, the same from equal images,
// another one only when it dies, and nil when none lives.
func TestAnyOfIsStableAndLive(t *testing.T) {
	img := coordImage([]string{"storage-node", "transaction-coordinator"}, 11, 12, 13)
	img.Brokers[12].Roles = []string{"transaction-coordinator"}
	img.Brokers[13].Roles = []string{"transaction-coordinator"}
	first := img.AnyOf("transaction-coordinator")
	require.NotNil(t, first)
	require.Contains(t, []int32{1, 12, 13}, first.GetId(), "node 11 does not run the role")
	for range 5 {
		require.Equal(t, first.GetId(), img.AnyOf("transaction-coordinator").GetId())
	}
	img.Brokers[first.GetId()].State = commonv1.BrokerState_BROKER_STATE_FENCED
	second := img.AnyOf("transaction-coordinator")
	require.NotNil(t, second)
	require.NotEqual(t, first.GetId(), second.GetId())
	for _, id := range []int32{1, 12, 13} {
		img.Brokers[id].State = commonv1.BrokerState_BROKER_STATE_FENCED
	}
	require.Nil(t, img.AnyOf("transaction-coordinator"))
}
