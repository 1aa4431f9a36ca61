package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
)

// AlterPartition applies ISR changes proposed by partition leaders, each
// compared on the partition epoch (and the leader epoch), so a leader acting
// on stale state, or a zombie leader that was replaced, cannot change
// anything.
func (c *Controller) AlterPartition(ctx context.Context, r *controllerv1.AlterPartitionRequest) (*controllerv1.AlterPartitionResponse, error) {
	if err := c.internal(ctx, "AlterPartition", isrCallers); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.AlterPartitionResponse{}
	_, err = c.update(ctx, t, func(st *state) (*txn, error) {
		out.Results = out.Results[:0]
		b, ok := st.brokers[r.GetBrokerId()]
		if !ok || b.val.GetBroker().GetBrokerEpoch() != r.GetBrokerEpoch() || st.live(r.GetBrokerId()) == nodeFenced {
			return nil, errs.New(errs.StaleBrokerEpoch, "node %d epoch %d is not a current, unfenced registration", r.GetBrokerId(), r.GetBrokerEpoch())
		}
		x := &txn{}
		for _, ch := range r.GetChanges() {
			res := &controllerv1.AlterPartitionResult{Topic: ch.GetTopic(), Partition: ch.GetPartition()}
			out.Results = append(out.Results, res)
			pr, ok := st.partitions[ch.GetTopic()][ch.GetPartition()]
			if !ok {
				res.Error = errs.New(errs.UnknownTopicOrPartition, "partition %s-%d does not exist", ch.GetTopic(), ch.GetPartition()).Proto()
				continue
			}
			minISR := st.minISR(ch.GetTopic())
			next, e := applyISRChange(pr.val.GetState(), r.GetBrokerId(), ch, st.live, minISR)
			if e != nil {
				res.Error, res.State = e.Proto(), pr.val.GetState()
				continue
			}
			rec := proto.Clone(pr.val).(*metastorev1.PartitionRecord)
			rec.State = next
			if done := finishReassignment(rec, st.live, minISR, false); done != nil {
				rec = done
			}
			res.State = rec.GetState()
			if next == pr.val.GetState() && rec.GetState() == next {
				continue // no change
			}
			rec.ControllerEpoch = t.epoch
			c.put(x, metastore.PartitionKey(ch.GetTopic(), ch.GetPartition()), pr.modRev, rec)
		}
		if len(x.ops) > maxTxnOps {
			return nil, errs.New(errs.InvalidRequest, "at most %d partition changes per request, got %d", maxTxnOps, len(x.ops))
		}
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ElectLeaders runs preferred or unclean elections.
func (c *Controller) ElectLeaders(ctx context.Context, r *controllerv1.ElectLeadersRequest) (*controllerv1.ElectLeadersResponse, error) {
	if err := c.checkCluster(ctx, authz.Alter); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	unclean := r.GetElectionType() == controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN
	out := &controllerv1.ElectLeadersResponse{}
	_, err = c.update(ctx, t, func(st *state) (*txn, error) {
		out.Results = out.Results[:0]
		targets := r.GetPartitions()
		if len(targets) == 0 {
			st.eachPartition(func(topic string, p int32, _ *versioned[*metastorev1.PartitionRecord]) {
				targets = append(targets, &commonv1.TopicPartition{Topic: topic, Partition: p})
			})
		}
		x := &txn{}
		for _, tp := range targets {
			res := &controllerv1.ElectLeadersResult{Partition: tp}
			pr, ok := st.partitions[tp.GetTopic()][tp.GetPartition()]
			if !ok {
				res.Error = errs.New(errs.UnknownTopicOrPartition, "partition %s-%d does not exist", tp.GetTopic(), tp.GetPartition()).Proto()
				out.Results = append(out.Results, res)
				continue
			}
			cur := pr.val.GetState()
			var next *commonv1.PartitionState
			var changed bool
			if unclean {
				next, changed = electUnclean(cur, st.live)
			} else {
				next, changed = reconcile(cur, st.live, st.minISR(tp.GetTopic()), true)
			}
			res.State = next
			switch {
			case changed && (unclean || next.GetLeaderId() == firstReplica(cur)):
			case cur.GetLeaderId() >= 0 && (unclean || cur.GetLeaderId() == firstReplica(cur)):
				res.Error = errs.New(errs.ElectionNotNeeded, "%s-%d already has leader %d", tp.GetTopic(), tp.GetPartition(), cur.GetLeaderId()).Proto()
			case unclean:
				res.Error = errs.New(errs.EligibleLeadersNotAvailable, "%s-%d: no replica's node is alive", tp.GetTopic(), tp.GetPartition()).Proto()
			default:
				res.Error = errs.New(errs.PreferredLeaderNotAvailable, "%s-%d: preferred replica %d is not alive and in sync",
					tp.GetTopic(), tp.GetPartition(), firstReplica(cur)).Proto()
			}
			if res.Error == nil && changed {
				rec := proto.Clone(pr.val).(*metastorev1.PartitionRecord)
				rec.State, rec.ControllerEpoch = next, t.epoch
				c.put(x, metastore.PartitionKey(tp.GetTopic(), tp.GetPartition()), pr.modRev, rec)
			}
			out.Results = append(out.Results, res)
		}
		if len(x.ops) > maxTxnOps {
			return nil, errs.New(errs.InvalidRequest, "elect at most %d partitions per request", maxTxnOps)
		}
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	for _, res := range out.Results {
		if res.Error == nil && unclean {
			c.logger.Warn("unclean leader election: records the new leader does not have are lost",
				log.TopicPartition(res.GetPartition().GetTopic(), res.GetPartition().GetPartition()),
				slog.Int("new_leader", int(res.GetState().GetLeaderId())), log.Epoch(res.GetState().GetLeaderEpoch()),
				slog.String("lost_range", "above the new leader's log end offset"))
		}
	}
	return out, nil
}

// AlterPartitionReassignments starts or cancels reassignments. New replicas
// join as followers; once every one of them is in the ISR, the reconciler
// moves leadership if needed and drops the old replicas.
func (c *Controller) AlterPartitionReassignments(ctx context.Context, r *controllerv1.AlterPartitionReassignmentsRequest) (*controllerv1.AlterPartitionReassignmentsResponse, error) {
	if err := c.checkCluster(ctx, authz.Alter); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.AlterPartitionReassignmentsResponse{}
	_, err = c.update(ctx, t, func(st *state) (*txn, error) {
		out.Results = out.Results[:0]
		x := &txn{}
		for _, re := range r.GetReassignments() {
			tp := re.GetPartition()
			res := &controllerv1.ReassignmentResult{Partition: tp}
			out.Results = append(out.Results, res)
			pr, ok := st.partitions[tp.GetTopic()][tp.GetPartition()]
			if !ok {
				res.Error = errs.New(errs.UnknownTopicOrPartition, "partition %s-%d does not exist", tp.GetTopic(), tp.GetPartition()).Proto()
				continue
			}
			var next *metastorev1.PartitionRecord
			switch {
			case len(re.GetReplicas()) == 0:
				if len(pr.val.GetTargetReplicas()) == 0 {
					res.Error = errs.New(errs.NoReassignmentInProgress, "%s-%d has no reassignment to cancel", tp.GetTopic(), tp.GetPartition()).Proto()
					continue
				}
				next = finishReassignment(pr.val, st.live, st.minISR(tp.GetTopic()), true)
			case len(pr.val.GetTargetReplicas()) > 0:
				res.Error = errs.New(errs.ReassignmentInProgress, "%s-%d is already moving to %v; cancel it first", tp.GetTopic(), tp.GetPartition(), pr.val.GetTargetReplicas()).Proto()
				continue
			case slices.Equal(re.GetReplicas(), pr.val.GetState().GetReplicas()):
				continue // already there
			default:
				for _, id := range re.GetReplicas() {
					if !st.isStorageNode(id) {
						res.Error = errs.New(errs.InvalidReplicaAssignment, "node %d is not a registered storage node", id).Proto()
						break
					}
				}
				if res.Error != nil {
					continue
				}
				next = startReassignment(pr.val, re.GetReplicas())
				if done := finishReassignment(next, st.live, st.minISR(tp.GetTopic()), false); done != nil {
					next = done // only removals or a reorder: nothing to copy
				}
			}
			next.ControllerEpoch = t.epoch
			c.put(x, metastore.PartitionKey(tp.GetTopic(), tp.GetPartition()), pr.modRev, next)
		}
		if len(x.ops) > maxTxnOps {
			return nil, errs.New(errs.InvalidRequest, "reassign at most %d partitions per request", maxTxnOps)
		}
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListPartitionReassignments lists reassignments in progress, with how far
// each new replica still has to go (asked of the nodes themselves).
func (c *Controller) ListPartitionReassignments(ctx context.Context, r *controllerv1.ListPartitionReassignmentsRequest) (*controllerv1.ListPartitionReassignmentsResponse, error) {
	if err := c.checkCluster(ctx, authz.Describe); err != nil {
		return nil, err
	}
	out := &controllerv1.ListPartitionReassignmentsResponse{}
	c.mu.RLock()
	c.st.eachPartition(func(topic string, p int32, pr *versioned[*metastorev1.PartitionRecord]) {
		if len(pr.val.GetTargetReplicas()) == 0 || (len(r.GetTopics()) > 0 && !slices.Contains(r.GetTopics(), topic)) {
			return
		}
		s := pr.val.GetState()
		out.Reassignments = append(out.Reassignments, &controllerv1.OngoingReassignment{
			Partition: &commonv1.TopicPartition{Topic: topic, Partition: p},
			Replicas:  s.GetReplicas(), AddingReplicas: s.GetAddingReplicas(), RemovingReplicas: s.GetRemovingReplicas(),
		})
	})
	leaders := map[string]int32{}
	c.st.eachPartition(func(topic string, p int32, pr *versioned[*metastorev1.PartitionRecord]) {
		leaders[fmt.Sprintf("%s-%d", topic, p)] = pr.val.GetState().GetLeaderId()
	})
	c.mu.RUnlock()
	for _, re := range out.Reassignments {
		tp := re.GetPartition()
		leader, ok := c.replicaSize(ctx, leaders[fmt.Sprintf("%s-%d", tp.GetTopic(), tp.GetPartition())], tp)
		if !ok {
			continue
		}
		re.LagBytes = map[int32]int64{}
		for _, id := range re.GetAddingReplicas() {
			if size, ok := c.replicaSize(ctx, id, tp); ok {
				re.LagBytes[id] = max(leader-size, 0)
			} else {
				re.LagBytes[id] = leader
			}
		}
	}
	return out, nil
}

// replicaSize asks a node how many bytes its replica of a partition holds.
func (c *Controller) replicaSize(ctx context.Context, node int32, tp *commonv1.TopicPartition) (int64, bool) {
	addr := c.cache.Load().Address(node)
	if addr == "" || c.deps.Pool == nil {
		return 0, false
	}
	conn, err := c.deps.Pool.Get(addr)
	if err != nil {
		return 0, false
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := replicationv1.NewReplicationServiceClient(conn).DescribeReplicas(dctx, &replicationv1.DescribeReplicasRequest{
		Partitions: []*commonv1.TopicPartition{tp},
	})
	if err != nil || len(resp.GetReplicas()) == 0 {
		return 0, false
	}
	return resp.GetReplicas()[0].GetSizeBytes(), true
}

// producerIDBlock is how many producer ids a transaction coordinator gets at
// a time (KIP-730).
const producerIDBlock = 1000

// AllocateProducerIds hands out the next block of producer ids. The counter
// in etcd is the next unallocated id; it is absent until the first block is
// handed out (a new cluster starts at 0). A counter that is unreadable,
// negative, deleted or about to overflow stops allocation with an error:
// restarting at 0 would hand out ids still in use, and two producers with
// one id corrupt each other's idempotence and transaction state.
func (c *Controller) AllocateProducerIds(ctx context.Context, r *controllerv1.AllocateProducerIdsRequest) (*controllerv1.AllocateProducerIdsResponse, error) {
	if err := c.internal(ctx, "AllocateProducerIds", producerIDCallers); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	var start int64
	_, err = c.update(ctx, t, func(st *state) (*txn, error) {
		b, ok := st.brokers[r.GetBrokerId()]
		if !ok || b.val.GetBroker().GetBrokerEpoch() != r.GetBrokerEpoch() {
			return nil, errs.New(errs.StaleBrokerEpoch, "node %d epoch %d is not current", r.GetBrokerId(), r.GetBrokerEpoch())
		}
		var err error
		if start, err = nextProducerID(st.pidNext); err != nil {
			return nil, err
		}
		x := &txn{}
		c.putRaw(x, metastore.KeyProducerIDNext, st.pidNext.modRev, strconv.FormatInt(start+producerIDBlock, 10))
		return x, nil
	})
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) && e.Code == errs.UnknownServerError {
			c.logger.Error("cannot allocate producer ids", log.Err(err), log.NodeID(r.GetBrokerId()))
		}
		return nil, err
	}
	c.logger.Debug("producer ids allocated", log.NodeID(r.GetBrokerId()),
		slog.Int64("start", start), slog.Int("len", producerIDBlock))
	return &controllerv1.AllocateProducerIdsResponse{ProducerIdStart: start, ProducerIdLen: producerIDBlock}, nil
}

// pidCounterDeleted marks a producer id counter whose key was deleted from
// etcd after it existed: that is corruption, not a new cluster.
const pidCounterDeleted = -1

// nextProducerID reads the producer id counter: the first id of the next
// block.
func nextProducerID(v versioned[string]) (int64, error) {
	switch {
	case v.modRev == pidCounterDeleted:
		return 0, errs.New(errs.UnknownServerError, "the producer id counter %q was deleted from the metadata store; "+
			"restore it (to above every producer id in use) before producer ids can be allocated again", metastore.KeyProducerIDNext)
	case v.modRev == 0:
		return 0, nil // never written: no id was ever handed out
	}
	n, err := strconv.ParseInt(v.val, 10, 64)
	switch {
	case err != nil:
		return 0, errs.New(errs.UnknownServerError, "the producer id counter %q holds %q, not a number: %w", metastore.KeyProducerIDNext, v.val, err)
	case n < 0:
		return 0, errs.New(errs.UnknownServerError, "the producer id counter %q holds %d, a negative id", metastore.KeyProducerIDNext, n)
	case n > math.MaxInt64-producerIDBlock:
		return 0, errs.New(errs.UnknownServerError, "the producer id counter %q is at %d: producer ids are exhausted", metastore.KeyProducerIDNext, n)
	}
	return n, nil
}
