package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// state is the controller's full view of etcd: the records themselves (with
// their mod revisions, for compare-and-swap writes) and the client-facing
// image derived from them. Every controller, active or standby, keeps one up
// to date from a single etcd watch; the active controller decides from it
// and writes with transactions compared on the revisions it read, so a
// decision made on a stale view fails instead of overwriting newer state.
type state struct {
	rev            int64
	clusterID      string
	election       map[string]electionKey // election key -> candidate
	controller     map[int32]*controllerv1.ControllerMember
	brokers        map[int32]*versioned[*metastorev1.BrokerRecord]
	topics         map[string]*versioned[*metastorev1.TopicRecord]
	partitions     map[string]map[int32]*versioned[*metastorev1.PartitionRecord]
	epoch          int64 // controller epoch
	pidNext        versioned[string]
	brokerEpoch    versioned[string]
	clusterConfigs versioned[*metastorev1.ConfigRecord]
	scramUsers     map[string]*versioned[*controllerv1.UserScramCredentials]
	acls           map[string]*versioned[*controllerv1.AclBinding]       // by id, see acls.go
	quotas         map[string]*versioned[*controllerv1.ClientQuotaEntry] // by id, see quotas.go
}

type electionKey struct {
	createRev int64
	nodeID    int32
}

// versioned is a record with the etcd mod revision it was read at.
type versioned[T any] struct {
	val    T
	modRev int64
}

func newState() *state {
	return &state{
		election:   map[string]electionKey{},
		controller: map[int32]*controllerv1.ControllerMember{},
		brokers:    map[int32]*versioned[*metastorev1.BrokerRecord]{},
		topics:     map[string]*versioned[*metastorev1.TopicRecord]{},
		partitions: map[string]map[int32]*versioned[*metastorev1.PartitionRecord]{},
		scramUsers: map[string]*versioned[*controllerv1.UserScramCredentials]{},
	}
}

// live returns the state of a node for the partition rules.
func (s *state) live(id int32) nodeState {
	b, ok := s.brokers[id]
	if !ok {
		return nodeGone
	}
	switch b.val.GetBroker().GetState() {
	case commonv1.BrokerState_BROKER_STATE_ALIVE:
		return nodeAlive
	case commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN:
		return nodeShuttingDown
	default:
		return nodeFenced
	}
}

// topicConfig returns a topic's effective value of a config entry.
func (s *state) topicConfig(topic, name string) string {
	var overrides map[string]string
	if t, ok := s.topics[topic]; ok {
		overrides = t.val.GetConfigs()
	}
	v, _ := topicconfig.Resolve(name, overrides, s.clusterConfigs.val.GetConfigs())
	return v
}

// minISR returns a topic's min.insync.replicas.
func (s *state) minISR(topic string) int {
	if v, err := strconv.Atoi(s.topicConfig(topic, "min.insync.replicas")); err == nil && v > 0 {
		return v
	}
	return 1
}

// uncleanElection reports whether a topic's effective
// unclean.leader.election.enable (the topic's override, else the cluster
// default) is true.
func (s *state) uncleanElection(topic string) bool {
	v, err := strconv.ParseBool(s.topicConfig(topic, "unclean.leader.election.enable"))
	return err == nil && v
}

// eachPartition calls fn for every partition, in topic and index order.
func (s *state) eachPartition(fn func(topic string, p int32, r *versioned[*metastorev1.PartitionRecord])) {
	names := make([]string, 0, len(s.partitions))
	for name := range s.partitions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ps := s.partitions[name]
		idx := make([]int32, 0, len(ps))
		for p := range ps {
			idx = append(idx, p)
		}
		slices.Sort(idx)
		for _, p := range idx {
			fn(name, p, ps[p])
		}
	}
}

// activeID is the node id of the election leader: the candidate whose key
// was created first.
func (s *state) activeID() int32 {
	best, id := int64(0), int32(-1)
	for _, e := range s.election {
		if best == 0 || e.createRev < best {
			best, id = e.createRev, e.nodeID
		}
	}
	return id
}

// change records what one etcd revision touched, to build a delta.
type change struct {
	brokers     map[int32]bool
	topics      map[string]bool
	partitions  map[string]map[int32]bool
	deleted     map[string]bool
	controllers bool
	configs     bool
	scramUsers  map[string]bool
	acls        bool
	quotas      bool
}

func newChange() *change {
	return &change{brokers: map[int32]bool{}, topics: map[string]bool{}, partitions: map[string]map[int32]bool{}, deleted: map[string]bool{}, scramUsers: map[string]bool{}}
}

// apply applies one etcd key-value event to the state. key is relative to
// the store prefix.
func (s *state) apply(key string, kv *mvccpb.KeyValue, deleted bool, ch *change) error {
	switch {
	case key == metastore.KeyClusterID:
		if !deleted {
			s.clusterID = string(kv.Value)
		}
	case key == metastore.KeyControllerEpoch:
		if !deleted {
			s.epoch, _ = strconv.ParseInt(string(kv.Value), 10, 64)
		}
	case key == metastore.KeyProducerIDNext:
		if deleted {
			// Allocation refuses to go on rather than restart at 0.
			s.pidNext = versioned[string]{modRev: pidCounterDeleted}
		} else {
			s.pidNext = versioned[string]{val: string(kv.Value), modRev: kv.ModRevision}
		}
	case key == metastore.BrokerConfigKey(-1):
		r := &metastorev1.ConfigRecord{}
		if !deleted {
			if err := proto.Unmarshal(kv.Value, r); err != nil {
				return fmt.Errorf("decoding %q: %w", key, err)
			}
		}
		s.clusterConfigs = versioned[*metastorev1.ConfigRecord]{val: r, modRev: kv.ModRevision}
		ch.configs = true
	case key == metastore.KeyBrokerEpoch:
		if !deleted {
			s.brokerEpoch = versioned[string]{val: string(kv.Value), modRev: kv.ModRevision}
		}
	case strings.HasPrefix(key, metastore.KeyControllerLeader+"/"):
		if deleted {
			delete(s.election, key)
		} else {
			id, _ := strconv.Atoi(string(kv.Value))
			s.election[key] = electionKey{createRev: kv.CreateRevision, nodeID: int32(id)}
		}
		ch.controllers = true
	case strings.HasPrefix(key, metastore.PrefixQuotas):
		return s.applyQuota(strings.TrimPrefix(key, metastore.PrefixQuotas), kv, deleted, ch)
	case strings.HasPrefix(key, metastore.PrefixACLs):
		return s.applyACL(strings.TrimPrefix(key, metastore.PrefixACLs), kv, deleted, ch)
	case strings.HasPrefix(key, metastore.PrefixScramUsers):
		return s.applyScramUser(strings.TrimPrefix(key, metastore.PrefixScramUsers), kv, deleted, ch)
	case strings.HasPrefix(key, metastore.PrefixControllers):
		id, err := strconv.Atoi(strings.TrimPrefix(key, metastore.PrefixControllers))
		if err != nil {
			return fmt.Errorf("bad controller key %q", key)
		}
		if deleted {
			delete(s.controller, int32(id))
		} else {
			m := &controllerv1.ControllerMember{}
			if err := proto.Unmarshal(kv.Value, m); err != nil {
				return fmt.Errorf("decoding %q: %w", key, err)
			}
			s.controller[int32(id)] = m
		}
		ch.controllers = true
	case strings.HasPrefix(key, metastore.PrefixBrokers):
		id, err := strconv.Atoi(strings.TrimPrefix(key, metastore.PrefixBrokers))
		if err != nil {
			return fmt.Errorf("bad broker key %q", key)
		}
		if deleted {
			delete(s.brokers, int32(id))
		} else {
			r := &metastorev1.BrokerRecord{}
			if err := proto.Unmarshal(kv.Value, r); err != nil {
				return fmt.Errorf("decoding %q: %w", key, err)
			}
			s.brokers[int32(id)] = &versioned[*metastorev1.BrokerRecord]{val: r, modRev: kv.ModRevision}
		}
		ch.brokers[int32(id)] = true
	case strings.HasPrefix(key, metastore.PrefixTopics):
		name := strings.TrimPrefix(key, metastore.PrefixTopics)
		if deleted {
			delete(s.topics, name)
			delete(s.partitions, name)
			ch.deleted[name] = true
			delete(ch.topics, name)
			delete(ch.partitions, name)
		} else {
			r := &metastorev1.TopicRecord{}
			if err := proto.Unmarshal(kv.Value, r); err != nil {
				return fmt.Errorf("decoding %q: %w", key, err)
			}
			if old, ok := s.topics[name]; ok && old.val.GetTopicId() != r.GetTopicId() {
				delete(s.partitions, name) // re-created under the same name
			}
			s.topics[name] = &versioned[*metastorev1.TopicRecord]{val: r, modRev: kv.ModRevision}
			ch.topics[name] = true
			delete(ch.deleted, name)
		}
	case strings.HasPrefix(key, metastore.PrefixPartitions):
		topic, p, ok := metastore.ParsePartitionKey(key)
		if !ok {
			return fmt.Errorf("bad partition key %q", key)
		}
		if deleted {
			if ps := s.partitions[topic]; ps != nil {
				delete(ps, p)
			}
			return nil // partitions are only deleted with their topic
		}
		r := &metastorev1.PartitionRecord{}
		if err := proto.Unmarshal(kv.Value, r); err != nil {
			return fmt.Errorf("decoding %q: %w", key, err)
		}
		if s.partitions[topic] == nil {
			s.partitions[topic] = map[int32]*versioned[*metastorev1.PartitionRecord]{}
		}
		s.partitions[topic][p] = &versioned[*metastorev1.PartitionRecord]{val: r, modRev: kv.ModRevision}
		if ch.partitions[topic] == nil {
			ch.partitions[topic] = map[int32]bool{}
		}
		ch.partitions[topic][p] = true
	}
	return nil
}

// image renders the client-facing metadata image.
func (s *state) image() *metadata.Image {
	img := &metadata.Image{
		Revision:       s.rev,
		ClusterID:      s.clusterID,
		ControllerID:   s.activeID(),
		Controllers:    s.controllers(),
		Brokers:        make(map[int32]*commonv1.Broker, len(s.brokers)),
		Topics:         make(map[string]*metadata.Topic, len(s.topics)),
		ClusterConfigs: s.clusterConfigs.val.GetConfigs(),
	}
	for id, b := range s.brokers {
		img.Brokers[id] = b.val.GetBroker()
	}
	img.ScramUsers = s.scramImage()
	img.ACLs = s.aclSet()
	img.Quotas = s.quotaSet()
	for name := range s.topics {
		img.Topics[name] = s.topicImage(name, nil)
	}
	return img
}

func (s *state) controllers() []*controllerv1.ControllerMember {
	active := s.activeID()
	out := make([]*controllerv1.ControllerMember, 0, len(s.controller))
	for _, m := range s.controller {
		c := proto.Clone(m).(*controllerv1.ControllerMember)
		c.Active = c.GetNodeId() == active
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}

// topicImage renders a topic; with only set, just those partitions.
func (s *state) topicImage(name string, only map[int32]bool) *metadata.Topic {
	t := s.topics[name].val
	out := &metadata.Topic{Name: name, ID: t.GetTopicId(), Internal: t.GetInternal(), Configs: t.GetConfigs()}
	n := t.GetNumPartitions()
	out.Partitions = make([]*commonv1.PartitionState, 0, n)
	for p := int32(0); p < n; p++ {
		if only != nil && !only[p] {
			continue
		}
		if r, ok := s.partitions[name][p]; ok {
			out.Partitions = append(out.Partitions, s.withOffline(r.val.GetState()))
		}
	}
	return out
}

// withOffline fills offline_replicas from the current broker states.
func (s *state) withOffline(p *commonv1.PartitionState) *commonv1.PartitionState {
	var offline []int32
	for _, r := range p.GetReplicas() {
		if b, ok := s.brokers[r]; !ok || b.val.GetBroker().GetState() == commonv1.BrokerState_BROKER_STATE_FENCED {
			offline = append(offline, r)
		}
	}
	if len(offline) == 0 && len(p.GetOfflineReplicas()) == 0 {
		return p
	}
	c := proto.Clone(p).(*commonv1.PartitionState)
	c.OfflineReplicas = offline
	return c
}

// delta renders what one revision changed.
func (s *state) delta(ch *change) *controllerv1.MetadataDelta {
	d := &controllerv1.MetadataDelta{Revision: s.rev}
	if ch.configs {
		d.ClusterConfigs = &controllerv1.ClusterConfigs{Configs: s.clusterConfigs.val.GetConfigs()}
	}
	if ch.controllers {
		id := s.activeID()
		d.ControllerId = &id
		d.Controllers = s.controllers()
	}
	s.scramDelta(ch, d)
	s.aclDelta(ch, d)
	s.quotaDelta(ch, d)
	for id := range ch.brokers {
		if b, ok := s.brokers[id]; ok {
			d.UpsertedBrokers = append(d.UpsertedBrokers, b.val.GetBroker())
		} else {
			d.RemovedBrokers = append(d.RemovedBrokers, id)
		}
	}
	for name := range ch.deleted {
		d.DeletedTopics = append(d.DeletedTopics, name)
	}
	// Topics whose record changed are sent whole; otherwise only the changed
	// partitions, plus those whose offline replicas changed with a broker.
	some := map[string]map[int32]bool{}
	mark := func(name string, p int32) {
		if ch.topics[name] {
			return
		}
		if some[name] == nil {
			some[name] = map[int32]bool{}
		}
		some[name][p] = true
	}
	for name, ps := range ch.partitions {
		for p := range ps {
			mark(name, p)
		}
	}
	if len(ch.brokers) > 0 {
		for name, ps := range s.partitions {
			for p, r := range ps {
				for _, rep := range r.val.GetState().GetReplicas() {
					if ch.brokers[rep] {
						mark(name, p)
						break
					}
				}
			}
		}
	}
	for name := range ch.topics {
		d.UpsertedTopics = append(d.UpsertedTopics, s.topicImage(name, nil).Metadata())
	}
	for name, ps := range some {
		if _, ok := s.topics[name]; ok {
			d.UpsertedTopics = append(d.UpsertedTopics, s.topicImage(name, ps).Metadata())
		}
	}
	return d
}

// load reads every key under the prefix at one revision.
func (c *Controller) loadState(ctx context.Context) (*state, error) {
	resp, err := c.store.Client.Get(ctx, c.store.Prefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading metadata from etcd: %w", err)
	}
	s := newState()
	s.rev = resp.Header.GetRevision()
	ch := newChange()
	for _, kv := range resp.Kvs {
		if err := s.apply(strings.TrimPrefix(string(kv.Key), c.store.Prefix()), kv, false, ch); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// follow keeps c.st and the metadata cache in step with etcd until ctx
// ends, reloading everything when the watch falls behind etcd's compaction.
func (c *Controller) follow(ctx context.Context) {
	for ctx.Err() == nil {
		st, err := c.loadState(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Warn("cannot load metadata; retrying", log.Err(err))
				sleepCtx(ctx, 500*time.Millisecond)
			}
			continue
		}
		c.setState(st, nil)
		wch := c.store.Client.Watch(clientv3.WithRequireLeader(ctx), c.store.Prefix(), clientv3.WithPrefix(), clientv3.WithRev(st.rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				c.logger.Debug("metadata watch ended; reloading", log.Err(err))
				break
			}
			if err := c.applyEvents(resp.Events); err != nil {
				c.logger.Error("corrupt metadata in etcd; reloading", log.Err(err))
				break
			}
		}
	}
}

// applyEvents applies a watch response, one delta per etcd revision.
func (c *Controller) applyEvents(events []*clientv3.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	for i := 0; i < len(events); {
		rev := events[i].Kv.ModRevision
		ch := newChange()
		for ; i < len(events) && events[i].Kv.ModRevision == rev; i++ {
			ev := events[i]
			key := strings.TrimPrefix(string(ev.Kv.Key), c.store.Prefix())
			if err := st.apply(key, ev.Kv, ev.Type == clientv3.EventTypeDelete, ch); err != nil {
				return err
			}
		}
		st.rev = rev
		if ch.controllers {
			c.remember(st.controllers()) // lock order: c.mu, then c.quorum.mu
		}
		c.cache.Apply(st.delta(ch))
	}
	return nil
}

// WatchMetadata streams metadata from this controller's cache. Any
// controller serves it.
func (c *Controller) WatchMetadata(r *controllerv1.WatchMetadataRequest, stream grpc.ServerStreamingServer[controllerv1.WatchMetadataResponse]) error {
	if err := c.internal(stream.Context(), "WatchMetadata", metadataWatchers); err != nil {
		return err
	}
	// The stream ends when the controller stops, so the server need not
	// wait for watchers to hang up.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(c.runCtx, cancel)()
	if err := metadata.Serve(ctx, c.cache, r.GetFromRevision(), stream.Send); err != nil {
		return err
	}
	if c.runCtx.Err() != nil {
		return errs.New(errs.NodeNotReady, "controller %d is stopping", c.nodeID)
	}
	return nil
}
