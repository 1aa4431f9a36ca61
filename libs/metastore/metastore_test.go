package metastore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
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

func testConfig(t *testing.T) metastore.Config {
	ports := testutil.FreePorts(t, 2)
	return metastore.Config{
		ClientListen: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		PeerListen:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
		ClusterToken: "test",
		Prefix:       "/sluice",
		DialTimeout:  5 * time.Second,
		StartTimeout: 30 * time.Second,
		TickMs:       10,
		ElectionMs:   100,
		// Tests only: etcd's fsync would dominate their run time.
		UnsafeNoFsync: true,
	}
}

func TestSingleMemberPersistsAcrossRestart(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
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
	cfgs := []metastore.Config{testConfig(t), testConfig(t), testConfig(t)}
	var parts []string
	for i, c := range cfgs {
		parts = append(parts, fmt.Sprintf("c%d=http://%s", i+1, c.PeerListen))
	}
	stores := make([]*metastore.Store, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(parts, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = metastore.Open(ctx, cfgs[i], fmt.Sprintf("c%d", i+1), t.TempDir(), log.Discard())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	defer func() {
		// Close members in parallel: one by one, each waits for the others'
		// election timeouts.
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Go(func() { require.NoError(t, s.Close()) })
		}
		wg.Wait()
	}()

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
	cfg := testConfig(t)
	cfg.InitialCluster = "c1=127.0.0.1:1"
	_, err := metastore.Open(context.Background(), cfg, "c1", t.TempDir(), log.Discard())
	require.ErrorContains(t, err, "no valid http(s)://host:port URL")
}
