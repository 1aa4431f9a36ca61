package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/metastore"
)

func memberStates(ms []*controllerv1.ControllerMember) map[int32]controllerv1.ControllerState {
	out := map[int32]controllerv1.ControllerState{}
	for _, m := range ms {
		out[m.GetNodeId()] = m.GetState()
	}
	return out
}

// Every configured member is listed: one whose presence expired keeps the
// node id and address last seen, one never seen gets its id from the
// default member name.
func TestDescribeControllersListsEveryMember(t *testing.T) {
	c := &Controller{nodeID: 1}
	c.remember([]*controllerv1.ControllerMember{{NodeId: 2, Address: "h2:9090", EtcdMember: "controller-2"}})
	present := []*controllerv1.ControllerMember{
		{NodeId: 1, Address: "h1:9090", EtcdMember: "controller-1"},
		{NodeId: 4, Address: "h4:9090", EtcdMember: "controller-4"},
	}
	q := metastore.QuorumStatus{
		HasLeader: true, Voters: 4, ReachableVoters: 3,
		Members: []metastore.MemberStatus{
			{Name: "controller-1", Self: true, Reachable: true},
			{Name: "controller-2"},
			{Name: "controller-3", Reachable: true, Leader: true},
			{Name: "controller-4", Reachable: true},
		},
	}
	got := c.describeControllers(q, present, 4)
	require.Len(t, got, 4)
	require.Equal(t, map[int32]controllerv1.ControllerState{
		1: controllerv1.ControllerState_CONTROLLER_STATE_STANDBY,
		2: controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE,
		3: controllerv1.ControllerState_CONTROLLER_STATE_STANDBY,
		4: controllerv1.ControllerState_CONTROLLER_STATE_ACTIVE,
	}, memberStates(got))
	require.Equal(t, "h2:9090", got[1].GetAddress(), "the address last seen")
	require.Equal(t, controllerv1.EtcdRole_ETCD_ROLE_UNSPECIFIED, got[1].GetEtcdRole())
	require.Equal(t, controllerv1.EtcdRole_ETCD_ROLE_LEADER, got[2].GetEtcdRole())
	require.True(t, got[2].GetEtcdLeader())
	require.Equal(t, controllerv1.EtcdRole_ETCD_ROLE_FOLLOWER, got[3].GetEtcdRole())
	require.True(t, got[3].GetActive())

	reachable, unreachable := c.memberIDs(q)
	require.Equal(t, []int32{1, 3, 4}, reachable)
	require.Equal(t, []int32{2}, unreachable)
}

// Without a majority no controller is active, although the election key of
// a dead one remains.
func TestDescribeControllersWithoutMajority(t *testing.T) {
	c := &Controller{nodeID: 1}
	q := metastore.QuorumStatus{
		Voters: 3, ReachableVoters: 1,
		Members: []metastore.MemberStatus{
			{Name: "controller-1", Self: true, Reachable: true},
			{Name: "controller-2"},
			{Name: "controller-3"},
		},
	}
	present := []*controllerv1.ControllerMember{
		{NodeId: 1, EtcdMember: "controller-1"},
		{NodeId: 2, EtcdMember: "controller-2", Active: true},
	}
	got := c.describeControllers(q, present, 2)
	require.Equal(t, map[int32]controllerv1.ControllerState{
		1: controllerv1.ControllerState_CONTROLLER_STATE_STANDBY,
		2: controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE,
		3: controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE,
	}, memberStates(got))
	for _, m := range got {
		require.False(t, m.GetActive(), "node %d", m.GetNodeId())
	}
	s := c.quorumStatus(q)
	require.False(t, s.GetHasMajority())
	require.Equal(t, []int32{1}, s.GetReachable())
	require.Equal(t, []int32{2, 3}, s.GetUnreachable())
	require.Equal(t, int32(1), s.GetAnsweredBy())
}

// A raft election does not hide the active controller: while the local
// etcd member has no raft leader but a majority of the members answer, the
// holder of the election key is still named active (no leader can expire
// its lease meanwhile), and so it is while the local member knows a leader
// but the probe missed a slow member. Only no leader and no majority
// answering means no controller is active.
func TestDescribeControllersNamesActiveDuringRaftElection(t *testing.T) {
	c := &Controller{nodeID: 3}
	present := []*controllerv1.ControllerMember{
		{NodeId: 2, Address: "h2:9090", EtcdMember: "controller-2"},
		{NodeId: 3, Address: "h3:9090", EtcdMember: "controller-3"},
	}
	for _, tc := range []struct {
		name   string
		q      metastore.QuorumStatus
		active bool
	}{
		{"raft election under way", metastore.QuorumStatus{
			HasLeader: false, Voters: 3, ReachableVoters: 2,
			Members: []metastore.MemberStatus{
				{Name: "controller-1"}, // the paused raft leader
				{Name: "controller-2", Reachable: true},
				{Name: "controller-3", Self: true, Reachable: true},
			},
		}, true},
		{"probe missed a live member", metastore.QuorumStatus{
			HasLeader: true, Voters: 3, ReachableVoters: 1,
			Members: []metastore.MemberStatus{
				{Name: "controller-1"},
				{Name: "controller-2"},
				{Name: "controller-3", Self: true, Reachable: true},
			},
		}, true},
		{"no leader and no majority", metastore.QuorumStatus{
			HasLeader: false, Voters: 3, ReachableVoters: 1,
			Members: []metastore.MemberStatus{
				{Name: "controller-1"},
				{Name: "controller-2"},
				{Name: "controller-3", Self: true, Reachable: true},
			},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.describeControllers(tc.q, present, 2)
			require.Len(t, got, 3)
			require.Equal(t, tc.active, got[1].GetActive(), "%v", got)
			want := controllerv1.ControllerState_CONTROLLER_STATE_STANDBY
			if tc.active {
				want = controllerv1.ControllerState_CONTROLLER_STATE_ACTIVE
			}
			if !tc.q.Members[1].Reachable {
				want = controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE
			}
			require.Equal(t, want, got[1].GetState())
			require.False(t, got[0].GetActive())
			require.False(t, got[2].GetActive())
		})
	}
}
