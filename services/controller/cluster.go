package controller

import (
	"context"
	"sort"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
)

// DescribeCluster answers from this controller's view of etcd: cluster id,
// the active controller, every configured controller with its state (active,
// standby, unreachable) and etcd role, the quorum's health, and every
// registered node. It answers without a quorum too (from the last state
// seen), so an operator can see which members are missing.
func (c *Controller) DescribeCluster(ctx context.Context, _ *controllerv1.DescribeClusterRequest) (*controllerv1.DescribeClusterResponse, error) {
	if err := c.checkCluster(ctx, authz.Describe); err != nil {
		return nil, err
	}
	q := c.probe(ctx, quorumProbeTTL, true)
	// Whether the local member knows a raft leader now, not when the
	// (possibly 2 s old) probe ran: a raft election that ended since must
	// not hide the active controller.
	q.HasLeader = c.store.HasLeader()
	external := len(q.Members) == 0
	etcdLeader := map[string]bool{}
	if external {
		if members, err := c.store.Members(ctx); err == nil {
			for _, m := range members {
				etcdLeader[m.Name] = m.IsLeader
			}
		}
	}
	c.mu.RLock()
	st := c.st
	present := st.controllers()
	out := &controllerv1.DescribeClusterResponse{
		ClusterId:        st.clusterID,
		ControllerId:     st.activeID(),
		ControllerEpoch:  st.epoch,
		MetadataRevision: st.rev,
	}
	for _, b := range st.brokers {
		out.Brokers = append(out.Brokers, proto.Clone(b.val.GetBroker()).(*commonv1.Broker))
	}
	c.mu.RUnlock()
	c.remember(present)
	for _, m := range present {
		m.EtcdLeader = etcdLeader[m.GetEtcdMember()]
	}
	out.Controllers = c.describeControllers(q, present, out.ControllerId)
	active := false
	for _, m := range out.GetControllers() {
		if m.GetActive() {
			out.ControllerAddress, active = m.GetAddress(), true
		}
	}
	if !active {
		// Without a majority no controller is active, although the election
		// key of a dead one stays (no raft leader can expire its lease). A
		// raft election alone is no loss of majority: see quorumAlive.
		out.ControllerId = -1
	}
	if !external {
		out.Quorum = c.quorumStatus(q)
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].GetId() < out.Brokers[j].GetId() })
	return out, nil
}
