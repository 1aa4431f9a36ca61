package nodeapi

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
)

// groupCoordinatorRole is the role whose processes serve
// GroupCoordinatorService, FindCoordinator included (role.GroupCoordinator;
// libs/role is not imported for one name).
const groupCoordinatorRole = "group-coordinator"

// Kafka's FindCoordinator key types.
const (
	keyTypeGroup       = 0
	keyTypeTransaction = 1
)

// findCoordinator answers FindCoordinator: it asks a group-coordinator
// process over gRPC (GroupCoordinatorService/FindCoordinator answers group
// ids and transactional ids alike) and names each coordinator by its Kafka
// listener. Versions before 4 carry one key; 4 and later a batch.
func (n *node) findCoordinator(ctx context.Context, req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	results := n.coordinators(ctx, req.CoordinatorType, keys)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	if req.Version < 4 {
		r := results[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = r.ErrorCode, r.ErrorMessage, r.NodeID, r.Host, r.Port
		return resp
	}
	resp.Coordinators = results
	return resp
}

// coordinators finds the coordinator of every key, one answer per key in
// order.
func (n *node) coordinators(ctx context.Context, keyType int8, keys []string) []kmsg.FindCoordinatorResponseCoordinator {
	out := make([]kmsg.FindCoordinatorResponseCoordinator, len(keys))
	for i, k := range keys {
		out[i] = kmsg.NewFindCoordinatorResponseCoordinator()
		out[i].Key, out[i].NodeID, out[i].Port = k, -1, -1
	}
	fail := func(err error) []kmsg.FindCoordinatorResponseCoordinator {
		for i := range out {
			out[i].ErrorCode, out[i].ErrorMessage = kafkaError(err)
		}
		return out
	}
	var kt groupv1.CoordinatorKeyType
	var rt authz.ResourceType
	switch keyType {
	case keyTypeGroup:
		kt, rt = groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, authz.Group
	case keyTypeTransaction:
		kt, rt = groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, authz.TransactionalID
	default:
		return fail(errorf(errs.InvalidRequest, "coordinator key type %d is not served: Sluice coordinates groups (0) and transactional ids (1)", keyType))
	}
	// Describe on each group or transactional id (Kafka's rule); a refused
	// key is answered here and not asked for.
	asked := keys
	var denied map[string]error
	if n.authz.Enabled() {
		asked = nil
		for _, k := range keys {
			// The empty transactional id is an idempotent producer's
			// "any coordinator"; its InitProducerId is what is checked.
			if rt == authz.TransactionalID && k == "" {
				asked = append(asked, k)
				continue
			}
			if err := authz.Check(ctx, n.authz, authz.Describe, rt, k); err != nil {
				if denied == nil {
					denied = map[string]error{}
				}
				denied[k] = err
				continue
			}
			asked = append(asked, k)
		}
		for i := range out {
			if err := denied[out[i].Key]; err != nil {
				out[i].ErrorCode, out[i].ErrorMessage = kafkaError(err)
			}
		}
	}
	if len(asked) == 0 {
		return out
	}
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp, err := n.askGroupCoordinator(ctx, &groupv1.FindCoordinatorRequest{KeyType: kt, Keys: asked})
	if err != nil {
		for i := range out {
			if denied[out[i].Key] == nil {
				out[i].ErrorCode, out[i].ErrorMessage = kafkaError(err)
			}
		}
		return out
	}
	byKey := make(map[string]*groupv1.Coordinator, len(resp.GetCoordinators()))
	for _, c := range resp.GetCoordinators() {
		byKey[c.GetKey()] = c
	}
	img := n.cache.Load()
	for i := range out {
		c, ok := byKey[out[i].Key]
		switch {
		case denied[out[i].Key] != nil:
		case !ok:
			out[i].ErrorCode, out[i].ErrorMessage = kafkaError(errorf(errs.CoordinatorNotAvailable, "the group coordinator did not answer for %q", out[i].Key))
		case c.GetError() != nil:
			out[i].ErrorCode, out[i].ErrorMessage = protoError(errs.FromProto(c.GetError()))
		default:
			e, ok := kafkaEndpointOf(img, c.GetNodeId())
			if !ok {
				out[i].ErrorCode, out[i].ErrorMessage = kafkaError(errorf(errs.CoordinatorNotAvailable,
					"the coordinator of %q is node %d, which has no Kafka listener or is not live", out[i].Key, c.GetNodeId()))
				continue
			}
			out[i].NodeID, out[i].Host, out[i].Port = c.GetNodeId(), e.GetHost(), e.GetPort()
		}
	}
	return out
}

// askGroupCoordinator sends FindCoordinator to a live group-coordinator
// process: this one when it runs the role, else the one every node picks
// first (metadata.Image.AnyOf), then the others, passing over those that
// cannot be reached. It retries while none answers, until ctx ends.
func (n *node) askGroupCoordinator(ctx context.Context, req *groupv1.FindCoordinatorRequest) (*groupv1.FindCoordinatorResponse, error) {
	var last error
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		addrs := groupCoordinatorAddrs(n.cache.Load(), n.nodeID)
		if len(addrs) == 0 {
			last = errorf(errs.CoordinatorNotAvailable, "no live process runs the %s role", groupCoordinatorRole)
		}
		for _, addr := range addrs {
			conn, err := n.readyConn(ctx, addr)
			if err == nil {
				var resp *groupv1.FindCoordinatorResponse
				resp, err = groupv1.NewGroupCoordinatorServiceClient(conn).FindCoordinator(ctx, req)
				if err == nil {
					return resp, nil
				}
			}
			last = err
			switch errs.CodeOf(err) {
			case errs.NodeUnreachable, errs.NodeNotReady, errs.RequestTimedOut, errs.Unimplemented:
				continue
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, coordinatorGaveUp(last)
		case <-time.After(backoff):
		}
	}
}

// coordinatorGaveUp is the answer when no group coordinator could be asked
// in time: COORDINATOR_NOT_AVAILABLE, which Kafka clients retry.
func coordinatorGaveUp(last error) error {
	if last == nil {
		return errorf(errs.CoordinatorNotAvailable, "no group coordinator answered in time")
	}
	return errorf(errs.CoordinatorNotAvailable, "no group coordinator answered in time (last error: %s)", errs.From(last).Message)
}

// groupCoordinatorAddrs lists the gRPC addresses of the live
// group-coordinator processes in the order to ask them.
func groupCoordinatorAddrs(img *metadata.Image, self int32) []string {
	var first []*commonv1.Broker
	if b, ok := img.Brokers[self]; ok && img.Alive(self) && slices.Contains(b.GetRoles(), groupCoordinatorRole) {
		first = append(first, b)
	}
	if b := img.AnyOf(groupCoordinatorRole); b != nil {
		first = append(first, b)
	}
	var out []string
	add := func(b *commonv1.Broker) {
		if a := metadata.BrokerAddress(b); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, b := range first {
		add(b)
	}
	for _, id := range img.BrokerIDs() {
		if b := img.Brokers[id]; img.Alive(id) && slices.Contains(b.GetRoles(), groupCoordinatorRole) {
			add(b)
		}
	}
	return out
}
