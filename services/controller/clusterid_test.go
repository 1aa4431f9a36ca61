package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
)

// A controller whose quorum loses its majority while it starts (here two of
// three members are down for longer than etcd's request timeout, as a
// proposal caught by a raft leadership move waits) still starts once the
// quorum is back: the cluster id is retried within the start's deadline,
// not failed on the first etcd timeout (a 3-controller cluster failed to
// start that way, now and then, in the integration tests).
func TestClusterIDSurvivesQuorumOutageAtStart(t *testing.T) {
	members := metastoretest.StartQuorum(t, 3)

	// Two members go; the third cannot commit anything.
	require.NoError(t, members[1].Close())
	require.NoError(t, members[2].Close())
	defer func(d time.Duration) { clusterIDAttempt = d }(clusterIDAttempt)
	clusterIDAttempt = 500 * time.Millisecond

	c := &Controller{store: members[0].Store, logger: log.Discard()}
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
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := 1; i < 3; i++ {
		wg.Go(func() { errs[i] = members[i].Open() })
	}
	wg.Wait()
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	require.NoError(t, <-done)
	require.Len(t, id, 32)
}
