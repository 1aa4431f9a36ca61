package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/testutil"
)

// A controller whose quorum loses its majority while it starts (here two of
// three members are down for longer than etcd's request timeout, as a
// proposal caught by a raft leadership move waits) still starts once the
// quorum is back: the cluster id is retried within the start's deadline,
// not failed on the first etcd timeout (a 3-controller cluster failed to
// start that way, now and then, in the integration tests).
func TestClusterIDSurvivesQuorumOutageAtStart(t *testing.T) {
	cfgs := make([]metastore.Config, 3)
	var parts []string
	for i := range cfgs {
		ports := testutil.FreePorts(t, 2)
		cfgs[i] = metastore.Config{
			ClientListen: fmt.Sprintf("127.0.0.1:%d", ports[0]), PeerListen: fmt.Sprintf("127.0.0.1:%d", ports[1]),
			ClusterToken: "test", Prefix: "/sluice", DialTimeout: 5 * time.Second, StartTimeout: 30 * time.Second,
			TickMs: 10, ElectionMs: 100, UnsafeNoFsync: true,
		}
		parts = append(parts, fmt.Sprintf("c%d=http://%s", i+1, cfgs[i].PeerListen))
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	stores := make([]*metastore.Store, 3)
	open := func(i int) error {
		cfgs[i].InitialCluster = strings.Join(parts, ",")
		var err error
		stores[i], err = metastore.Open(context.Background(), cfgs[i], fmt.Sprintf("c%d", i+1), dirs[i], log.Discard())
		return err
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { errs[i] = open(i) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	defer func() {
		for _, s := range stores {
			if s != nil {
				_ = s.Close()
			}
		}
	}()

	// Two members go; the third cannot commit anything.
	require.NoError(t, stores[1].Close())
	require.NoError(t, stores[2].Close())
	stores[1], stores[2] = nil, nil
	defer func(d time.Duration) { clusterIDAttempt = d }(clusterIDAttempt)
	clusterIDAttempt = 500 * time.Millisecond

	c := &Controller{store: stores[0], logger: log.Discard()}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var id string
	go func() {
		var err error
		id, err = c.ensureClusterID(ctx)
		done <- err
	}()
	// Longer than etcd's request timeout (5 s + 2 election timeouts).
	time.Sleep(6 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("cluster id settled without a quorum: %v", err)
	default:
	}
	for i := 1; i < 3; i++ {
		wg.Go(func() { errs[i] = open(i) })
	}
	wg.Wait()
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	require.NoError(t, <-done)
	require.Len(t, id, 32)
}
