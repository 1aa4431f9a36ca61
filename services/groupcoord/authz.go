package groupcoord

import (
	"context"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/role"
)

// Access rules of the group coordinator's calls (Kafka's, per API; the
// Kafka handlers call the gRPC methods, so both protocols follow them):
//
//	JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat
//	                      Read on the group
//	OffsetCommit          Read on the group; Read on each topic (per partition)
//	TxnOffsetCommit       Write on the transactional id; Read on the group;
//	                      Read on each topic (per partition)
//	OffsetFetch           Describe on the group; Describe on each topic (per
//	                      partition; a fetch of every partition leaves out the
//	                      topics the caller may not Describe)
//	OffsetDelete          Delete on the group; Read on each topic (per partition)
//	ListGroups            every group with Describe on the cluster, else the
//	                      groups the caller may Describe
//	DescribeGroups, ConsumerGroupDescribe
//	                      Describe on each group (per group)
//	DeleteGroups          Delete on each group (per group)
//	FindCoordinator       Describe on each group or transactional id (per key)
//	WriteTxnOffsetMarkers the storage node forwarding a transaction's markers
//	                      (authz.CheckInternal)
//
// A refusal of the whole call is PermissionDenied over gRPC and the
// response's error code over Kafka.

// markerCallers are the roles that forward transaction markers for the
// offsets topic (the storage node leading its partitions).
var markerCallers = []string{string(role.StorageNode)}

// check is authz.Check with the role's authorizer.
func (r *GroupCoordinator) check(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	return authz.Check(ctx, r.deps.Authorizer(), op, rt, name)
}

// topicDenials checks op on the topic of each of n items (topic(i)), once
// per topic, and returns each item's refusal; nil when every item is
// allowed (always, with authorization off).
func (r *GroupCoordinator) topicDenials(ctx context.Context, op authz.Operation, n int, topic func(int) string) []error {
	m := authz.NewMemo(ctx, r.deps.Authorizer(), op, authz.Topic)
	if !m.On() {
		return nil
	}
	var out []error
	for i := range n {
		if err := m.Check(topic(i)); err != nil {
			if out == nil {
				out = make([]error, n)
			}
			out[i] = err
		}
	}
	return out
}

// denied returns denials[i], nil when denials is nil.
func denied(denials []error, i int) error {
	if denials == nil {
		return nil
	}
	return denials[i]
}

// FindCoordinator answers, for each key, the node that coordinates it;
// each key needs Describe on its group or transactional id, and a refused
// key is answered with the refusal (Kafka's rule).
func (r *GroupCoordinator) FindCoordinator(ctx context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	a := r.deps.Authorizer()
	if !a.Enabled() {
		return r.findCoordinator(ctx, req)
	}
	rt := authz.Group
	if req.GetKeyType() == groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		rt = authz.TransactionalID
	}
	refused := map[string]error{}
	var asked []string
	for _, k := range req.GetKeys() {
		// An idempotent producer (no transactional id) asks for any
		// transaction coordinator with the empty key; its InitProducerId
		// is what is checked (IdempotentWrite, or Write on a topic).
		if rt == authz.TransactionalID && k == "" {
			asked = append(asked, k)
			continue
		}
		if err := authz.Check(ctx, a, authz.Describe, rt, k); err != nil {
			refused[k] = err
			continue
		}
		asked = append(asked, k)
	}
	resp := &groupv1.FindCoordinatorResponse{}
	var found map[string]*groupv1.Coordinator
	if len(asked) > 0 || len(refused) == 0 {
		sub := &groupv1.FindCoordinatorRequest{KeyType: req.GetKeyType(), Keys: asked}
		out, err := r.findCoordinator(ctx, sub)
		if err != nil {
			return nil, err
		}
		found = make(map[string]*groupv1.Coordinator, len(out.GetCoordinators()))
		for _, c := range out.GetCoordinators() {
			found[c.GetKey()] = c
		}
	}
	for _, k := range req.GetKeys() {
		if err := refused[k]; err != nil {
			resp.Coordinators = append(resp.Coordinators, &groupv1.Coordinator{Key: k, Error: errs.ItemError(err)})
			continue
		}
		if c, ok := found[k]; ok {
			resp.Coordinators = append(resp.Coordinators, c)
		}
	}
	return resp, nil
}
