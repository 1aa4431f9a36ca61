package role_test

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/role"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want role.Set
	}{
		{"all", role.All},
		{"storage-node,controller", role.Set{role.Controller, role.StorageNode}},
		{"data", role.Set{role.StorageNode, role.Replication}},
		{"coordinators, controller", role.Set{role.Controller, role.GroupCoordinator, role.TransactionCoordinator}},
		{"replication", role.Set{role.Replication}},
		{"all,controller", role.All},
	} {
		got, err := role.Parse(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseRejects(t *testing.T) {
	_, err := role.Parse("storage")
	require.ErrorContains(t, err, `unknown role "storage"`)
	require.ErrorContains(t, err, "storage-node")
	_, err = role.Parse(" , ")
	require.ErrorContains(t, err, "no role given")
}

func TestSetIsFlagValue(t *testing.T) {
	var s role.Set
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&s, "roles", "")
	require.NoError(t, fs.Parse([]string{"--roles=controller,data"}))
	require.Equal(t, "controller,storage-node,replication", s.String())
	require.True(t, s.Has(role.Replication))
	require.False(t, s.Has(role.GroupCoordinator))
}
