package controller

import (
	"context"
	"sort"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/errs"
	"github.com/sluice-io/sluice/libs/metastore"
)

// DescribeCluster answers from one consistent etcd read: cluster id, the
// active controller, every controller with its etcd member, and every
// registered node.
func (c *Controller) DescribeCluster(ctx context.Context, _ *controllerv1.DescribeClusterRequest) (*controllerv1.DescribeClusterResponse, error) {
	k := c.store.Key
	resp, err := c.store.Client.Txn(ctx).Then(
		clientv3.OpGet(k(metastore.KeyClusterID)),
		clientv3.OpGet(k(metastore.PrefixControllers), clientv3.WithPrefix()),
		clientv3.OpGet(k(metastore.KeyControllerLeader)+"/", clientv3.WithFirstCreate()...),
		clientv3.OpGet(k(metastore.PrefixBrokers), clientv3.WithPrefix()),
		clientv3.OpGet(k(metastore.KeyControllerEpoch)),
	).Commit()
	if err != nil {
		return nil, errs.New(errs.CoordinatorNotAvailable, "reading cluster metadata from etcd: %v", err)
	}
	r := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
	}
	out := &controllerv1.DescribeClusterResponse{ControllerId: -1, MetadataRevision: resp.Header.GetRevision()}
	if kvs := r(0).Kvs; len(kvs) == 1 {
		out.ClusterId = string(kvs[0].Value)
	}
	if kvs := r(2).Kvs; len(kvs) == 1 {
		if id, err := strconv.Atoi(string(kvs[0].Value)); err == nil {
			out.ControllerId = int32(id)
		}
	}
	if kvs := r(4).Kvs; len(kvs) == 1 {
		out.ControllerEpoch, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
	}

	etcdLeader := map[string]bool{}
	if members, err := c.store.Members(ctx); err == nil {
		for _, m := range members {
			etcdLeader[m.Name] = m.IsLeader
		}
	}
	for _, kv := range r(1).Kvs {
		m := &controllerv1.ControllerMember{}
		if err := proto.Unmarshal(kv.Value, m); err != nil {
			return nil, errs.New(errs.UnknownServerError, "corrupt controller record %q: %v", kv.Key, err)
		}
		m.Active = m.GetNodeId() == out.ControllerId
		m.EtcdLeader = etcdLeader[m.GetEtcdMember()]
		if m.Active {
			out.ControllerAddress = m.GetAddress()
		}
		out.Controllers = append(out.Controllers, m)
	}
	sort.Slice(out.Controllers, func(i, j int) bool { return out.Controllers[i].GetNodeId() < out.Controllers[j].GetNodeId() })

	for _, kv := range r(3).Kvs {
		b := &commonv1.Broker{}
		if err := proto.Unmarshal(kv.Value, b); err != nil {
			return nil, errs.New(errs.UnknownServerError, "corrupt broker record %q: %v", kv.Key, err)
		}
		out.Brokers = append(out.Brokers, b)
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].GetId() < out.Brokers[j].GetId() })
	return out, nil
}
