package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// describeAt asks one controller for its view of the cluster, bounded so a
// paused or dead process does not hold the caller.
func describeAt(ctx context.Context, pool *wire.Pool, p *devcluster.Process, timeout time.Duration) (*controllerv1.DescribeClusterResponse, error) {
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
	pool := wire.NewPool(wire.ClientOptions{})
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
	// controller sees it, one sequence per controller: two controllers
	// answering differently at one moment is not a change of controller.
	samples := map[string][]activeSample{}
	record := func(start time.Time) {
		for _, p := range others {
			resp, err := describeAt(ctx, pool, p, time.Second)
			if err != nil {
				continue
			}
			samples[p.Name] = append(samples[p.Name], activeSample{time.Since(start), resp.GetControllerId(), resp.GetControllerEpoch()})
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

	maxEpoch := before.GetControllerEpoch()
	for _, p := range others {
		seq := samples[p.Name]
		require.NotEmpty(t, seq, "%s never answered", p.Name)
		changes := activeChanges(before, seq)
		for _, s := range seq {
			maxEpoch = max(maxEpoch, s.epoch)
		}
		t.Logf("%s: %d samples; active controller changes: %v", p.Name, len(seq), changes)
		require.NoError(t, checkActiveChanges(changes), "as seen by %s", p.Name)
	}
	t.Logf("controller epoch %d -> %d", before.GetControllerEpoch(), maxEpoch)
	require.LessOrEqual(t, maxEpoch-before.GetControllerEpoch(), int64(1), "the active controller changed more than once")
}

// activeSample is one controller's answer to "which controller is active".
type activeSample struct {
	at     time.Duration
	active int32
	epoch  int64
}

// activeChange is a change in the active controller one controller reports.
type activeChange struct {
	at       time.Duration
	from, to int32
	epoch    int64 // the epoch reported with the new answer
}

func (c activeChange) String() string {
	return fmt.Sprintf("%v: %d -> %d (epoch %d)", c.at.Round(time.Millisecond), c.from, c.to, c.epoch)
}

// activeChanges lists the changes in one controller's sequence of answers,
// starting from the answer seen before the fault.
func activeChanges(before *controllerv1.DescribeClusterResponse, seq []activeSample) []activeChange {
	var out []activeChange
	last := before.GetControllerId()
	for _, s := range seq {
		if s.active != last {
			out = append(out, activeChange{s.at, last, s.active, s.epoch})
			last = s.active
		}
	}
	return out
}

// checkActiveChanges fails one controller's changes when they show the
// active controller changing more than once: at most one handover, which
// may pass through "no active controller" (-1), so a term lost and won back
// is one change too. An answer of -1 between two answers naming the same
// controller in the same epoch is an error of its own: the term went on,
// and the controller failed to name the active controller meanwhile.
func checkActiveChanges(changes []activeChange) error {
	for i := 0; i+1 < len(changes); i++ {
		gap, back := changes[i], changes[i+1]
		if gap.to == -1 && back.to == gap.from && back.epoch <= gap.epoch {
			return fmt.Errorf("named no active controller from %v to %v although controller %d stayed active in epoch %d: %v",
				gap.at.Round(time.Millisecond), back.at.Round(time.Millisecond), back.to, back.epoch, changes)
		}
	}
	switch {
	case len(changes) <= 1:
		return nil
	case len(changes) == 2 && changes[0].to == -1:
		return nil
	}
	return fmt.Errorf("the active controller changed more than once: %v", changes)
}

// controllerStates maps node id to the state DescribeCluster reports.
func controllerStates(resp *controllerv1.DescribeClusterResponse) map[int32]controllerv1.ControllerState {
	out := map[int32]controllerv1.ControllerState{}
	for _, m := range resp.GetControllers() {
		out[m.GetNodeId()] = m.GetState()
	}
	return out
}

// activeAndStandbys waits for an active controller and returns it with the
// other controllers.
func activeAndStandbys(t *testing.T, ctx context.Context, c *devcluster.Cluster, pool *wire.Pool) (*devcluster.Process, []*devcluster.Process) {
	t.Helper()
	var active *devcluster.Process
	require.Eventually(t, func() bool {
		resp, err := describeAt(ctx, pool, c.Controllers()[0], 2*time.Second)
		if err != nil {
			return false
		}
		active = nodeByID(c, resp.GetControllerId())
		return active != nil
	}, 30*time.Second, 50*time.Millisecond, "no active controller")
	var standbys []*devcluster.Process
	for _, p := range c.Controllers() {
		if p != active {
			standbys = append(standbys, p)
		}
	}
	return active, standbys
}

// A dead controller stays in the cluster description, as unreachable, also
// after its presence in etcd expired: quorum health is visible.
func TestClusterDescribeListsUnreachableController(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := wire.NewPool(wire.ClientOptions{})
	defer pool.Close()
	active, standbys := activeAndStandbys(t, ctx, c, pool)
	dead := standbys[0]
	require.NoError(t, dead.Kill())
	killed := time.Now()

	// Past the election TTL (2 s) the dead controller's presence key is
	// gone; it must still be listed.
	var resp *controllerv1.DescribeClusterResponse
	require.Eventually(t, func() bool {
		var err error
		resp, err = describeAt(ctx, pool, active, 2*time.Second)
		if err != nil || time.Since(killed) < 4*time.Second {
			return false
		}
		return controllerStates(resp)[dead.NodeID] == controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE
	}, 20*time.Second, 100*time.Millisecond, "the dead controller is not listed as unreachable")
	require.Len(t, resp.GetControllers(), 3, "%v", resp.GetControllers())
	states := controllerStates(resp)
	require.Equal(t, controllerv1.ControllerState_CONTROLLER_STATE_ACTIVE, states[active.NodeID])
	require.Equal(t, controllerv1.ControllerState_CONTROLLER_STATE_STANDBY, states[standbys[1].NodeID])
	roles := map[controllerv1.EtcdRole]int{}
	for _, m := range resp.GetControllers() {
		roles[m.GetEtcdRole()]++
	}
	require.Equal(t, 1, roles[controllerv1.EtcdRole_ETCD_ROLE_LEADER], "one live member leads raft: %v", resp.GetControllers())
	require.Equal(t, 1, roles[controllerv1.EtcdRole_ETCD_ROLE_FOLLOWER])
	q := resp.GetQuorum()
	require.True(t, q.GetHasMajority())
	require.Equal(t, []int32{dead.NodeID}, q.GetUnreachable())
	require.Len(t, q.GetReachable(), 2)

	out := runCLI(t, c, "", "cluster", "describe")
	t.Logf("sluice cluster describe:\n%s", out)
	require.Contains(t, out, "majority (2 of 3 voting members reachable)")
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s.*\sunreachable\s`, dead.NodeID), out)
}

// With two of three controllers dead, the survivor says at once that the
// quorum has no majority and which members it reaches, instead of pointing
// at a dead active controller or letting the call wait for etcd; the
// cluster description shows the quorum without majority; and SDK and CLI
// admin calls report it instead of a refused connection.
func TestControllerQuorumLossIsReported(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := wire.NewPool(wire.ClientOptions{})
	defer pool.Close()
	active, standbys := activeAndStandbys(t, ctx, c, pool)
	survivor := standbys[0]
	require.NoError(t, active.Kill())
	require.NoError(t, standbys[1].Kill())
	killed := time.Now()

	conn, err := pool.Get(survivor.Addr)
	require.NoError(t, err)
	cc := controllerv1.NewControllerServiceClient(conn)
	dead := []int32{active.NodeID, standbys[1].NodeID}
	if dead[0] > dead[1] {
		dead[0], dead[1] = dead[1], dead[0]
	}
	want := fmt.Sprintf("controller quorum has no majority: reachable members [%d], unreachable [%d %d]", survivor.NodeID, dead[0], dead[1])
	var last error
	var took time.Duration
	require.Eventually(t, func() bool {
		rf := int32(1)
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		start := time.Now()
		_, err := cc.CreateTopics(cctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: "during-quorum-loss", ReplicationFactor: &rf}}})
		took, last = time.Since(start), err
		return errs.Is(err, errs.ControllerQuorumUnavailable)
	}, 15*time.Second, 100*time.Millisecond, "last answer: %v", last)
	t.Logf("quorum loss reported %v after the kills; the call took %v: %v", time.Since(killed).Round(time.Millisecond), took.Round(time.Millisecond), last)
	require.Contains(t, last.Error(), want)
	require.Equal(t, codes.Unavailable, status.Code(last))
	require.True(t, errs.From(last).Retriable())

	resp, err := describeAt(ctx, pool, survivor, 5*time.Second)
	require.NoError(t, err)
	q := resp.GetQuorum()
	require.False(t, q.GetHasMajority())
	require.Equal(t, []int32{survivor.NodeID}, q.GetReachable())
	require.Equal(t, dead, q.GetUnreachable())
	require.Equal(t, int32(-1), resp.GetControllerId(), "no controller is active without a majority")
	require.Len(t, resp.GetControllers(), 3)
	states := controllerStates(resp)
	require.Equal(t, controllerv1.ControllerState_CONTROLLER_STATE_STANDBY, states[survivor.NodeID])
	for _, id := range dead {
		require.Equal(t, controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE, states[id])
	}

	out := runCLI(t, c, "", "cluster", "describe")
	t.Logf("sluice cluster describe:\n%s", out)
	require.Contains(t, out, "NO MAJORITY")
	require.Contains(t, out, fmt.Sprintf("reachable [%d], unreachable [%d %d]", survivor.NodeID, dead[0], dead[1]))

	// Admin calls from the SDK and the CLI end within their API timeout with
	// the survivor's CONTROLLER_QUORUM_UNAVAILABLE, not with a refused
	// connection to the dead active controller that metadata still names.
	want = fmt.Sprintf("reachable members [%d]", survivor.NodeID)

	const apiTimeout = 4 * time.Second
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), RequestTimeout: apiTimeout})
	require.NoError(t, err)
	defer cl.Close()
	start := time.Now()
	// No deadline of its own: RequestTimeout bounds the call.
	_, err = cl.CreateTopic(context.Background(), "during-quorum-loss", 1, 1, nil)
	took = time.Since(start)
	t.Logf("CreateTopic failed after %v: %v", took.Round(time.Millisecond), err)
	require.Error(t, err)
	require.True(t, errs.Is(err, errs.ControllerQuorumUnavailable), "%v", err)
	require.Contains(t, err.Error(), want)
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Less(t, took, 3*apiTimeout, "the call outlived its API timeout")

	cctx, ccancel := context.WithTimeout(ctx, 3*apiTimeout)
	defer ccancel()
	start = time.Now()
	out, err = runCLIErr(cctx, t, strings.Join(c.Bootstrap(), ","), "", "--request-timeout", apiTimeout.String(),
		"topic", "create", "during-quorum-loss", "--partitions", "1", "--replication-factor", "1")
	took = time.Since(start)
	t.Logf("sluice topic create failed after %v: %s", took.Round(time.Millisecond), out)
	require.Error(t, err)
	require.NoError(t, cctx.Err(), "the CLI outlived its API timeout")
	require.Contains(t, out, "CONTROLLER_QUORUM_UNAVAILABLE")
	require.Contains(t, out, want)
}

// The check of one controller's answers: a handover, a term lost and won
// back, and a -1 gap inside one term (the controller could not name the
// active controller during a raft election).
func TestCheckActiveChanges(t *testing.T) {
	ch := func(at time.Duration, from, to int32, epoch int64) activeChange {
		return activeChange{at: at, from: from, to: to, epoch: epoch}
	}
	require.NoError(t, checkActiveChanges(nil))
	require.NoError(t, checkActiveChanges([]activeChange{ch(time.Second, 2, 3, 2)}))
	require.NoError(t, checkActiveChanges([]activeChange{ch(time.Second, 2, -1, 1), ch(2*time.Second, -1, 3, 2)}))
	require.NoError(t, checkActiveChanges([]activeChange{ch(time.Second, 2, -1, 1), ch(2*time.Second, -1, 2, 2)}), "lost and won back")
	err := checkActiveChanges([]activeChange{ch(2191*time.Millisecond, 2, -1, 1), ch(3287*time.Millisecond, -1, 2, 1)})
	require.ErrorContains(t, err, "named no active controller from 2.191s to 3.287s although controller 2 stayed active in epoch 1")
	require.ErrorContains(t, checkActiveChanges([]activeChange{ch(time.Second, 2, 3, 2), ch(2*time.Second, 3, 2, 3)}), "changed more than once")
	require.ErrorContains(t, checkActiveChanges([]activeChange{ch(time.Second, 2, -1, 1), ch(2*time.Second, -1, 3, 2), ch(3*time.Second, 3, -1, 2)}), "changed more than once")
}
