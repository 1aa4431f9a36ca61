package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// A fault is counted under the role it hit, not under a process named in
// the rest of its detail (a partition lists every process it cut off from).
func TestFaultClassNamesTheRoleHit(t *testing.T) {
	for detail, want := range map[string]string{
		"coordinator of group g; isolate; cut from [controller-1 controller-2 storage-1]": "partition group coordinator",
		"replication worker; isolate; cut from [controller-1 storage-1]":                  "partition replication worker",
		"leader of t/0; isolate; cut from [controller-1]":                                 "partition storage leader",
		"active controller; subset; cut from [storage-1]":                                 "partition active controller",
		"standby controller; isolate; cut from [controller-2]":                            "partition controller",
		"follower of t/1; isolate; cut from [controller-1 storage-2]":                     "partition storage follower",
	} {
		require.Equal(t, want, faultClass(check.Fault{Kind: "partition", Detail: detail}), detail)
	}
	require.Equal(t, "partition (failed)", faultClass(check.Fault{Kind: "partition", Detail: "leader of t/0; failed: no route"}))
}
