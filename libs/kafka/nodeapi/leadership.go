package nodeapi

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Kafka's election types (ElectLeaders v1+; v0 is always preferred).
const (
	electionPreferred = 0
	electionUnclean   = 1
)

// topicGroups collects per-partition answers under their topics, topics in
// the order they first appear.
type topicGroups[P any] struct {
	order []string
	parts map[string][]P
}

func (g *topicGroups[P]) add(topic string, p P) {
	if g.parts == nil {
		g.parts = map[string][]P{}
	}
	if _, ok := g.parts[topic]; !ok {
		g.order = append(g.order, topic)
	}
	g.parts[topic] = append(g.parts[topic], p)
}

// electLeaders forwards ElectLeaders to the active controller. A null topic
// list elects every partition (preferred elections only, as the controller
// refuses an unclean election of everything) and, as in Kafka, lists only
// the partitions whose election was needed.
func (n *node) electLeaders(ctx context.Context, req *kmsg.ElectLeadersRequest) *kmsg.ElectLeadersResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrElectLeadersResponse()
	// Alter on the cluster (Kafka's rule), for the whole request.
	if err := authz.Check(ctx, n.authz, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, _ = kafkaError(err)
		return resp
	}
	var et controllerv1.ElectionType
	switch {
	case req.Version < 1 || req.ElectionType == electionPreferred:
		et = controllerv1.ElectionType_ELECTION_TYPE_PREFERRED
	case req.ElectionType == electionUnclean:
		et = controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN
	default:
		resp.ErrorCode, _ = kafkaError(errorf(errs.InvalidRequest, "unknown election type %d", req.ElectionType))
		return resp
	}
	var g topicGroups[kmsg.ElectLeadersResponseTopicPartition]
	answer := func(topic string, partition int32, err error) {
		p := kmsg.NewElectLeadersResponseTopicPartition()
		p.Partition = partition
		p.ErrorCode, p.ErrorMessage = kafkaError(err)
		g.add(topic, p)
	}
	if req.Topics == nil {
		if et == controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN {
			resp.ErrorCode, _ = kafkaError(errorf(errs.InvalidRequest, "an unclean election must name its partitions: it may lose records"))
			return resp
		}
		var out *controllerv1.ElectLeadersResponse
		err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
			var err error
			out, err = cc.ElectLeaders(ctx, &controllerv1.ElectLeadersRequest{ElectionType: et})
			return err
		})
		if err != nil {
			resp.ErrorCode, _ = kafkaError(err)
			return resp
		}
		for _, r := range out.GetResults() {
			e := errs.FromProto(r.GetError())
			if e != nil && e.Code == errs.ElectionNotNeeded {
				continue
			}
			answer(r.GetPartition().GetTopic(), r.GetPartition().GetPartition(), errOrNil(e))
		}
	} else {
		var items []*commonv1.TopicPartition
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				items = append(items, &commonv1.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
		results := perItem(ctx, n, items,
			func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*commonv1.TopicPartition) ([]*controllerv1.ElectLeadersResult, error) {
				r, err := cc.ElectLeaders(ctx, &controllerv1.ElectLeadersRequest{ElectionType: et, Partitions: items})
				return r.GetResults(), err
			},
			func(tp *commonv1.TopicPartition, err error) *controllerv1.ElectLeadersResult {
				return &controllerv1.ElectLeadersResult{Partition: tp, Error: errs.ItemError(err)}
			})
		for j, r := range results {
			answer(items[j].GetTopic(), items[j].GetPartition(), errOrNil(errs.FromProto(r.GetError())))
		}
	}
	for _, topic := range g.order {
		t := kmsg.NewElectLeadersResponseTopic()
		t.Topic, t.Partitions = topic, g.parts[topic]
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// errOrNil returns e as an error, nil when e is nil (a nil *errs.Error in
// an error interface is not nil).
func errOrNil(e *errs.Error) error {
	if e == nil {
		return nil
	}
	return e
}

// alterPartitionReassignments forwards AlterPartitionReassignments to the
// active controller. Null replicas cancel a reassignment. Without
// AllowReplicationFactorChange (v1, KIP-860) a reassignment that changes
// the replica count is refused with INVALID_REPLICATION_FACTOR.
func (n *node) alterPartitionReassignments(ctx context.Context, req *kmsg.AlterPartitionAssignmentsRequest) *kmsg.AlterPartitionAssignmentsResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrAlterPartitionAssignmentsResponse()
	allowRF := req.Version < 1 || req.AllowReplicationFactorChange
	resp.AllowReplicationFactorChange = allowRF
	// Alter on the cluster (Kafka's rule), for the whole request.
	if err := authz.Check(ctx, n.authz, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	img := n.cache.Load()
	type slot struct{ ti, i int }
	var items []*controllerv1.PartitionReassignment
	var at []slot
	for ti, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			var err error
			switch {
			case p.Replicas != nil && len(p.Replicas) == 0:
				err = errorf(errs.InvalidReplicaAssignment, "the replica list is empty; send null replicas to cancel a reassignment")
			case p.Replicas != nil && !allowRF:
				if ps, ok := img.Partition(t.Topic, p.Partition); ok {
					if cur := len(ps.GetReplicas()) - len(ps.GetAddingReplicas()); cur != len(p.Replicas) {
						err = errorf(errs.InvalidReplicationFactor, "%s-%d has %d replicas and the reassignment gives %d; the request does not allow changing the replication factor",
							t.Topic, p.Partition, cur, len(p.Replicas))
					}
				}
			}
			if err != nil {
				rp.ErrorCode, rp.ErrorMessage = kafkaError(err)
			} else {
				items = append(items, &controllerv1.PartitionReassignment{
					Partition: &commonv1.TopicPartition{Topic: t.Topic, Partition: p.Partition}, Replicas: p.Replicas,
				})
				at = append(at, slot{ti: ti, i: len(rt.Partitions)})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	results := perItem(ctx, n, items,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.PartitionReassignment) ([]*controllerv1.ReassignmentResult, error) {
			r, err := cc.AlterPartitionReassignments(ctx, &controllerv1.AlterPartitionReassignmentsRequest{Reassignments: items})
			return r.GetResults(), err
		},
		func(re *controllerv1.PartitionReassignment, err error) *controllerv1.ReassignmentResult {
			return &controllerv1.ReassignmentResult{Partition: re.GetPartition(), Error: errs.ItemError(err)}
		})
	for j, r := range results {
		rp := &resp.Topics[at[j].ti].Partitions[at[j].i]
		rp.ErrorCode, rp.ErrorMessage = protoError(errs.FromProto(r.GetError()))
	}
	return resp
}

// listPartitionReassignments forwards ListPartitionReassignments to the
// controller. A null topic list lists every reassignment in progress.
func (n *node) listPartitionReassignments(ctx context.Context, req *kmsg.ListPartitionReassignmentsRequest) *kmsg.ListPartitionReassignmentsResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrListPartitionReassignmentsResponse()
	// Describe on the cluster (Kafka's rule), for the whole request.
	if err := authz.Check(ctx, n.authz, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	want := map[string][]int32{}
	var topics []string
	for _, t := range req.Topics {
		if _, ok := want[t.Topic]; !ok {
			topics = append(topics, t.Topic)
		}
		want[t.Topic] = append(want[t.Topic], t.Partitions...)
	}
	if req.Topics != nil && len(topics) == 0 {
		return resp // an empty list asks for nothing
	}
	var out *controllerv1.ListPartitionReassignmentsResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.ListPartitionReassignments(ctx, &controllerv1.ListPartitionReassignmentsRequest{Topics: topics})
		return err
	})
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	var g topicGroups[kmsg.ListPartitionReassignmentsResponseTopicPartition]
	for _, r := range out.GetReassignments() {
		tp := r.GetPartition()
		if req.Topics != nil && !containsPartition(want[tp.GetTopic()], tp.GetPartition()) {
			continue
		}
		p := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		p.Partition = tp.GetPartition()
		p.Replicas, p.AddingReplicas, p.RemovingReplicas = nonNil(r.GetReplicas()), nonNil(r.GetAddingReplicas()), nonNil(r.GetRemovingReplicas())
		g.add(tp.GetTopic(), p)
	}
	for _, topic := range g.order {
		t := kmsg.NewListPartitionReassignmentsResponseTopic()
		t.Topic, t.Partitions = topic, g.parts[topic]
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func containsPartition(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}
