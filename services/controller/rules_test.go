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

func TestReconcileOrUncleanElectsOutOfSyncReplicaOnlyWhenAllowed(t *testing.T) {
	// The leader 1 and the other ISR member 2 are down; 3 is alive but out
	// of sync.
	live := states(map[int32]nodeState{1: nodeFenced, 2: nodeGone, 3: nodeAlive})
	p := ps(1, []int32{1, 2, 3}, []int32{1, 2})

	next, changed, elected := reconcileOrUnclean(p, live, 1, false, false)
	require.True(t, changed)
	require.False(t, elected)
	require.Equal(t, int32(-1), next.GetLeaderId(), "without unclean election the partition stays leaderless")
	require.Equal(t, []int32{1, 2}, next.GetIsr())

	next, changed, elected = reconcileOrUnclean(p, live, 1, false, true)
	require.True(t, changed)
	require.True(t, elected)
	require.Equal(t, int32(3), next.GetLeaderId())
	require.Equal(t, []int32{3}, next.GetIsr(), "the new leader is the whole ISR")
	require.Empty(t, next.GetEligibleLeaderReplicas())
	require.Equal(t, p.GetLeaderEpoch()+1, next.GetLeaderEpoch(), "one leader epoch bump")
	require.Equal(t, p.GetPartitionEpoch()+1, next.GetPartitionEpoch(), "one partition epoch bump")

	// Once elected, nothing more happens while 3 stays alive.
	again, changed, elected := reconcileOrUnclean(next, live, 1, false, true)
	require.False(t, changed)
	require.False(t, elected)
	require.Same(t, next, again)

	// A live in-sync replica always wins over an unclean election.
	live2 := states(map[int32]nodeState{1: nodeFenced, 2: nodeAlive, 3: nodeAlive})
	next, _, elected = reconcileOrUnclean(p, live2, 1, false, true)
	require.False(t, elected)
	require.Equal(t, int32(2), next.GetLeaderId())

	// So does an eligible leader replica (KIP-966).
	withELR := ps(1, []int32{1, 2, 3}, []int32{1})
	withELR.EligibleLeaderReplicas = []int32{2}
	next, _, elected = reconcileOrUnclean(withELR, live2, 2, false, true)
	require.False(t, elected)
	require.Equal(t, int32(2), next.GetLeaderId())

	// No live replica at all: nothing to elect.
	none := states(map[int32]nodeState{1: nodeFenced})
	next, _, elected = reconcileOrUnclean(p, none, 1, false, true)
	require.False(t, elected)
	require.Equal(t, int32(-1), next.GetLeaderId())
}

// The controller's reconciler reads unclean.leader.election.enable per topic,
// falling back to the cluster default, and with the default (false) leaves a
// partition without a live in-sync replica leaderless.
func TestReconcilePartitionFollowsUncleanElectionConfig(t *testing.T) {
	broker := func(id int32, s commonv1.BrokerState) *versioned[*metastorev1.BrokerRecord] {
		return &versioned[*metastorev1.BrokerRecord]{val: &metastorev1.BrokerRecord{Broker: &commonv1.Broker{Id: id, State: s}}, modRev: 1}
	}
	for _, tc := range []struct {
		name           string
		topic, cluster map[string]string
		want           int32
	}{
		{"default", nil, nil, -1},
		{"topic on", map[string]string{"unclean.leader.election.enable": "true"}, nil, 3},
		{"cluster on", nil, map[string]string{"unclean.leader.election.enable": "true"}, 3},
		{"topic off overrides cluster on", map[string]string{"unclean.leader.election.enable": "false"},
			map[string]string{"unclean.leader.election.enable": "true"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState()
			st.brokers[1] = broker(1, commonv1.BrokerState_BROKER_STATE_FENCED)
			st.brokers[3] = broker(3, commonv1.BrokerState_BROKER_STATE_ALIVE)
			st.topics["t"] = &versioned[*metastorev1.TopicRecord]{val: &metastorev1.TopicRecord{Name: "t", NumPartitions: 1, Configs: tc.topic}, modRev: 1}
			st.clusterConfigs = versioned[*metastorev1.ConfigRecord]{val: &metastorev1.ConfigRecord{Configs: tc.cluster}, modRev: 1}
			rec := &versioned[*metastorev1.PartitionRecord]{val: &metastorev1.PartitionRecord{State: ps(1, []int32{1, 2, 3}, []int32{1, 2})}, modRev: 7}
			st.partitions["t"] = map[int32]*versioned[*metastorev1.PartitionRecord]{0: rec}

			w := st.reconcilePartition("t", 0, rec, false)
			require.NotNil(t, w, "the dead leader must be replaced or removed")
			s := w.rec.GetState()
			require.Equal(t, tc.want, s.GetLeaderId())
			require.Equal(t, tc.want >= 0, w.unclean)
			require.Equal(t, int64(7), w.modRev)
			if tc.want >= 0 {
				require.Equal(t, []int32{tc.want}, s.GetIsr())
				require.Equal(t, "unclean leader election", w.why)
			} else {
				require.Equal(t, []int32{1, 2}, s.GetIsr(), "the ISR is kept so a returning member can lead")
			}
			require.Equal(t, int32(6), s.GetLeaderEpoch())
		})
	}
}
