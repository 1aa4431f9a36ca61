package metastore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) {
	testutil.VerifyNoLeaks(m,
		// etcd's peer transport keeps idle HTTP keep-alive connections between
		// members open after Close; they belong to etcd and end with their
		// idle timeout.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("github.com/soheilhy/cmux.(*MuxConn).Read"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	)
}

func TestSingleMemberPersistsAcrossRestart(t *testing.T) {
	ctx := context.Background()
	cfg := metastoretest.Config(t)
	dir := t.TempDir()
	st, err := metastore.Open(ctx, cfg, "c1", dir, log.Discard())
	require.NoError(t, err)
	_, err = st.Client.Put(ctx, st.Key("cluster/id"), "abc")
	require.NoError(t, err)
	members, err := st.Members(ctx)
	require.NoError(t, err)
	require.Len(t, members, 1)
	require.Equal(t, "c1", members[0].Name)
	require.True(t, members[0].IsLeader)
	require.True(t, st.IsRaftLeader())
	require.NoError(t, st.Close())

	st, err = metastore.Open(ctx, cfg, "c1", dir, log.Discard())
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	resp, err := st.Client.Get(ctx, st.Key("cluster/id"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, "abc", string(resp.Kvs[0].Value))
}

func TestThreeMemberQuorum(t *testing.T) {
	ctx := context.Background()
	stores := metastoretest.Stores(metastoretest.StartQuorum(t, 3))

	_, err := stores[0].Client.Put(ctx, stores[0].Key("k"), "v")
	require.NoError(t, err)
	resp, err := stores[2].Client.Get(ctx, stores[2].Key("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(resp.Kvs[0].Value))

	members, err := stores[1].Members(ctx)
	require.NoError(t, err)
	require.Len(t, members, 3)
	leaders := 0
	for _, m := range members {
		if m.IsLeader {
			leaders++
		}
	}
	require.Equal(t, 1, leaders)
}

func TestBadConfigIsRefused(t *testing.T) {
	cfg := metastoretest.Config(t)
	cfg.InitialCluster = "c1=127.0.0.1:1"
	_, err := metastore.Open(context.Background(), cfg, "c1", t.TempDir(), log.Discard())
	require.ErrorContains(t, err, "no valid http(s)://host:port URL")
}
