package metastore_test

import (
	"context"
	"net"
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

// A member that listens on an IP address but is known to its peers by name
// (as in containers, where it listens on the wildcard address): the
// advertised names are what the member list holds, the initial cluster
// names it by them, and its quorum status probes them.
func TestAdvertisedNames(t *testing.T) {
	ctx := context.Background()
	cfg := metastoretest.Config(t)
	_, cport, err := net.SplitHostPort(cfg.ClientListen)
	require.NoError(t, err)
	_, pport, err := net.SplitHostPort(cfg.PeerListen)
	require.NoError(t, err)
	cfg.ClientAdvertise = "localhost:" + cport
	cfg.PeerAdvertise = "localhost:" + pport
	cfg.InitialCluster = "c1=http://localhost:" + pport
	st, err := metastore.Open(ctx, cfg, "c1", t.TempDir(), log.Discard())
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	members, err := st.Members(ctx)
	require.NoError(t, err)
	require.Len(t, members, 1)
	require.Equal(t, []string{"http://localhost:" + pport}, members[0].PeerURLs)
	require.Equal(t, "http://localhost:"+cport, members[0].ClientURL)
	q := st.Quorum(ctx)
	require.True(t, q.HasMajority(), "%+v", q)

	cfg.PeerAdvertise = "0.0.0.0:" + pport
	_, err = metastore.Open(ctx, cfg, "c1", t.TempDir(), log.Discard())
	require.ErrorContains(t, err, "peer-advertise")
}
