package nodeapi

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/naming"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// metadataWait bounds how long an admin answer waits for this node's
// metadata to show the change it made.
const metadataWait = 5 * time.Second

// validTopicName is naming.ValidateTopic as a catalog error.
func validTopicName(name string) error {
	if err := naming.ValidateTopic(name); err != nil {
		return errorf(errs.InvalidTopic, "%v", err)
	}
	return nil
}

// duplicates counts how often each name occurs; Kafka refuses every entry
// of a name given twice in one admin request.
func duplicates[T any](items []T, name func(T) string) map[string]int {
	out := make(map[string]int, len(items))
	for _, it := range items {
		out[name(it)]++
	}
	return out
}

// topicSpec converts one CreateTopics entry to the controller's spec, or
// says what Kafka refuses in it. -1 partitions or replication factor asks
// for the cluster default (KIP-464); the controller checks the rest (name,
// counts, assignment shape, config names and values).
func topicSpec(t kmsg.CreateTopicsRequestTopic) (*controllerv1.TopicSpec, error) {
	spec := &controllerv1.TopicSpec{Name: t.Topic}
	if len(t.ReplicaAssignment) > 0 {
		if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
			return nil, errorf(errs.InvalidRequest, "give either a replica assignment or the partition count and replication factor (-1), not both")
		}
		for _, a := range t.ReplicaAssignment {
			spec.Assignments = append(spec.Assignments, &controllerv1.ReplicaAssignment{Partition: a.Partition, Replicas: a.Replicas})
		}
	} else {
		if t.NumPartitions != -1 {
			spec.NumPartitions = proto.Int32(t.NumPartitions)
		}
		if t.ReplicationFactor != -1 {
			spec.ReplicationFactor = proto.Int32(int32(t.ReplicationFactor))
		}
	}
	for _, c := range t.Configs {
		if c.Value == nil {
			return nil, errorf(errs.InvalidRequest, "config %s has a null value; omit it to use the default", c.Name)
		}
		if spec.Configs == nil {
			spec.Configs = map[string]string{}
		}
		if _, ok := spec.Configs[c.Name]; ok {
			return nil, errorf(errs.InvalidRequest, "config %s is given twice", c.Name)
		}
		spec.Configs[c.Name] = *c.Value
	}
	return spec, nil
}

// createTopics forwards CreateTopics to the active controller. Entries
// Kafka would refuse before they reach its controller are answered here;
// the rest go to the controller, and a created topic is answered once this
// node's metadata shows it (within the request's timeout), so a client's
// next Metadata request on this connection finds it.
func (n *node) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) *kmsg.CreateTopicsResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreateTopicsResponse()
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, len(req.Topics))
	dups := duplicates(req.Topics, func(t kmsg.CreateTopicsRequestTopic) string { return t.Topic })
	var specs []*controllerv1.TopicSpec
	var at []int
	// Create on the cluster covers every topic; without it, each topic
	// needs Create on itself (Kafka's rule).
	clusterCreate := authz.Allowed(ctx, n.authz, authz.Create, authz.Cluster, authz.ClusterName)
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		spec, err := topicSpec(t)
		if dups[t.Topic] > 1 {
			err = errorf(errs.InvalidRequest, "topic %q appears more than once in the request", t.Topic)
		}
		if err == nil && !clusterCreate {
			err = authz.Check(ctx, n.authz, authz.Create, authz.Topic, t.Topic)
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = kafkaError(err)
			continue
		}
		specs = append(specs, spec)
		at = append(at, i)
	}
	results := perItem(ctx, n, specs,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.TopicSpec) ([]*controllerv1.CreateTopicResult, error) {
			r, err := cc.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: items, ValidateOnly: req.ValidateOnly})
			return r.GetResults(), err
		},
		func(spec *controllerv1.TopicSpec, err error) *controllerv1.CreateTopicResult {
			return &controllerv1.CreateTopicResult{Name: spec.GetName(), Error: errs.ItemError(err)}
		})
	var created []*controllerv1.CreateTopicResult
	for j, r := range results {
		rt := &resp.Topics[at[j]]
		if e := errs.FromProto(r.GetError()); e != nil {
			rt.ErrorCode, rt.ErrorMessage = protoError(e)
			continue
		}
		rt.TopicID = topicID(r.GetTopicId())
		rt.NumPartitions = r.GetNumPartitions()
		rt.ReplicationFactor = int16(r.GetReplicationFactor())
		rt.Configs = createdConfigs(r.GetConfigs(), n.cache.Load().ClusterConfigs)
		created = append(created, r)
	}
	if !req.ValidateOnly && len(created) > 0 {
		n.awaitMetadata(ctx, func(img *metadata.Image) bool {
			for _, r := range created {
				if !hasPartitions(img, r.GetName(), r.GetTopicId(), int(r.GetNumPartitions())) {
					return false
				}
			}
			return true
		})
	}
	return resp
}

// createdConfigs are the configs a CreateTopics v5+ answer lists for a new
// topic: every entry with its effective value and where it comes from.
func createdConfigs(overrides, cluster map[string]string) []kmsg.CreateTopicsResponseTopicConfig {
	var out []kmsg.CreateTopicsResponseTopicConfig
	for _, d := range topicconfig.All() {
		v, src := topicconfig.Resolve(d.Name, overrides, cluster)
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value, c.Source = d.Name, &v, int8(kafkaSource(src))
		out = append(out, c)
	}
	return out
}

// kafkaSource maps where a topic config's value comes from to Kafka's
// config source.
func kafkaSource(s topicconfig.Source) kmsg.ConfigSource {
	switch s {
	case topicconfig.FromTopic:
		return kmsg.ConfigSourceDynamicTopicConfig
	case topicconfig.FromClusterDefault:
		return kmsg.ConfigSourceDynamicDefaultBrokerConfig
	default:
		return kmsg.ConfigSourceDefaultConfig
	}
}

// hasPartitions reports whether the image holds topic name (with id, when
// given) with at least count partitions, each with its record.
func hasPartitions(img *metadata.Image, name, id string, count int) bool {
	t, ok := img.Topics[name]
	if !ok || (id != "" && t.ID != id) || len(t.Partitions) < count {
		return false
	}
	for _, p := range t.Partitions {
		if p == nil {
			return false
		}
	}
	return true
}

// awaitMetadata waits until this node's metadata satisfies done, ctx ends
// or metadataWait passes. The change is made either way; waiting only
// spares the client a Metadata answer older than the change it was just
// told of, and a node cut off from the controller answers after a bounded
// wait rather than at the request's timeout.
func (n *node) awaitMetadata(ctx context.Context, done func(*metadata.Image) bool) {
	ctx, cancel := context.WithTimeout(ctx, metadataWait)
	defer cancel()
	if _, err := n.cache.WaitFor(ctx, done); err != nil {
		n.logger.Debug("admin change not yet in this node's metadata", log.Err(err))
	}
}

// deleteTopics forwards DeleteTopics to the active controller. Version 6
// names topics by name or id; an id is resolved to its name from this
// node's metadata.
func (n *node) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) *kmsg.DeleteTopicsResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	img := n.cache.Load()
	topics := req.Topics
	if req.Version < 6 {
		topics = nil
		for _, name := range req.TopicNames {
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = &name
			topics = append(topics, t)
		}
	}
	resp := kmsg.NewPtrDeleteTopicsResponse()
	resp.Topics = make([]kmsg.DeleteTopicsResponseTopic, len(topics))
	names := make([]string, len(topics))
	errsAt := make([]error, len(topics))
	for i, t := range topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewDeleteTopicsResponseTopic()
		rt.TopicID = t.TopicID
		switch {
		case t.Topic != nil:
			names[i] = *t.Topic
			if tt, ok := img.Topics[*t.Topic]; ok {
				rt.TopicID = topicID(tt.ID)
			}
		case t.TopicID != [16]byte{}:
			tt, ok := topicByID(img, t.TopicID)
			if !ok {
				errsAt[i] = errorf(errs.UnknownTopicID, "no topic has id %s", kafka.TopicIDString(t.TopicID))
				continue
			}
			names[i] = tt.Name
		default:
			errsAt[i] = errorf(errs.InvalidRequest, "a topic to delete needs a name or an id")
			continue
		}
		name := names[i]
		rt.Topic = &name
	}
	dups := duplicates(names, func(s string) string { return s })
	var items []string
	var at []int
	for i, name := range names {
		if errsAt[i] == nil && dups[name] > 1 {
			errsAt[i] = errorf(errs.InvalidRequest, "topic %q appears more than once in the request", name)
		}
		if errsAt[i] == nil {
			errsAt[i] = authz.Check(ctx, n.authz, authz.Delete, authz.Topic, name)
		}
		if errsAt[i] != nil {
			resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = kafkaError(errsAt[i])
			continue
		}
		items = append(items, name)
		at = append(at, i)
	}
	results := perItem(ctx, n, items,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []string) ([]*controllerv1.DeleteTopicResult, error) {
			r, err := cc.DeleteTopics(ctx, &controllerv1.DeleteTopicsRequest{Names: items})
			return r.GetResults(), err
		},
		func(name string, err error) *controllerv1.DeleteTopicResult {
			return &controllerv1.DeleteTopicResult{Name: name, Error: errs.ItemError(err)}
		})
	var deleted []string
	for j, r := range results {
		rt := &resp.Topics[at[j]]
		if e := errs.FromProto(r.GetError()); e != nil {
			rt.ErrorCode, rt.ErrorMessage = protoError(e)
			continue
		}
		deleted = append(deleted, r.GetName())
	}
	if len(deleted) > 0 {
		n.awaitMetadata(ctx, func(img *metadata.Image) bool {
			for _, name := range deleted {
				if _, ok := img.Topics[name]; ok {
					return false
				}
			}
			return true
		})
	}
	return resp
}

// createPartitions forwards CreatePartitions to the active controller.
func (n *node) createPartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) *kmsg.CreatePartitionsResponse {
	ctx, cancel := n.callTimeout(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreatePartitionsResponse()
	resp.Topics = make([]kmsg.CreatePartitionsResponseTopic, len(req.Topics))
	dups := duplicates(req.Topics, func(t kmsg.CreatePartitionsRequestTopic) string { return t.Topic })
	var items []*controllerv1.PartitionIncrease
	var at []int
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		if dups[t.Topic] > 1 {
			rt.ErrorCode, rt.ErrorMessage = kafkaError(errorf(errs.InvalidRequest, "topic %q appears more than once in the request", t.Topic))
			continue
		}
		if err := authz.Check(ctx, n.authz, authz.Alter, authz.Topic, t.Topic); err != nil {
			rt.ErrorCode, rt.ErrorMessage = kafkaError(err)
			continue
		}
		inc := &controllerv1.PartitionIncrease{Topic: t.Topic, TotalCount: t.Count}
		for j, a := range t.Assignment {
			inc.Assignments = append(inc.Assignments, &controllerv1.ReplicaAssignment{Partition: int32(j), Replicas: a.Replicas})
		}
		items = append(items, inc)
		at = append(at, i)
	}
	results := perItem(ctx, n, items,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.PartitionIncrease) ([]*controllerv1.CreatePartitionsResult, error) {
			r, err := cc.CreatePartitions(ctx, &controllerv1.CreatePartitionsRequest{Topics: items, ValidateOnly: req.ValidateOnly})
			return r.GetResults(), err
		},
		func(inc *controllerv1.PartitionIncrease, err error) *controllerv1.CreatePartitionsResult {
			return &controllerv1.CreatePartitionsResult{Topic: inc.GetTopic(), Error: errs.ItemError(err)}
		})
	var grown []*controllerv1.PartitionIncrease
	for j, r := range results {
		rt := &resp.Topics[at[j]]
		if e := errs.FromProto(r.GetError()); e != nil {
			rt.ErrorCode, rt.ErrorMessage = protoError(e)
			continue
		}
		grown = append(grown, items[j])
	}
	if !req.ValidateOnly && len(grown) > 0 {
		n.awaitMetadata(ctx, func(img *metadata.Image) bool {
			for _, inc := range grown {
				if !hasPartitions(img, inc.GetTopic(), "", int(inc.GetTotalCount())) {
					return false
				}
			}
			return true
		})
	}
	return resp
}
