package controller

import (
	"context"
	"sort"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// DescribeCluster answers from this controller's view of etcd: cluster id,
// the active controller, every controller with its etcd member, and every
// registered node.
func (c *Controller) DescribeCluster(ctx context.Context, _ *controllerv1.DescribeClusterRequest) (*controllerv1.DescribeClusterResponse, error) {
	etcdLeader := map[string]bool{}
	if members, err := c.store.Members(ctx); err == nil {
		for _, m := range members {
			etcdLeader[m.Name] = m.IsLeader
		}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	st := c.st
	out := &controllerv1.DescribeClusterResponse{
		ClusterId:        st.clusterID,
		ControllerId:     st.activeID(),
		ControllerEpoch:  st.epoch,
		MetadataRevision: st.rev,
	}
	for _, m := range st.controllers() {
		m.EtcdLeader = etcdLeader[m.GetEtcdMember()]
		if m.GetActive() {
			out.ControllerAddress = m.GetAddress()
		}
		out.Controllers = append(out.Controllers, m)
	}
	for _, b := range st.brokers {
		out.Brokers = append(out.Brokers, proto.Clone(b.val.GetBroker()).(*commonv1.Broker))
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].GetId() < out.Brokers[j].GetId() })
	return out, nil
}
