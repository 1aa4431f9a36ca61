package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// roleTransactionCoordinator is the role name metadata lists for nodes that
// serve TransactionCoordinatorService (role.TransactionCoordinator).
const roleTransactionCoordinator = "transaction-coordinator"

// TxnFilters selects the transactions ListTransactions returns; the zero
// value selects all.
type TxnFilters struct {
	// States keeps transactions in these states only.
	States []txnv1.TransactionState
	// ProducerIDs keeps transactions of these producer ids only.
	ProducerIDs []int64
	// MinDuration keeps only transactions open at least this long.
	MinDuration time.Duration
}

// ListTransactions lists the cluster's transactional ids with their
// producer id and state (KIP-664). Each transaction coordinator knows only
// the ids of the __transaction_state partitions it owns, so every live node
// with the transaction-coordinator role is asked and the answers merged,
// sorted by id, each id once. Retriable failures of a node are retried
// until ctx's deadline or Config.RequestTimeout; then the transactions of
// the nodes that answered are returned, with an error naming those that did
// not.
func (c *Client) ListTransactions(ctx context.Context, f TxnFilters) ([]*txnv1.TransactionListing, error) {
	if f.MinDuration < 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "duration_filter_ms", "minimum duration %v is negative", f.MinDuration)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	addrs, err := c.roleAddrsWait(ctx, roleTransactionCoordinator)
	if err != nil {
		return nil, err
	}
	req := &txnv1.ListTransactionsRequest{StateFilters: f.States, ProducerIdFilters: f.ProducerIDs, DurationFilterMs: f.MinDuration.Milliseconds()}
	answers, failures := askEach(ctx, c, addrs, "listing transactions", func(ctx context.Context, conn grpc.ClientConnInterface) ([]*txnv1.TransactionListing, error) {
		resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).ListTransactions(ctx, req)
		if err != nil {
			return nil, err
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			return nil, e
		}
		return resp.GetTransactions(), nil
	})
	return mergeTxnListings(answers...), errors.Join(failures...)
}

// mergeTxnListings merges the coordinators' answers, sorted by
// transactional id. An id two coordinators list (its partition is moving
// between them) appears once: the entry that is not Dead, else the first.
func mergeTxnListings(answers ...[]*txnv1.TransactionListing) []*txnv1.TransactionListing {
	byID := map[string]*txnv1.TransactionListing{}
	for _, list := range answers {
		for _, l := range list {
			prev, ok := byID[l.GetTransactionalId()]
			if !ok || (prev.GetState() == txnv1.TransactionState_TRANSACTION_STATE_DEAD && l.GetState() != txnv1.TransactionState_TRANSACTION_STATE_DEAD) {
				byID[l.GetTransactionalId()] = l
			}
		}
	}
	out := make([]*txnv1.TransactionListing, 0, len(byID))
	for _, l := range byID {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetTransactionalId() < out[j].GetTransactionalId() })
	return out
}

// DescribeTransactions describes transactional ids (KIP-664), each from its
// coordinator: state, producer id and epoch, timeout, when the open
// transaction started and its partitions. The result has one description
// per id, in order; one that could not be described carries its error
// (TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows), and the
// returned error joins those errors.
func (c *Client) DescribeTransactions(ctx context.Context, ids ...string) ([]*txnv1.TransactionDescription, error) {
	out := make([]*txnv1.TransactionDescription, len(ids))
	failures := make([]error, len(ids))
	eachGroup(ids, func(i int, id string) {
		var desc *txnv1.TransactionDescription
		err := c.onCoordinator(ctx, txnKind, id, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
			resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).DescribeTransactions(ctx, &txnv1.DescribeTransactionsRequest{TransactionalIds: []string{id}})
			if err != nil {
				return nil, err
			}
			for _, d := range resp.GetTransactions() {
				if d.GetTransactionalId() == id {
					desc = d
					// NOT_COORDINATOR here sends the call to the hinted
					// node like a whole-call error would.
					return d.GetError(), nil
				}
			}
			return nil, errs.New(errs.UnknownServerError, "DescribeTransactions answered without transactional id %q", id)
		})
		if err != nil {
			desc = &txnv1.TransactionDescription{TransactionalId: id, StartTimeMs: -1, Error: errs.ItemError(err)}
			failures[i] = fmt.Errorf("transactional id %q: %w", id, err)
		}
		out[i] = desc
	})
	return out, errors.Join(failures...)
}

// AbortTransaction aborts the open transaction of a transactional id at its
// coordinator (KIP-664), which fences the id's producer (the abort bumps its
// epoch) and writes ABORT markers to every partition of the transaction. It
// returns once the coordinator has persisted the abort; the markers follow.
// An id without an open transaction gets INVALID_TXN_STATE, an unknown one
// TRANSACTIONAL_ID_NOT_FOUND. CONCURRENT_TRANSACTIONS (the transaction is
// already ending) is retried until ctx's deadline or Config.RequestTimeout.
func (c *Client) AbortTransaction(ctx context.Context, transactionalID string) error {
	return c.onCoordinator(ctx, txnKind, transactionalID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		resp, err := txnv1.NewTransactionCoordinatorServiceClient(conn).AbortTransaction(ctx, &txnv1.AbortTransactionRequest{TransactionalId: transactionalID})
		if err != nil {
			return nil, err
		}
		return resp.GetError(), nil
	})
}

// DescribeProducers describes a partition's producer state (KIP-664): the
// active producer ids with their epoch, last sequence, last timestamp,
// coordinator epoch and the first offset of their open transaction, and the
// partition's last stable offset. The leader answers; with anyReplica, a
// follower may answer too (the leader is asked first, then the other
// replicas in order), from its own copy of the log and without the last
// stable offset (-1), which only the leader knows. NodeId in the result
// names the node that answered. Leadership changes and unreachable nodes
// are retried until ctx's deadline or Config.RequestTimeout.
func (c *Client) DescribeProducers(ctx context.Context, topic string, partition int32, anyReplica bool) (*storagev1.DescribeProducersResult, error) {
	res, _, err := c.describeProducers(ctx, topic, partition, anyReplica)
	return res, err
}

// describeProducers is DescribeProducers, also returning the address of
// the node that answered.
func (c *Client) describeProducers(ctx context.Context, topic string, partition int32, anyReplica bool) (*storagev1.DescribeProducersResult, string, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var b backoff
	var answered, last error
	for {
		addrs, err := c.replicaAddrs(ctx, topic, partition, anyReplica)
		if err == nil {
			for _, addr := range addrs {
				var res *storagev1.DescribeProducersResult
				res, err = c.describeProducersAt(ctx, addr, topic, partition, anyReplica)
				if err == nil {
					return res, addr, nil
				}
				if isAnswer(err) {
					answered = err
				}
				if !errs.IsRetriable(err) {
					return nil, "", err
				}
			}
		} else if !retryMetadata(err) {
			return nil, "", err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if !b.wait(ctx) {
			if answered != nil {
				return nil, "", answered
			}
			return nil, "", timedOut(fmt.Sprintf("producer state of %s-%d not available", topic, partition), last)
		}
	}
}

// DescribeProducersOn describes a partition's producer state as the replica
// on node nodeID holds it, leader or follower, so replicas can be compared
// (a follower answers without the last stable offset, -1). A node metadata
// does not list among the partition's replicas is refused with
// INVALID_REQUEST; an unreachable node is retried until ctx's deadline or
// Config.RequestTimeout.
func (c *Client) DescribeProducersOn(ctx context.Context, topic string, partition int32, nodeID int32) (*storagev1.DescribeProducersResult, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	var ti *metadatav1.TopicInfo
	for _, t := range md.GetTopics() {
		if t.GetName() == topic {
			ti = t
		}
	}
	if e := errs.FromProto(ti.GetError()); e != nil {
		return nil, e
	}
	if ti == nil || partition < 0 || int(partition) >= len(ti.GetPartitions()) {
		return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; partition %d does not exist", topic, len(ti.GetPartitions()), partition)
	}
	replicas := ti.GetPartitions()[partition].GetReplicas()
	if !slices.Contains(replicas, nodeID) {
		return nil, errs.Invalid(errs.InvalidRequest, "node", "node %d holds no replica of %s-%d (its replicas are on nodes %v)", nodeID, topic, partition, replicas)
	}
	addr := ""
	for _, b := range md.GetBrokers() {
		if b.GetId() == nodeID && len(b.GetEndpoints()) > 0 {
			addr = joinHostPort(b.GetEndpoints()[0].GetHost(), b.GetEndpoints()[0].GetPort())
		}
	}
	if addr == "" {
		return nil, errs.New(errs.BrokerNotAvailable, "node %d, a replica of %s-%d, is not registered", nodeID, topic, partition)
	}
	res, err := askNode(ctx, c, addr, "describing producers", func(ctx context.Context, conn grpc.ClientConnInterface) (*storagev1.DescribeProducersResult, error) {
		resp, err := storagev1.NewStorageServiceClient(conn).DescribeProducers(ctx, &storagev1.DescribeProducersRequest{
			Partitions: []*commonv1.TopicPartition{{Topic: topic, Partition: partition}}, AnyReplica: true,
		})
		if err != nil {
			return nil, err
		}
		for _, r := range resp.GetResults() {
			if r.GetPartition().GetTopic() == topic && r.GetPartition().GetPartition() == partition {
				if e := errs.FromProto(r.GetError()); e != nil {
					return nil, e
				}
				return r, nil
			}
		}
		return nil, errs.New(errs.UnknownServerError, "DescribeProducers at %s answered without %s-%d", addr, topic, partition)
	})
	return res, err
}

// DescribeProducersOf describes the producer state of many partitions
// from their leaders, with one request per leader (as DescribeProducers
// does for one). Leadership changes and unreachable leaders are retried
// until ctx's deadline or Config.RequestTimeout. The map holds every
// partition described; the error, if any, names each partition that was
// not.
func (c *Client) DescribeProducersOf(ctx context.Context, tps ...TopicPartition) (map[TopicPartition]*storagev1.DescribeProducersResult, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	out := make(map[TopicPartition]*storagev1.DescribeProducersResult, len(tps))
	failed := map[TopicPartition]error{}
	pending := map[TopicPartition]error{}
	for _, tp := range tps {
		pending[tp] = nil
	}
	var b backoff
	for len(pending) > 0 {
		c.describeProducersPass(ctx, pending, out, failed)
		if len(pending) == 0 || !b.wait(ctx) {
			break
		}
	}
	for tp, err := range pending {
		if err == nil {
			err = ctx.Err()
		}
		failed[tp] = timedOut(fmt.Sprintf("producer state of %s-%d not available", tp.Topic, tp.Partition), err)
	}
	return out, partitionErrors(failed)
}

// describeProducersPass makes one attempt at every pending partition: a
// success moves it to out, a final error to failed; a retriable one leaves
// it pending with its error.
func (c *Client) describeProducersPass(ctx context.Context, pending map[TopicPartition]error, out map[TopicPartition]*storagev1.DescribeProducersResult, failed map[TopicPartition]error) {
	// final: metadata's word that a topic or partition does not exist,
	// or a non-retriable answer.
	settle := func(tp TopicPartition, err error, final bool) {
		if final || !errs.IsRetriable(err) {
			failed[tp] = err
			delete(pending, tp)
			return
		}
		// An error caused by the end of ctx says less than the one it
		// replaces.
		if ctx.Err() == nil || pending[tp] == nil {
			pending[tp] = err
		}
	}
	topics := map[string]bool{}
	for tp := range pending {
		topics[tp.Topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	md, err := c.Metadata(ctx, names...)
	if err != nil {
		for tp := range pending {
			settle(tp, err, false)
		}
		return
	}
	byLeader := map[string][]*commonv1.TopicPartition{}
	for tp := range pending {
		addrs, err := replicasFrom(md, tp.Topic, tp.Partition, false)
		if err != nil {
			settle(tp, err, !retryMetadata(err))
			continue
		}
		byLeader[addrs[0]] = append(byLeader[addrs[0]], &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	for addr, parts := range byLeader {
		conn, err := c.readyConn(ctx, addr)
		var resp *storagev1.DescribeProducersResponse
		if err == nil {
			resp, err = storagev1.NewStorageServiceClient(conn).DescribeProducers(ctx, &storagev1.DescribeProducersRequest{Partitions: parts})
		}
		if err != nil {
			for _, p := range parts {
				settle(TopicPartition{p.GetTopic(), p.GetPartition()}, errs.From(err), false)
			}
			continue
		}
		for _, r := range resp.GetResults() {
			tp := TopicPartition{r.GetPartition().GetTopic(), r.GetPartition().GetPartition()}
			if _, ok := pending[tp]; !ok {
				continue
			}
			if e := errs.FromProto(r.GetError()); e != nil {
				settle(tp, e, false)
				continue
			}
			out[tp] = r
			delete(pending, tp)
		}
	}
}

// replicaAddrs returns the address of a partition's leader and, with
// followers, of its other live replicas after it, from metadata.
func (c *Client) replicaAddrs(ctx context.Context, topic string, partition int32, followers bool) ([]string, error) {
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	return replicasFrom(md, topic, partition, followers)
}

// replicasFrom is replicaAddrs on metadata already fetched.
func replicasFrom(md *metadatav1.GetMetadataResponse, topic string, partition int32, followers bool) ([]string, error) {
	var ti *metadatav1.TopicInfo
	for _, t := range md.GetTopics() {
		if t.GetName() == topic {
			ti = t
		}
	}
	if ti == nil {
		return nil, errs.New(errs.UnknownServerError, "metadata for topic %q came back without the topic", topic)
	}
	if e := errs.FromProto(ti.GetError()); e != nil {
		return nil, e
	}
	if partition < 0 || int(partition) >= len(ti.GetPartitions()) {
		return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; partition %d does not exist", topic, len(ti.GetPartitions()), partition)
	}
	p := ti.GetPartitions()[partition]
	addrOf := map[int32]string{}
	for _, b := range md.GetBrokers() {
		if len(b.GetEndpoints()) > 0 {
			addrOf[b.GetId()] = joinHostPort(b.GetEndpoints()[0].GetHost(), b.GetEndpoints()[0].GetPort())
		}
	}
	var out []string
	if a := addrOf[p.GetLeaderId()]; p.GetLeaderId() >= 0 && a != "" {
		out = append(out, a)
	}
	if followers {
		for _, r := range p.GetReplicas() {
			if a := addrOf[r]; r != p.GetLeaderId() && a != "" && !slices.Contains(p.GetOfflineReplicas(), r) {
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, errs.New(errs.LeaderNotAvailable, "%s-%d has no leader at the moment", topic, partition)
	}
	return out, nil
}

func (c *Client) describeProducersAt(ctx context.Context, addr, topic string, partition int32, anyReplica bool) (*storagev1.DescribeProducersResult, error) {
	conn, err := c.readyConn(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := storagev1.NewStorageServiceClient(conn).DescribeProducers(ctx, &storagev1.DescribeProducersRequest{
		Partitions: []*commonv1.TopicPartition{{Topic: topic, Partition: partition}}, AnyReplica: anyReplica,
	})
	if err != nil {
		return nil, errs.From(err)
	}
	for _, r := range resp.GetResults() {
		if r.GetPartition().GetTopic() != topic || r.GetPartition().GetPartition() != partition {
			continue
		}
		if e := errs.FromProto(r.GetError()); e != nil {
			return nil, e
		}
		return r, nil
	}
	return nil, errs.New(errs.UnknownServerError, "DescribeProducers at %s answered without %s-%d", addr, topic, partition)
}

// AbortHangingTransaction ends a transaction left open on one partition that
// no coordinator will end (a hanging transaction, KIP-664), as Kafka's
// kafka-transactions.sh abort does: it reads the producer's epoch and
// coordinator epoch from the partition leader's producer state and writes
// an ABORT marker with them to that partition alone. The producer's
// records there since the transaction's first offset become aborted and the
// last stable offset moves on.
//
// It refuses (UNKNOWN_PRODUCER_ID, INVALID_TXN_STATE) when the leader knows
// no such producer or the producer has no open transaction there, saying
// what the leader showed. It does not ask the transaction coordinators:
// aborting one partition of a transaction its coordinator still runs breaks
// that transaction's atomicity, so check first that none does (ListTransactions
// and DescribeTransactions, or `sluice txn find-hanging`).
//
// A leader change or a failure that may have written the marker is retried
// with a fresh look at the producer state until ctx's deadline or
// Config.RequestTimeout; if the transaction it aimed at is then no longer
// open, the abort is done. The returned state is the one the marker was
// written from.
func (c *Client) AbortHangingTransaction(ctx context.Context, topic string, partition int32, producerID int64) (*storagev1.ProducerState, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	tp := fmt.Sprintf("%s-%d", topic, partition)
	var b backoff
	var target *storagev1.ProducerState // the open transaction first seen
	var last error
	for {
		res, addr, err := c.describeProducers(ctx, topic, partition, false)
		if err != nil {
			if target != nil && last != nil {
				return nil, fmt.Errorf("aborting the transaction of producer %d on %s: %w (an earlier attempt failed with: %v)", producerID, tp, err, last)
			}
			return nil, err
		}
		p := findProducer(res, producerID)
		if target != nil && (p == nil || p.GetCurrentTxnStartOffset() != target.GetCurrentTxnStartOffset()) {
			// An earlier attempt's marker made it after all (or the
			// transaction ended otherwise): the transaction aimed at is
			// no longer open.
			return target, nil
		}
		if err := openTxnOn(res, p, tp, producerID); err != nil {
			return nil, err
		}
		if target == nil {
			target = p
		}
		err = c.writeAbortMarker(ctx, addr, topic, partition, p)
		if err == nil {
			return p, nil
		}
		if !errs.IsRetriable(err) {
			return nil, fmt.Errorf("aborting the transaction of producer %d on %s: %w", producerID, tp, err)
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if !b.wait(ctx) {
			return nil, fmt.Errorf("aborting the transaction of producer %d on %s: %w", producerID, tp, errs.From(last))
		}
	}
}

// findProducer returns the producer's state in a DescribeProducers result.
func findProducer(res *storagev1.DescribeProducersResult, producerID int64) *storagev1.ProducerState {
	for _, p := range res.GetProducers() {
		if p.GetProducerId() == producerID {
			return p
		}
	}
	return nil
}

// openTxnOn returns nil if p (producerID's state in res, nil if absent) has
// a transaction open on the partition, or else an error saying what the
// partition's leader showed.
func openTxnOn(res *storagev1.DescribeProducersResult, p *storagev1.ProducerState, tp string, producerID int64) error {
	if p == nil {
		ids := make([]string, 0, len(res.GetProducers()))
		for _, q := range res.GetProducers() {
			ids = append(ids, fmt.Sprint(q.GetProducerId()))
		}
		known := "no producer at all"
		if len(ids) > 0 {
			known = "producers " + strings.Join(ids, ", ")
		}
		return errs.New(errs.UnknownProducerID, "%s: producer %d is not among the partition's active producers (its leader, node %d, lists %s): nothing to abort",
			tp, producerID, res.GetNodeId(), known)
	}
	if p.GetCurrentTxnStartOffset() < 0 {
		return errs.New(errs.InvalidTxnState, "%s: producer %d has no open transaction on the partition (its leader, node %d, shows epoch %d, last sequence %d, no transaction start offset; last stable offset %d): nothing to abort",
			tp, producerID, res.GetNodeId(), p.GetProducerEpoch(), p.GetLastSequence(), res.GetLastStableOffset())
	}
	return nil
}

// isAnswer says whether err is a server's answer: a status from a Sluice
// server, or an error the server returned in a result, rather than a node
// that could not be reached or the end of the caller's time.
func isAnswer(err error) bool {
	if serverAnswer(err) {
		return true
	}
	var e *errs.Error
	return errors.As(err, &e) && e.Code != errs.NodeUnreachable && e.Code != errs.NodeNotReady
}

// writeAbortMarker writes an ABORT marker for p's open transaction to the
// partition's leader at addr, with p's producer epoch and coordinator epoch
// so the leader accepts it. A producer that never had a marker shows
// coordinator epoch 0; a negative one (none recorded) is sent as 0, as
// Kafka's tool does.
func (c *Client) writeAbortMarker(ctx context.Context, addr, topic string, partition int32, p *storagev1.ProducerState) error {
	conn, err := c.readyConn(ctx, addr)
	if err != nil {
		return err
	}
	resp, err := storagev1.NewStorageServiceClient(conn).WriteTxnMarkers(ctx, &storagev1.WriteTxnMarkersRequest{Markers: []*storagev1.TxnMarker{{
		ProducerId: p.GetProducerId(), ProducerEpoch: p.GetProducerEpoch(), Committed: false,
		CoordinatorEpoch: max(p.GetCoordinatorEpoch(), 0),
		Partitions:       []*commonv1.TopicPartition{{Topic: topic, Partition: partition}},
	}}})
	if err != nil {
		return errs.From(err)
	}
	for _, r := range resp.GetResults() {
		if r.GetPartition().GetTopic() == topic && r.GetPartition().GetPartition() == partition {
			if e := errs.FromProto(r.GetError()); e != nil {
				return e
			}
			return nil
		}
	}
	return errs.New(errs.UnknownServerError, "WriteTxnMarkers at %s answered without %s-%d", addr, topic, partition)
}

// roleAddrsWait returns the addresses of the live nodes with a role,
// retrying retriable metadata failures, and fails with
// COORDINATOR_NOT_AVAILABLE if no live node has it.
func (c *Client) roleAddrsWait(ctx context.Context, role string) ([]string, error) {
	var b backoff
	for {
		addrs, err := c.roleAddrs(ctx, role)
		if err == nil && len(addrs) == 0 {
			err = errs.New(errs.CoordinatorNotAvailable, "no live node has the %s role", role)
		}
		if err == nil {
			return addrs, nil
		}
		if !errs.IsRetriable(err) || !b.wait(ctx) {
			return nil, err
		}
	}
}

// askEach runs call on every node at once, each retried while it fails
// retriably until ctx ends; it returns every node's answer and error, in
// addrs order. A node's error names its address: its last server answer,
// or else its last transport failure.
func askEach[T any](ctx context.Context, c *Client, addrs []string, what string, call func(ctx context.Context, conn grpc.ClientConnInterface) (T, error)) ([]T, []error) {
	answers := make([]T, len(addrs))
	failures := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			answers[i], failures[i] = askNode(ctx, c, addr, what, call)
		})
	}
	wg.Wait()
	return answers, failures
}

func askNode[T any](ctx context.Context, c *Client, addr, what string, call func(ctx context.Context, conn grpc.ClientConnInterface) (T, error)) (T, error) {
	var zero T
	var b backoff
	var answered, last error
	for {
		conn, err := c.readyConn(ctx, addr)
		if err == nil {
			var out T
			out, err = call(ctx, conn)
			if err == nil {
				return out, nil
			}
			if isAnswer(err) {
				answered = err
			}
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if !errs.IsRetriable(err) {
			return zero, fmt.Errorf("%s at %s: %w", what, addr, errs.From(err))
		}
		if !b.wait(ctx) {
			if answered != nil {
				return zero, fmt.Errorf("%s at %s: %w", what, addr, errs.From(answered))
			}
			return zero, timedOut(fmt.Sprintf("%s at %s", what, addr), last)
		}
	}
}
