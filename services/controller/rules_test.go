package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func states(m map[int32]nodeState) liveness {
	return func(id int32) nodeState {
		if s, ok := m[id]; ok {
			return s
		}
		return nodeGone
	}
}

func ps(leader int32, replicas, isr []int32) *commonv1.PartitionState {
	return &commonv1.PartitionState{Topic: "t", LeaderId: leader, LeaderEpoch: 5, PartitionEpoch: 9, Replicas: replicas, Isr: isr}
}

func TestReconcileMovesLeaderToISR(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeFenced, 2: nodeAlive, 3: nodeAlive})
	next, changed := reconcile(ps(1, []int32{1, 2, 3}, []int32{1, 2, 3}), live, 1, false)
	require.True(t, changed)
	require.Equal(t, int32(2), next.GetLeaderId())
	require.Equal(t, []int32{2, 3}, next.GetIsr())
	require.Equal(t, int32(6), next.GetLeaderEpoch())
	require.Equal(t, int32(10), next.GetPartitionEpoch())
}

func TestReconcileNeverElectsOutOfSync(t *testing.T) {
	// Only 3 is alive and it is not in the ISR: no leader, ISR kept so a
	// returning member can lead again.
	live := states(map[int32]nodeState{1: nodeFenced, 2: nodeGone, 3: nodeAlive})
	next, changed := reconcile(ps(1, []int32{1, 2, 3}, []int32{1, 2}), live, 1, false)
	require.True(t, changed)
	require.Equal(t, int32(-1), next.GetLeaderId())
	require.Equal(t, []int32{1, 2}, next.GetIsr())
	// Member 2 returns: it leads.
	live = states(map[int32]nodeState{1: nodeFenced, 2: nodeAlive, 3: nodeAlive})
	next2, changed := reconcile(next, live, 1, false)
	require.True(t, changed)
	require.Equal(t, int32(2), next2.GetLeaderId())
	require.Equal(t, []int32{2}, next2.GetIsr())
	require.Equal(t, next.GetLeaderEpoch()+1, next2.GetLeaderEpoch())
}

func TestReconcileStableStateChangesNothing(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeAlive, 2: nodeAlive})
	p := ps(2, []int32{1, 2}, []int32{1, 2})
	next, changed := reconcile(p, live, 1, false)
	require.False(t, changed)
	require.Same(t, p, next)
	// A preferred election moves leadership to replica 1.
	next, changed = reconcile(p, live, 1, true)
	require.True(t, changed)
	require.Equal(t, int32(1), next.GetLeaderId())
}

func TestReconcileShuttingDownLeaderHandsOver(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeShuttingDown, 2: nodeAlive})
	next, _ := reconcile(ps(1, []int32{1, 2}, []int32{1, 2}), live, 1, false)
	require.Equal(t, int32(2), next.GetLeaderId())
	require.Equal(t, []int32{2}, next.GetIsr())
	// As the only in-sync replica it keeps leading until it stops.
	next, changed := reconcile(ps(1, []int32{1, 2}, []int32{1}), live, 1, false)
	require.False(t, changed)
	require.Equal(t, int32(1), next.GetLeaderId())
}

func TestEligibleLeaderReplicas(t *testing.T) {
	// min.insync.replicas=2: when 2 leaves an ISR of {1,2}, the ISR is below
	// the minimum, the high watermark stops, and 2 keeps every committed
	// record: it becomes an eligible leader replica.
	live := states(map[int32]nodeState{1: nodeAlive, 2: nodeFenced, 3: nodeAlive})
	next, _ := reconcile(ps(1, []int32{1, 2, 3}, []int32{1, 2}), live, 2, false)
	require.Equal(t, []int32{1}, next.GetIsr())
	require.Equal(t, []int32{2}, next.GetEligibleLeaderReplicas())
	// Then the leader dies too and 2 comes back: 2 is elected from the ELR
	// even though it is not in the ISR; 3 (never in sync) is not.
	live = states(map[int32]nodeState{1: nodeFenced, 2: nodeAlive, 3: nodeAlive})
	next2, _ := reconcile(next, live, 2, false)
	require.Equal(t, int32(2), next2.GetLeaderId())
	require.Equal(t, []int32{2}, next2.GetIsr())
	require.Contains(t, next2.GetEligibleLeaderReplicas(), int32(1), "1 left the ISR below the minimum")
	// Back at the minimum, the ELR is cleared.
	change := &controllerv1.PartitionChange{Topic: "t", LeaderEpoch: next2.GetLeaderEpoch(), PartitionEpoch: next2.GetPartitionEpoch(), NewIsr: []int32{2, 3}}
	next3, err := applyISRChange(next2, 2, change, live, 2)
	require.Nil(t, err)
	require.Empty(t, next3.GetEligibleLeaderReplicas())
}

func TestUncleanElection(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeFenced, 2: nodeGone, 3: nodeAlive})
	p := ps(-1, []int32{1, 2, 3}, []int32{1})
	next, changed := electUnclean(p, live)
	require.True(t, changed)
	require.Equal(t, int32(3), next.GetLeaderId())
	require.Equal(t, []int32{3}, next.GetIsr())
	_, changed = electUnclean(next, live)
	require.False(t, changed, "a partition with a leader needs no election")
}

func TestApplyISRChangeIsCompareAndSwap(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeAlive, 2: nodeAlive, 3: nodeFenced})
	cur := ps(1, []int32{1, 2, 3}, []int32{1, 2})
	ch := func(le, pe int32, isr ...int32) *controllerv1.PartitionChange {
		return &controllerv1.PartitionChange{Topic: "t", LeaderEpoch: le, PartitionEpoch: pe, NewIsr: isr}
	}
	next, err := applyISRChange(cur, 1, ch(5, 9, 1), live, 1)
	require.Nil(t, err)
	require.Equal(t, []int32{1}, next.GetIsr())
	require.Equal(t, int32(10), next.GetPartitionEpoch())
	require.Equal(t, int32(5), next.GetLeaderEpoch(), "an ISR change keeps the leader epoch")

	for _, tc := range []struct {
		leader int32
		ch     *controllerv1.PartitionChange
		code   errs.Code
	}{
		{1, ch(4, 9, 1), errs.FencedLeaderEpoch},
		{1, ch(6, 9, 1), errs.UnknownLeaderEpoch},
		{1, ch(5, 8, 1), errs.InvalidUpdateVersion},
		{2, ch(5, 9, 2), errs.NotLeaderOrFollower},
		{1, ch(5, 9, 2), errs.InvalidRequest},             // leader missing
		{1, ch(5, 9, 1, 4), errs.InvalidRequest},          // not a replica
		{1, ch(5, 9, 1, 2, 3), errs.InvalidUpdateVersion}, // 3 is fenced: cannot join (KIP-841)
	} {
		_, err := applyISRChange(cur, tc.leader, tc.ch, live, 1)
		require.NotNil(t, err, "%+v", tc.ch)
		require.Equal(t, tc.code, err.Code, err.Error())
	}
}

func TestReassignmentLifecycle(t *testing.T) {
	live := states(map[int32]nodeState{1: nodeAlive, 2: nodeAlive, 3: nodeAlive, 4: nodeAlive})
	rec := &metastorev1.PartitionRecord{State: ps(1, []int32{1, 2}, []int32{1, 2})}
	started := startReassignment(rec, []int32{3, 4})
	s := started.GetState()
	require.Equal(t, []int32{3, 4, 1, 2}, s.GetReplicas())
	require.Equal(t, []int32{3, 4}, s.GetAddingReplicas())
	require.Equal(t, []int32{1, 2}, s.GetRemovingReplicas())
	require.Nil(t, finishReassignment(started, live, 1, false), "new replicas are not in sync yet")

	started.State.Isr = []int32{1, 2, 3, 4}
	done := finishReassignment(started, live, 1, false)
	require.NotNil(t, done)
	d := done.GetState()
	require.Equal(t, []int32{3, 4}, d.GetReplicas())
	require.Equal(t, []int32{3, 4}, d.GetIsr())
	require.Equal(t, int32(3), d.GetLeaderId(), "leadership moves to the new preferred replica")
	require.Empty(t, d.GetAddingReplicas())
	require.Empty(t, done.GetTargetReplicas())
	require.Greater(t, d.GetLeaderEpoch(), s.GetLeaderEpoch())

	// Cancelling returns to the original replicas.
	cancelled := finishReassignment(startReassignment(rec, []int32{3, 4}), live, 1, true)
	require.Equal(t, []int32{1, 2}, cancelled.GetState().GetReplicas())
	require.Equal(t, int32(1), cancelled.GetState().GetLeaderId())
}
