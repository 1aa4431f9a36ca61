package cmd

import (
	"testing"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// A quorum whose members answer but has no raft leader is electing, not
// without a majority: the line must not say NO MAJORITY next to a
// controller the same output names as active.
func TestQuorumLineTellsElectionFromLostMajority(t *testing.T) {
	ok := quorumLine(&controllerv1.QuorumStatus{HasMajority: true, Voters: 3, Reachable: []int32{1, 2, 3}})
	require.Contains(t, ok, "majority (3 of 3")

	electing := quorumLine(&controllerv1.QuorumStatus{HasMajority: false, Voters: 3, Reachable: []int32{1, 2}, Unreachable: []int32{3}})
	require.Contains(t, electing, "ELECTING")
	require.NotContains(t, electing, "NO MAJORITY")

	lost := quorumLine(&controllerv1.QuorumStatus{HasMajority: false, Voters: 3, Reachable: []int32{1}, Unreachable: []int32{2, 3}})
	require.Contains(t, lost, "NO MAJORITY")
	require.Contains(t, lost, "2 needed")
}
