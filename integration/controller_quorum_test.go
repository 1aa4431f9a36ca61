package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/grpcx"
)

// describeAt asks one controller for its view of the cluster, bounded so a
// paused or dead process does not hold the caller.
func describeAt(ctx context.Context, pool *grpcx.Pool, p *devcluster.Process, timeout time.Duration) (*controllerv1.DescribeClusterResponse, error) {
	conn, err := pool.Get(p.Addr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return controllerv1.NewControllerServiceClient(conn).DescribeCluster(cctx, &controllerv1.DescribeClusterRequest{})
}

// processByMember finds the controller process hosting an etcd member.
func processByMember(c *devcluster.Cluster, member string) *devcluster.Process {
	for _, p := range c.Controllers() {
		if p.Name == member {
			return p
		}
	}
	return nil
}

// A quorum that keeps its majority keeps its active controller: pausing the
// process that hosts the etcd raft leader (not the active controller) for
// 20 s forces a raft election, but the active controller's lease outlives
// it (a new raft leader renews every lease), so the active controller
// changes at most once, and in practice not at all.
func TestActiveControllerSurvivesEtcdLeaderPause(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pool := grpcx.NewPool(grpcx.ClientOptions{})
	defer pool.Close()

	// The active controller moves raft leadership off its own member, so
	// the raft leader soon sits on a standby.
	var raftLeader *devcluster.Process
	var before *controllerv1.DescribeClusterResponse
	require.Eventually(t, func() bool {
		resp, err := describeAt(ctx, pool, c.Controllers()[0], 2*time.Second)
		if err != nil || resp.GetControllerId() < 0 {
			return false
		}
		for _, m := range resp.GetControllers() {
			if m.GetEtcdLeader() && m.GetNodeId() != resp.GetControllerId() {
				raftLeader, before = processByMember(c, m.GetEtcdMember()), resp
				return raftLeader != nil
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "no etcd raft leader apart from the active controller")
	t.Logf("active controller %d (epoch %d), etcd raft leader on %s", before.GetControllerId(), before.GetControllerEpoch(), raftLeader.Name)

	var others []*devcluster.Process
	for _, p := range c.Controllers() {
		if p != raftLeader {
			others = append(others, p)
		}
	}
	// Record the active controller every 100 ms, as each running
	// controller sees it.
	type sample struct {
		at     time.Duration
		active int32
		epoch  int64
	}
	var samples []sample
	record := func(start time.Time) {
		for _, p := range others {
			resp, err := describeAt(ctx, pool, p, time.Second)
			if err != nil {
				continue
			}
			samples = append(samples, sample{time.Since(start), resp.GetControllerId(), resp.GetControllerEpoch()})
		}
	}
	require.NoError(t, raftLeader.Pause())
	start := time.Now()
	for time.Since(start) < 20*time.Second {
		record(start)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, raftLeader.Resume())
	// A few more seconds: the resumed member must not disturb the quorum.
	resumed := time.Now()
	for time.Since(resumed) < 3*time.Second {
		record(start)
		time.Sleep(100 * time.Millisecond)
	}

	require.NotEmpty(t, samples)
	var changes []string
	last := before.GetControllerId()
	maxEpoch := before.GetControllerEpoch()
	for _, s := range samples {
		maxEpoch = max(maxEpoch, s.epoch)
		if s.active != last {
			changes = append(changes, fmt.Sprintf("%v: %d -> %d (epoch %d)", s.at.Round(time.Millisecond), last, s.active, s.epoch))
			last = s.active
		}
	}
	t.Logf("%d samples; active controller changes: %v; controller epoch %d -> %d", len(samples), changes, before.GetControllerEpoch(), maxEpoch)
	require.LessOrEqual(t, maxEpoch-before.GetControllerEpoch(), int64(1), "the active controller changed more than once: %v", changes)
	// "No active controller" (-1) between two holders counts as a change
	// too, so a lost-and-won-back term shows up here.
	require.LessOrEqual(t, len(changes), 2, "the active controller changed more than once: %v", changes)
	if len(changes) == 2 {
		require.Contains(t, changes[0], "-> -1", "the active controller changed more than once: %v", changes)
	}
}
