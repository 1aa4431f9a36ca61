package nodeapi

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Operations reported as authorized with authorization off (Kafka without
// an authorizer reports every operation a resource supports).
var (
	topicOperations   = kafka.AuthorizedOperations(context.Background(), nil, authz.Topic, "")
	clusterOperations = kafka.AuthorizedOperations(context.Background(), nil, authz.Cluster, authz.ClusterName)
)

// kafkaBroker is a node as Kafka clients see it: its Kafka listener.
type kafkaBroker struct {
	id     int32
	host   string
	port   int32
	rack   *string
	fenced bool
}

// kafkaBrokers lists the nodes that serve Kafka clients, sorted by id: the
// live ones (alive, or in controlled shutdown and still leading) with a
// Kafka endpoint, and with fenced the fenced ones too. Nodes without a
// Kafka listener are left out: a client could not reach them.
func kafkaBrokers(img *metadata.Image, fenced bool) []kafkaBroker {
	var out []kafkaBroker
	for _, id := range img.BrokerIDs() {
		b := img.Brokers[id]
		e := metadata.KafkaEndpoint(b)
		if e == nil {
			continue
		}
		isFenced := !live(b)
		if isFenced && !fenced {
			continue
		}
		kb := kafkaBroker{id: id, host: e.GetHost(), port: e.GetPort(), fenced: isFenced}
		if r := b.GetRack(); r != "" {
			kb.rack = &r
		}
		out = append(out, kb)
	}
	return out
}

// live reports whether a node serves clients: registered and not fenced. A
// node in controlled shutdown still leads partitions until they move.
func live(b *commonv1.Broker) bool {
	s := b.GetState()
	return s == commonv1.BrokerState_BROKER_STATE_ALIVE || s == commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN
}

// kafkaEndpointOf returns the Kafka listener of a live node, if it has one.
func kafkaEndpointOf(img *metadata.Image, id int32) (*commonv1.Endpoint, bool) {
	b, ok := img.Brokers[id]
	if !ok || !live(b) {
		return nil, false
	}
	e := metadata.KafkaEndpoint(b)
	return e, e != nil
}

// controllerID is the node Kafka clients send controller-bound admin
// requests to. Any Sluice node forwards them to the active controller, so
// it only has to be reachable: the active controller when its process has a
// Kafka listener, else the live Kafka node with the lowest id, else -1.
func controllerID(img *metadata.Image, brokers []kafkaBroker) int32 {
	for _, b := range brokers {
		if b.id == img.ControllerID && !b.fenced {
			return b.id
		}
	}
	for _, b := range brokers {
		if !b.fenced {
			return b.id
		}
	}
	return -1
}

// topicID is a topic's Kafka id; a malformed or empty id is the zero UUID,
// which Kafka clients treat as "no id".
func topicID(s string) [16]byte {
	id, _ := kafka.TopicID(s)
	return id
}

// topicByID finds a topic by its Kafka id.
func topicByID(img *metadata.Image, id [16]byte) (*metadata.Topic, bool) {
	name, ok := kafka.Topics(img).Name(id)
	if !ok {
		return nil, false
	}
	t, ok := img.Topics[name]
	return t, ok
}

// metadata answers Metadata from this node's metadata cache, as every Kafka
// broker does. Sluice creates no topic on a Metadata request
// (AllowAutoTopicCreation is ignored): topics are created by CreateTopics or
// the admin API only, so an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
func (n *node) metadata(ctx context.Context, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	// The listener starts after the process has metadata; waiting here
	// covers a request that races a restart of the metadata watch.
	if !n.cache.Loaded() {
		wctx, cancel := n.callTimeout(ctx, 0)
		_, _ = n.cache.WaitFor(wctx, func(*metadata.Image) bool { return n.cache.Loaded() }) // an empty image answers on timeout
		cancel()
	}
	return metadataResponseFor(ctx, n.authz, n.cache.Load(), req)
}

// metadataResponse is the Metadata answer with authorization off.
func metadataResponse(img *metadata.Image, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	return metadataResponseFor(context.Background(), authz.AllowAll{}, img, req)
}

// metadataResponseFor builds a Metadata answer from an image. A nil topic list
// asks for every topic (internal ones included, as in Kafka); an empty one
// for none. Only topics the caller may Describe are listed; a requested
// topic it may not Describe is TOPIC_AUTHORIZATION_FAILED, whether or not
// it exists (Kafka's rule: existence is not disclosed).
func metadataResponseFor(ctx context.Context, a authz.Authorizer, img *metadata.Image, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := kmsg.NewPtrMetadataResponse()
	brokers := kafkaBrokers(img, false)
	reachable := make(map[int32]bool, len(brokers))
	for _, b := range brokers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port, mb.Rack = b.id, b.host, b.port, b.rack
		resp.Brokers = append(resp.Brokers, mb)
		reachable[b.id] = true
	}
	if img.ClusterID != "" {
		id := img.ClusterID
		resp.ClusterID = &id
	}
	resp.ControllerID = controllerID(img, brokers)
	if req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = kafka.AuthorizedOperations(ctx, a, authz.Cluster, authz.ClusterName)
	}
	ops := func(name string) int32 {
		if !req.IncludeTopicAuthorizedOperations {
			return kmsg.NewMetadataResponseTopic().AuthorizedOperations
		}
		return kafka.AuthorizedOperations(ctx, a, authz.Topic, name)
	}

	if req.Topics == nil {
		for _, name := range authz.FilterAllowed(ctx, a, authz.Describe, authz.Topic, img.TopicNames(true)) {
			resp.Topics = append(resp.Topics, topicMetadata(img, img.Topics[name], reachable, ops(name)))
		}
		return resp
	}
	for _, rt := range req.Topics {
		var t *metadata.Topic
		var ok bool
		switch {
		case rt.Topic != nil:
			t, ok = img.Topics[*rt.Topic]
		default:
			t, ok = topicByID(img, rt.TopicID)
		}
		name := ""
		switch {
		case ok:
			name = t.Name
		case rt.Topic != nil:
			name = *rt.Topic
		}
		if name != "" {
			if err := authz.Check(ctx, a, authz.Describe, authz.Topic, name); err != nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
				mt.ErrorCode, _ = kafkaError(err)
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		}
		if !ok {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
			mt.ErrorCode = unknownTopicCode(rt)
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, topicMetadata(img, t, reachable, ops(t.Name)))
	}
	return resp
}

// unknownTopicCode is the error of a requested topic that does not exist:
// INVALID_TOPIC_EXCEPTION for a name no topic may have (Kafka's answer),
// else UNKNOWN_TOPIC_OR_PARTITION; a topic asked for by id alone gets
// UNKNOWN_TOPIC_ID, as Kafka answers.
func unknownTopicCode(rt kmsg.MetadataRequestTopic) int16 {
	if rt.Topic != nil {
		if err := validTopicName(*rt.Topic); err != nil {
			c, _ := kafkaError(err)
			return c
		}
	}
	if rt.Topic == nil && rt.TopicID == ([16]byte{}) {
		c, _ := kafkaError(errorf(errs.InvalidRequest, "a topic needs a name or an id"))
		return c
	}
	if rt.Topic == nil {
		c, _ := kafkaError(errorf(errs.UnknownTopicID, "no topic has id %s", kafka.TopicIDString(rt.TopicID)))
		return c
	}
	c, _ := kafkaError(errorf(errs.UnknownTopicOrPartition, "unknown topic"))
	return c
}

// topicMetadata renders one topic. A partition whose leader is missing, not
// live, or has no Kafka listener is LEADER_NOT_AVAILABLE with leader -1, so
// clients wait and refresh instead of dialing a node they cannot reach.
func topicMetadata(img *metadata.Image, t *metadata.Topic, reachable map[int32]bool, ops int32) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = topicID(t.ID)
	mt.IsInternal = t.Internal
	mt.AuthorizedOperations = ops
	for i, ps := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(i)
		if ps == nil {
			// A partition record not yet seen (a delta in flight while
			// partitions are created).
			mp.ErrorCode, _ = kafkaError(errorf(errs.LeaderNotAvailable, ""))
			mp.Leader = -1
			mp.Replicas, mp.ISR, mp.OfflineReplicas = []int32{}, []int32{}, []int32{}
			mt.Partitions = append(mt.Partitions, mp)
			continue
		}
		mp.LeaderEpoch = ps.GetLeaderEpoch()
		mp.Replicas = slices.Clone(ps.GetReplicas())
		mp.ISR = slices.Clone(ps.GetIsr())
		mp.OfflineReplicas = offlineReplicas(img, ps)
		mp.Leader = ps.GetLeaderId()
		if mp.Leader < 0 || !reachable[mp.Leader] {
			mp.ErrorCode, _ = kafkaError(errorf(errs.LeaderNotAvailable, ""))
			mp.Leader = -1
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// offlineReplicas are the replicas the controller marked offline and those
// whose node is not live.
func offlineReplicas(img *metadata.Image, ps *commonv1.PartitionState) []int32 {
	out := []int32{}
	for _, r := range ps.GetReplicas() {
		b, ok := img.Brokers[r]
		if slices.Contains(ps.GetOfflineReplicas(), r) || !ok || !live(b) {
			out = append(out, r)
		}
	}
	return out
}

// describeCluster answers DescribeCluster from this node's metadata cache.
// Sluice's controllers have no Kafka listener, so the controller endpoint
// type (KIP-919, clients bootstrapped on controllers) is refused.
func (n *node) describeCluster(ctx context.Context, req *kmsg.DescribeClusterRequest) *kmsg.DescribeClusterResponse {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.EndpointType = req.EndpointType
	if err := authz.Check(ctx, n.authz, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(errorf(errs.InvalidRequest,
			"endpoint type %d is not served: Sluice's controllers have no Kafka listener; ask for brokers (endpoint type 1)", req.EndpointType))
		return resp
	}
	img := n.cache.Load()
	brokers := kafkaBrokers(img, req.IncludeFencedBrokers)
	for _, b := range brokers {
		db := kmsg.NewDescribeClusterResponseBroker()
		db.NodeID, db.Host, db.Port, db.Rack, db.IsFenced = b.id, b.host, b.port, b.rack, b.fenced
		resp.Brokers = append(resp.Brokers, db)
	}
	resp.ClusterID = img.ClusterID
	resp.ControllerID = controllerID(img, brokers)
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = kafka.AuthorizedOperations(ctx, n.authz, authz.Cluster, authz.ClusterName)
	}
	return resp
}
