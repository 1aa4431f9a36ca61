package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/naming"
	"github.com/sluice-io/sluice/libs/role"
)

// maxPartitionsPerTopic bounds a topic so that creating it stays one etcd
// transaction (the embedded etcd allows maxTopicTxnOps operations).
const (
	maxPartitionsPerTopic = 10000
	maxTopicTxnOps        = metastore.MaxTxnOps
)

// CreateTopics creates each topic in its own transaction and reports a
// result per topic. Creating a topic is all or nothing: the topic record and
// every partition record commit together.
func (c *Controller) CreateTopics(ctx context.Context, r *controllerv1.CreateTopicsRequest) (*controllerv1.CreateTopicsResponse, error) {
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.CreateTopicsResponse{}
	// Create on the cluster covers every topic; without it, each topic
	// needs Create on itself (Kafka's rule).
	clusterCreate := authz.Allowed(ctx, c.authorizer(), authz.Create, authz.Cluster, authz.ClusterName)
	for _, spec := range r.GetTopics() {
		if !clusterCreate {
			if err := c.check(ctx, authz.Create, authz.Topic, spec.GetName()); err != nil {
				out.Results = append(out.Results, &controllerv1.CreateTopicResult{Name: spec.GetName(), Error: errs.ItemError(err)})
				continue
			}
		}
		out.Results = append(out.Results, c.createTopic(ctx, t, spec, r.GetValidateOnly()))
	}
	return out, nil
}

func (c *Controller) createTopic(ctx context.Context, t *term, spec *controllerv1.TopicSpec, validateOnly bool) *controllerv1.CreateTopicResult {
	res := &controllerv1.CreateTopicResult{Name: spec.GetName()}
	_, err := c.updateLarge(ctx, t, func(st *state) (*txn, error) {
		if old, ok := st.topics[spec.GetName()]; ok {
			return nil, errs.New(errs.TopicAlreadyExists, "topic %q already exists with %d partitions", spec.GetName(), old.val.GetNumPartitions())
		}
		key := naming.TopicCollisionKey(spec.GetName())
		for name := range st.topics {
			if naming.TopicCollisionKey(name) == key {
				return nil, errs.New(errs.InvalidTopic, "topic %q collides with existing topic %q: names that differ only in '.' and '_' cannot coexist", spec.GetName(), name)
			}
		}
		if err := checkTopicConfigs(spec.GetConfigs()); err != nil {
			return nil, err
		}
		assignment, err := c.assignmentFor(st, spec)
		if err != nil {
			return nil, err
		}
		if err := st.checkMinISR(spec.GetName(), spec.GetConfigs(), len(assignment[0])); err != nil {
			return nil, err
		}
		res.NumPartitions = int32(len(assignment))
		res.ReplicationFactor = int32(len(assignment[0]))
		res.Configs = spec.GetConfigs()
		res.TopicId = newUUID()
		if validateOnly {
			return nil, nil
		}
		x := &txn{}
		c.put(x, metastore.TopicKey(spec.GetName()), 0, &metastorev1.TopicRecord{
			Name: spec.GetName(), TopicId: res.TopicId, Internal: naming.IsInternalTopic(spec.GetName()),
			Configs: spec.GetConfigs(), NumPartitions: res.NumPartitions, CreatedAtMs: time.Now().UnixMilli(),
			ControllerEpoch: t.epoch,
		})
		for p, replicas := range assignment {
			c.putPartition(x, st, spec.GetName(), int32(p), newPartition(spec.GetName(), int32(p), replicas, st.live), t.epoch)
		}
		return x, nil
	})
	if err != nil {
		res.Error = errs.ItemError(err)
		return res
	}
	if !validateOnly {
		c.logger.Info("topic created", log.Topic(spec.GetName()), log.Component("topics"))
	}
	return res
}

// putPartition writes a new partition record, replacing any leftover record
// at that key (partitions of a deleted topic are deleted with it, so a
// leftover can only come from an interrupted older version).
func (c *Controller) putPartition(x *txn, st *state, topic string, p int32, ps *commonv1.PartitionState, epoch int64) {
	var modRev int64
	if old, ok := st.partitions[topic][p]; ok {
		modRev = old.modRev
	}
	c.put(x, metastore.PartitionKey(topic, p), modRev, &metastorev1.PartitionRecord{State: ps, ControllerEpoch: epoch})
}

// newPartition is the state of a new, empty partition: every replica is in
// sync (there is nothing to copy) and the first live one leads.
func newPartition(topic string, p int32, replicas []int32, live liveness) *commonv1.PartitionState {
	return &commonv1.PartitionState{
		Topic: topic, Partition: p, LeaderId: electFrom(replicas, replicas, live),
		Replicas: slices.Clone(replicas), Isr: slices.Clone(replicas),
	}
}

// storageNodes returns the live nodes that run the storage-node role.
func (st *state) storageNodes() []node {
	var out []node
	for id, b := range st.brokers {
		if st.live(id) == nodeAlive && slices.Contains(b.val.GetBroker().GetRoles(), string(role.StorageNode)) {
			out = append(out, node{id: id, rack: b.val.GetBroker().GetRack()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// isStorageNode reports whether id is a registered storage node (in any
// state).
func (st *state) isStorageNode(id int32) bool {
	b, ok := st.brokers[id]
	return ok && slices.Contains(b.val.GetBroker().GetRoles(), string(role.StorageNode))
}

// preferredCounts counts, per node, the partitions it is preferred leader of.
func (st *state) preferredCounts() map[int32]int {
	out := map[int32]int{}
	st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
		if p := firstReplica(r.val.GetState()); p >= 0 {
			out[p]++
		}
	})
	return out
}

// assignmentFor returns the replicas of every partition of a new topic:
// the explicit assignment (checked against registered storage nodes) or a
// placement over the live ones.
func (c *Controller) assignmentFor(st *state, spec *controllerv1.TopicSpec) ([][]int32, error) {
	if len(spec.GetAssignments()) > 0 {
		out := make([][]int32, len(spec.GetAssignments()))
		for _, a := range spec.GetAssignments() {
			if err := c.checkReplicas(st, a.GetReplicas()); err != nil {
				return nil, errs.New(errs.InvalidReplicaAssignment, "partition %d: %v", a.GetPartition(), err)
			}
			out[a.GetPartition()] = a.GetReplicas()
		}
		return out, nil
	}
	partitions := c.cfg.DefaultPartitions
	if spec.NumPartitions != nil {
		partitions = int(spec.GetNumPartitions())
	}
	rf := c.cfg.DefaultReplicationFactor
	if spec.ReplicationFactor != nil {
		rf = int(spec.GetReplicationFactor())
	}
	nodes := st.storageNodes()
	if rf > len(nodes) {
		return nil, errs.New(errs.InvalidReplicationFactor, "replication factor %d is larger than the %d live storage nodes; start more nodes or lower it", rf, len(nodes))
	}
	out, err := assignReplicas(nodes, partitions, rf, 0, leastLoadedStart(nodes, st.preferredCounts()))
	if err != nil {
		return nil, errs.New(errs.InvalidReplicationFactor, "%v", err)
	}
	return out, nil
}

// checkReplicas validates an explicit replica list.
func (c *Controller) checkReplicas(st *state, replicas []int32) error {
	if len(replicas) == 0 {
		return fmt.Errorf("no replicas")
	}
	seen := map[int32]bool{}
	for _, r := range replicas {
		if seen[r] {
			return fmt.Errorf("node %d appears twice", r)
		}
		seen[r] = true
		if !st.isStorageNode(r) {
			return fmt.Errorf("node %d is not a registered storage node", r)
		}
	}
	return nil
}

// updateLarge is update for writes that may exceed the per-transaction
// limit used by the reconciler (a topic with many partitions).
func (c *Controller) updateLarge(ctx context.Context, t *term, decide func(st *state) (*txn, error)) (int64, error) {
	return c.update(ctx, t, func(st *state) (*txn, error) {
		x, err := decide(st)
		if x != nil {
			x.large = true
		}
		return x, err
	})
}

// DeleteTopics deletes topics and their partition records in one
// transaction per topic. Storage nodes delete the data when the topic
// leaves their metadata.
func (c *Controller) DeleteTopics(ctx context.Context, r *controllerv1.DeleteTopicsRequest) (*controllerv1.DeleteTopicsResponse, error) {
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.DeleteTopicsResponse{}
	for _, name := range r.GetNames() {
		res := &controllerv1.DeleteTopicResult{Name: name}
		if err := c.check(ctx, authz.Delete, authz.Topic, name); err != nil {
			res.Error = errs.ItemError(err)
			out.Results = append(out.Results, res)
			continue
		}
		_, err := c.updateLarge(ctx, t, func(st *state) (*txn, error) {
			tr, ok := st.topics[name]
			if !ok {
				return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name)
			}
			x := &txn{}
			c.del(x, metastore.TopicKey(name), tr.modRev)
			for p, pr := range st.partitions[name] {
				c.del(x, metastore.PartitionKey(name, p), pr.modRev)
			}
			return x, nil
		})
		res.Error = errs.ItemError(err)
		if err == nil {
			c.logger.Info("topic deleted", log.Topic(name))
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// ListTopics lists topics. Like every read a controller answers, it is
// linearizable: the controller first catches up with etcd's current
// revision, so it never answers from a view older than an acknowledged
// write, whichever controller made it.
func (c *Controller) ListTopics(ctx context.Context, r *controllerv1.ListTopicsRequest) (*controllerv1.ListTopicsResponse, error) {
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	img := c.cache.Load()
	out := &controllerv1.ListTopicsResponse{}
	for _, name := range authz.FilterAllowed(ctx, c.authorizer(), authz.Describe, authz.Topic, img.TopicNames(r.GetIncludeInternal())) {
		t := img.Topics[name]
		l := &controllerv1.TopicListing{Name: name, TopicId: t.ID, NumPartitions: int32(len(t.Partitions)), Internal: t.Internal}
		if len(t.Partitions) > 0 {
			l.ReplicationFactor = int32(len(t.Partitions[0].GetReplicas()))
		}
		out.Topics = append(out.Topics, l)
	}
	return out, nil
}

// DescribeTopics describes topics; it is linearizable like ListTopics.
func (c *Controller) DescribeTopics(ctx context.Context, r *controllerv1.DescribeTopicsRequest) (*controllerv1.DescribeTopicsResponse, error) {
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	img := c.cache.Load()
	names := r.GetNames()
	if len(names) == 0 {
		names = authz.FilterAllowed(ctx, c.authorizer(), authz.Describe, authz.Topic, img.TopicNames(false))
	}
	out := &controllerv1.DescribeTopicsResponse{}
	for _, name := range names {
		if err := c.check(ctx, authz.Describe, authz.Topic, name); err != nil {
			out.Topics = append(out.Topics, &controllerv1.TopicDescription{Name: name, Error: errs.ItemError(err)})
			continue
		}
		t, ok := img.Topics[name]
		if !ok {
			out.Topics = append(out.Topics, &controllerv1.TopicDescription{Name: name,
				Error: errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto()})
			continue
		}
		out.Topics = append(out.Topics, &controllerv1.TopicDescription{
			Name: name, TopicId: t.ID, Internal: t.Internal, Partitions: t.Partitions, Configs: t.Configs,
		})
	}
	return out, nil
}

// CreatePartitions grows topics. New partitions continue the topic's
// placement pattern unless an explicit assignment is given.
func (c *Controller) CreatePartitions(ctx context.Context, r *controllerv1.CreatePartitionsRequest) (*controllerv1.CreatePartitionsResponse, error) {
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.CreatePartitionsResponse{}
	for _, inc := range r.GetTopics() {
		res := &controllerv1.CreatePartitionsResult{Topic: inc.GetTopic()}
		if err := c.check(ctx, authz.Alter, authz.Topic, inc.GetTopic()); err != nil {
			res.Error = errs.ItemError(err)
			out.Results = append(out.Results, res)
			continue
		}
		_, err := c.updateLarge(ctx, t, func(st *state) (*txn, error) {
			tr, ok := st.topics[inc.GetTopic()]
			if !ok {
				return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", inc.GetTopic())
			}
			cur := tr.val.GetNumPartitions()
			if inc.GetTotalCount() <= cur {
				return nil, errs.New(errs.InvalidPartitions, "topic %q has %d partitions; the new count %d must be larger (partitions are never removed)",
					inc.GetTopic(), cur, inc.GetTotalCount())
			}
			if inc.GetTotalCount() > maxPartitionsPerTopic {
				return nil, errs.New(errs.InvalidPartitions, "topic %q cannot have more than %d partitions", inc.GetTopic(), maxPartitionsPerTopic)
			}
			add := int(inc.GetTotalCount() - cur)
			var assignment [][]int32
			if len(inc.GetAssignments()) > 0 {
				if len(inc.GetAssignments()) != add {
					return nil, errs.New(errs.InvalidReplicaAssignment, "%d assignments given for %d new partitions", len(inc.GetAssignments()), add)
				}
				for _, a := range inc.GetAssignments() {
					if err := c.checkReplicas(st, a.GetReplicas()); err != nil {
						return nil, errs.New(errs.InvalidReplicaAssignment, "%v", err)
					}
					assignment = append(assignment, a.GetReplicas())
				}
			} else {
				rf := 1
				if p0, ok := st.partitions[inc.GetTopic()][0]; ok {
					rf = len(p0.val.GetState().GetReplicas())
				}
				nodes := st.storageNodes()
				if rf > len(nodes) {
					return nil, errs.New(errs.InvalidReplicationFactor, "topic %q has replication factor %d but only %d storage nodes are live", inc.GetTopic(), rf, len(nodes))
				}
				var err error
				assignment, err = assignReplicas(nodes, add, rf, int(cur), leastLoadedStart(nodes, st.preferredCounts()))
				if err != nil {
					return nil, errs.New(errs.InvalidReplicationFactor, "%v", err)
				}
			}
			if r.GetValidateOnly() {
				return nil, nil
			}
			rec := proto.Clone(tr.val).(*metastorev1.TopicRecord)
			rec.NumPartitions = inc.GetTotalCount()
			rec.ControllerEpoch = t.epoch
			x := &txn{}
			c.put(x, metastore.TopicKey(inc.GetTopic()), tr.modRev, rec)
			for i, replicas := range assignment {
				p := cur + int32(i)
				c.putPartition(x, st, inc.GetTopic(), p, newPartition(inc.GetTopic(), p, replicas, st.live), t.epoch)
			}
			return x, nil
		})
		res.Error = errs.ItemError(err)
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
