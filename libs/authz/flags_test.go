package authz_test

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/authz"
)

func TestFlags(t *testing.T) {
	parse := func(args ...string) (*authz.Flags, error) {
		var f authz.Flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.RegisterFlags(fs)
		require.NoError(t, fs.Parse(args))
		return &f, f.Validate()
	}
	f, err := parse()
	require.NoError(t, err)
	require.Nil(t, f.New(nil), "off by default: no authorizer")

	f, err = parse("--authz.enabled", "--authz.super-users", "User:admin; User:ops")
	require.NoError(t, err)
	a := f.New(nil)
	require.True(t, a.Enabled())
	require.True(t, a.Authorize(context.Background(), user("ops", ""), authz.Alter, authz.Cluster, authz.ClusterName))
	require.False(t, a.Authorize(context.Background(), user("alice", ""), authz.Read, authz.Topic, "t"))

	f, err = parse("--authz.enabled", "--authz.allow-everyone-if-no-acl-found")
	require.NoError(t, err)
	require.True(t, f.New(nil).Authorize(context.Background(), user("alice", ""), authz.Read, authz.Topic, "t"))

	_, err = parse("--authz.enabled", "--authz.super-users", "admin")
	require.ErrorContains(t, err, `"admin" is not a principal`)
	_, err = parse("--authz.enabled", "--authz.super-users", "User:*")
	require.Error(t, err)
	_, err = parse("--authz.super-users", "User:admin")
	require.ErrorContains(t, err, "only with --authz.enabled")
}
