// Package metadata holds a node's view of cluster metadata: an immutable
// Image (nodes, controllers, topics and partition states at one etcd
// revision), a Cache that advances it by applying deltas and lets readers
// wait for changes, the MetadataService that answers clients from it, and the
// Watcher that keeps a non-controller node's cache in step with the
// controllers' WatchMetadata stream.
//
//	cache := metadata.NewCache()
//	w := metadata.NewWatcher(cache, controllerAddrs, nodeID, logger)
//	... w.Start(ctx) ...
//	img := cache.Load()
//	p, ok := img.Partition("orders", 3)
package metadata

import (
	"maps"
	"slices"
	"sort"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// Image is cluster metadata at one revision. It is never modified after it
// is built; Apply returns a new Image that shares what did not change. The
// protobuf messages it holds must be treated as read-only.
type Image struct {
	Revision     int64
	ClusterID    string
	ControllerID int32
	Controllers  []*controllerv1.ControllerMember
	Brokers      map[int32]*commonv1.Broker
	Topics       map[string]*Topic
	// ClusterConfigs are the cluster-wide dynamic defaults of topic configs
	// (Kafka's broker names).
	ClusterConfigs map[string]string
	// ScramUsers are users' SCRAM credentials by user name (see
	// libs/scram, which verifies against them).
	ScramUsers map[string]*controllerv1.UserScramCredentials
	// ACLs is every ACL of the cluster (process authorizers decide from
	// it, see authz.FromProtoSet).
	ACLs *controllerv1.AclSet
	// Quotas is every client quota of the cluster (each process enforces
	// from it, see quota.Follow); nil when none was ever set.
	Quotas *controllerv1.QuotaSet
}

// Topic is one topic in an Image.
type Topic struct {
	Name       string
	ID         string
	Internal   bool
	Configs    map[string]string
	Partitions []*commonv1.PartitionState
}

// Empty returns the image of a node that has not heard from a controller.
func Empty() *Image {
	return &Image{ControllerID: -1, Brokers: map[int32]*commonv1.Broker{}, Topics: map[string]*Topic{}}
}

// FromSnapshot builds an Image from a snapshot.
func FromSnapshot(s *controllerv1.MetadataSnapshot) *Image {
	img := &Image{
		Revision:       s.GetRevision(),
		ClusterID:      s.GetClusterId(),
		ControllerID:   s.GetControllerId(),
		Controllers:    sortedControllers(s.GetControllers()),
		Brokers:        make(map[int32]*commonv1.Broker, len(s.GetBrokers())),
		Topics:         make(map[string]*Topic, len(s.GetTopics())),
		ClusterConfigs: s.GetClusterConfigs().GetConfigs(),
		ScramUsers:     scramUsers(s.GetScramUsers()),
		ACLs:           s.GetAcls(),
		Quotas:         s.GetQuotas(),
	}
	for _, b := range s.GetBrokers() {
		img.Brokers[b.GetId()] = b
	}
	for _, t := range s.GetTopics() {
		img.Topics[t.GetName()] = topicFrom(t, nil)
	}
	return img
}

// topicFrom builds a Topic from its metadata message, merging partitions by
// index into those of prev (for deltas).
func topicFrom(t *controllerv1.TopicMetadata, prev *Topic) *Topic {
	out := &Topic{Name: t.GetName(), ID: t.GetTopicId(), Internal: t.GetInternal(), Configs: t.GetConfigs()}
	if prev != nil && prev.ID == t.GetTopicId() {
		out.Partitions = slices.Clone(prev.Partitions)
	}
	for _, p := range t.GetPartitions() {
		i := int(p.GetPartition())
		for len(out.Partitions) <= i {
			out.Partitions = append(out.Partitions, nil)
		}
		out.Partitions[i] = p
	}
	return out
}

// Apply returns the image after delta.
func (img *Image) Apply(d *controllerv1.MetadataDelta) *Image {
	out := *img
	out.Revision = d.GetRevision()
	if d.ControllerId != nil {
		out.ControllerID = d.GetControllerId()
	}
	if len(d.GetControllers()) > 0 {
		out.Controllers = sortedControllers(d.GetControllers())
	}
	if d.GetClusterConfigs() != nil {
		out.ClusterConfigs = d.GetClusterConfigs().GetConfigs()
	}
	if len(d.GetUpsertedBrokers()) > 0 || len(d.GetRemovedBrokers()) > 0 {
		out.Brokers = maps.Clone(img.Brokers)
		for _, b := range d.GetUpsertedBrokers() {
			out.Brokers[b.GetId()] = b
		}
		for _, id := range d.GetRemovedBrokers() {
			delete(out.Brokers, id)
		}
	}
	if d.GetAcls() != nil {
		out.ACLs = d.GetAcls()
	}
	if d.GetQuotas() != nil {
		out.Quotas = d.GetQuotas()
	}
	if len(d.GetUpsertedScramUsers()) > 0 || len(d.GetDeletedScramUsers()) > 0 {
		out.ScramUsers = maps.Clone(img.ScramUsers)
		if out.ScramUsers == nil {
			out.ScramUsers = map[string]*controllerv1.UserScramCredentials{}
		}
		for _, u := range d.GetUpsertedScramUsers() {
			out.ScramUsers[u.GetUser()] = u
		}
		for _, name := range d.GetDeletedScramUsers() {
			delete(out.ScramUsers, name)
		}
	}
	if len(d.GetUpsertedTopics()) > 0 || len(d.GetDeletedTopics()) > 0 {
		out.Topics = maps.Clone(img.Topics)
		for _, name := range d.GetDeletedTopics() {
			delete(out.Topics, name)
		}
		for _, t := range d.GetUpsertedTopics() {
			out.Topics[t.GetName()] = topicFrom(t, img.Topics[t.GetName()])
		}
	}
	return &out
}

// Snapshot renders the image as a snapshot message.
func (img *Image) Snapshot() *controllerv1.MetadataSnapshot {
	s := &controllerv1.MetadataSnapshot{
		Revision:       img.Revision,
		ClusterId:      img.ClusterID,
		ControllerId:   img.ControllerID,
		Controllers:    img.Controllers,
		ClusterConfigs: &controllerv1.ClusterConfigs{Configs: img.ClusterConfigs},
	}
	for _, id := range img.BrokerIDs() {
		s.Brokers = append(s.Brokers, img.Brokers[id])
	}
	for _, name := range img.TopicNames(true) {
		s.Topics = append(s.Topics, img.Topics[name].Metadata())
	}
	s.Acls = img.ACLs
	s.Quotas = img.Quotas
	for _, name := range slices.Sorted(maps.Keys(img.ScramUsers)) {
		s.ScramUsers = append(s.ScramUsers, img.ScramUsers[name])
	}
	return s
}

// scramUsers indexes users' SCRAM credentials by name.
func scramUsers(us []*controllerv1.UserScramCredentials) map[string]*controllerv1.UserScramCredentials {
	out := make(map[string]*controllerv1.UserScramCredentials, len(us))
	for _, u := range us {
		out[u.GetUser()] = u
	}
	return out
}

// Metadata renders the topic as a metadata message.
func (t *Topic) Metadata() *controllerv1.TopicMetadata {
	return &controllerv1.TopicMetadata{Name: t.Name, TopicId: t.ID, Internal: t.Internal, Configs: t.Configs, Partitions: t.Partitions}
}

// BrokerIDs returns the ids of every registered node, sorted.
func (img *Image) BrokerIDs() []int32 {
	ids := slices.Collect(maps.Keys(img.Brokers))
	slices.Sort(ids)
	return ids
}

// TopicNames returns topic names, sorted; internal ones only if asked.
func (img *Image) TopicNames(includeInternal bool) []string {
	var out []string
	for name, t := range img.Topics {
		if includeInternal || !t.Internal {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Partition returns a partition's state.
func (img *Image) Partition(topic string, partition int32) (*commonv1.PartitionState, bool) {
	t, ok := img.Topics[topic]
	if !ok || partition < 0 || int(partition) >= len(t.Partitions) || t.Partitions[partition] == nil {
		return nil, false
	}
	return t.Partitions[partition], true
}

// Address returns the gRPC address of a node ("" if unknown).
func (img *Image) Address(nodeID int32) string {
	if b, ok := img.Brokers[nodeID]; ok {
		return BrokerAddress(b)
	}
	for _, c := range img.Controllers {
		if c.GetNodeId() == nodeID {
			return c.GetAddress()
		}
	}
	return ""
}

// ControllerAddress returns the active controller's address ("" during an
// election).
func (img *Image) ControllerAddress() string {
	for _, c := range img.Controllers {
		if c.GetNodeId() == img.ControllerID {
			return c.GetAddress()
		}
	}
	return ""
}

// BrokerAddress returns the host:port of a node's gRPC endpoint.
func BrokerAddress(b *commonv1.Broker) string {
	for _, e := range b.GetEndpoints() {
		if e.GetName() == "grpc" || e.GetName() == "" {
			return hostPort(e)
		}
	}
	if len(b.GetEndpoints()) > 0 {
		return hostPort(b.GetEndpoints()[0])
	}
	return ""
}

// KafkaEndpoint returns a node's Kafka-protocol listener (the endpoint named
// "kafka"), or nil when the node serves none.
func KafkaEndpoint(b *commonv1.Broker) *commonv1.Endpoint {
	for _, e := range b.GetEndpoints() {
		if e.GetName() == "kafka" {
			return e
		}
	}
	return nil
}

func hostPort(e *commonv1.Endpoint) string {
	return joinHostPort(e.GetHost(), e.GetPort())
}

// Alive reports whether a node is registered and not fenced.
func (img *Image) Alive(nodeID int32) bool {
	b, ok := img.Brokers[nodeID]
	return ok && b.GetState() == commonv1.BrokerState_BROKER_STATE_ALIVE
}

func sortedControllers(cs []*controllerv1.ControllerMember) []*controllerv1.ControllerMember {
	out := slices.Clone(cs)
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}
