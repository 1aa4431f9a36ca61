package txncoord

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/metadata"
)

// concurrent is the answer while an earlier change of the id is still
// being written or its markers are: Kafka's clients retry it.
func concurrent(tid string) *errs.Error {
	return errs.New(errs.ConcurrentTransactions, "transactional id %q: an earlier change is still completing; retry", tid)
}

// initTransactional answers InitProducerId for a transactional id: a new id
// gets a new producer id with epoch 0; a known one gets its epoch bumped
// (or, once exhausted, a new producer id), which fences every earlier
// producer with the id. An open transaction is aborted first (with an epoch
// bump of its own): the call answers CONCURRENT_TRANSACTIONS meanwhile, and
// the client's retry gets the new epoch once the abort is complete.
//
// A request naming the producer's current id and epoch (KIP-360) must name
// the current ones; a retry of a call that already bumped (naming the
// epoch before) is answered with the current id and epoch unchanged.
func (r *TransactionCoordinator) initTransactional(ctx context.Context, req *txnv1.InitProducerIdRequest) *txnv1.InitProducerIdResponse {
	tid := req.GetTransactionalId()
	fail := func(e *errs.Error) *txnv1.InitProducerIdResponse {
		return &txnv1.InitProducerIdResponse{Error: e.Proto(), ProducerId: -1, ProducerEpoch: -1}
	}
	s, e := r.shardFor(tid)
	if e != nil {
		return fail(e)
	}
	var out *txnv1.InitProducerIdResponse
	var done <-chan *errs.Error
	e = s.withPID(ctx, func(pid int64) bool {
		m := s.txns[tid]
		if s.pending[tid] || (m != nil && m.preparing()) {
			out = fail(concurrent(tid))
			return false
		}
		now := r.now()
		if m == nil {
			if pid < 0 {
				return true
			}
			next := &txnMeta{tid: tid, producerID: pid, epoch: 0, lastProducerID: -1, lastEpoch: -1, timeoutMs: req.GetTransactionTimeoutMs(),
				state: kmsg.TransactionStateEmpty, partitions: map[topicPartition]bool{}, startMs: -1, lastUpdateMs: now.UnixMilli()}
			done = s.writeLocked(next, nil)
			out = &txnv1.InitProducerIdResponse{ProducerId: next.producerID, ProducerEpoch: int32(next.epoch)}
			return false
		}
		if rp, re := req.GetProducerId(), req.GetProducerEpoch(); rp >= 0 {
			switch {
			case rp == m.producerID && re == int32(m.epoch):
			case m.fenced && rp == m.lastProducerID && re == int32(m.lastEpoch):
				// Its transaction was aborted to fence it (a timeout, or
				// this very call, answered CONCURRENT_TRANSACTIONS): it
				// may come back with a bumped epoch (KIP-360).
			case m.state == kmsg.TransactionStateEmpty && m.lastProducerID < 0 &&
				((rp == m.producerID && re == int32(m.epoch)-1) || (m.epoch == 0 && re == maxEpoch)):
				// The retry of an InitProducerId that bumped already.
				out = &txnv1.InitProducerIdResponse{ProducerId: m.producerID, ProducerEpoch: int32(m.epoch)}
				return false
			default:
				out = fail(errs.New(errs.ProducerFenced, "transactional id %q: producer %d epoch %d is not the current producer (%d epoch %d)",
					tid, rp, re, m.producerID, m.epoch))
				return false
			}
		}
		if m.state == kmsg.TransactionStateOngoing {
			// Fence the producer whose transaction is open: abort it.
			if needsNewPID(m.epoch) && pid < 0 {
				return true
			}
			s.prepareLocked(m.fence(now, func() int64 { return pid }))
			out = fail(concurrent(tid))
			return false
		}
		if needsNewPID(m.epoch) && pid < 0 {
			return true
		}
		next := m.clone()
		next.producerID, next.epoch = bump(m.producerID, m.epoch, func() int64 { return pid })
		next.lastProducerID, next.lastEpoch, next.fenced = -1, -1, false
		next.state = kmsg.TransactionStateEmpty
		next.timeoutMs = req.GetTransactionTimeoutMs()
		next.partitions, next.startMs, next.lastUpdateMs = map[topicPartition]bool{}, -1, now.UnixMilli()
		done = s.writeLocked(next, nil)
		out = &txnv1.InitProducerIdResponse{ProducerId: next.producerID, ProducerEpoch: int32(next.epoch)}
		return false
	})
	if e != nil {
		return fail(e)
	}
	if done != nil {
		if e := coordinator.Await(ctx, stateTopic, done); e != nil {
			return fail(e)
		}
	}
	return out
}

// AddPartitionsToTxn adds partitions to the producer's transaction,
// starting one if none is open; the state is persisted before the answer.
// A partition that does not exist fails the whole request (nothing is
// added): it gets UNKNOWN_TOPIC_OR_PARTITION and the call's error says so.
//
// With verify_only (KIP-890 part 1) a partition leader asks, before it
// appends a transactional batch, whether the partition is in the
// producer's ongoing transaction: nothing is written; a wrong producer id
// or epoch fails the call (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
// INVALID_PRODUCER_EPOCH), and each partition not in the ongoing
// transaction gets INVALID_TXN_STATE.
func (r *TransactionCoordinator) AddPartitionsToTxn(ctx context.Context, req *txnv1.AddPartitionsToTxnRequest) (*txnv1.AddPartitionsToTxnResponse, error) {
	tid := req.GetTransactionalId()
	fail := func(e *errs.Error) (*txnv1.AddPartitionsToTxnResponse, error) {
		out := &txnv1.AddPartitionsToTxnResponse{Error: e.Proto()}
		for _, p := range req.GetPartitions() {
			out.Results = append(out.Results, &txnv1.AddPartitionResult{Partition: p, Error: e.Proto()})
		}
		return out, nil
	}
	if len(req.GetPartitions()) == 0 {
		return fail(errs.Invalid(errs.InvalidRequest, "partitions", "no partitions"))
	}
	if req.GetVerifyOnly() {
		if err := authz.CheckInternal(ctx, r.deps.Authorizer(), "AddPartitionsToTxn (verify only)", verifyCallers...); err != nil {
			return nil, err
		}
	} else {
		if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, tid); e != nil {
			return nil, e
		}
		// Write on each topic; if any is refused nothing is added, the
		// others answer OPERATION_NOT_ATTEMPTED (Kafka's rule).
		if out := r.topicRefusals(ctx, req); out != nil {
			return out, nil
		}
	}
	s, e := r.shardFor(tid)
	if e != nil {
		return fail(e)
	}
	if req.GetVerifyOnly() {
		return r.verifyPartitions(s, req), nil
	}
	img := r.deps.Metadata.Load()
	var unknown []string
	out := &txnv1.AddPartitionsToTxnResponse{}
	for _, p := range req.GetPartitions() {
		res := &txnv1.AddPartitionResult{Partition: p}
		if _, ok := img.Partition(p.GetTopic(), p.GetPartition()); !ok || p.GetTopic() == stateTopic {
			res.Error = errs.New(errs.UnknownTopicOrPartition, "partition %s-%d does not exist", p.GetTopic(), p.GetPartition()).Proto()
			unknown = append(unknown, fmt.Sprintf("%s-%d", p.GetTopic(), p.GetPartition()))
		}
		out.Results = append(out.Results, res)
	}
	if len(unknown) > 0 {
		out.Error = errs.New(errs.UnknownTopicOrPartition, "nothing was added: %v do not exist", unknown).Proto()
		return out, nil
	}
	add := make([]topicPartition, 0, len(req.GetPartitions()))
	for _, p := range req.GetPartitions() {
		add = append(add, topicPartition{p.GetTopic(), p.GetPartition()})
	}
	if e := r.addToTxn(ctx, s, tid, req.GetProducerId(), req.GetProducerEpoch(), add); e != nil {
		return fail(e)
	}
	return out, nil
}

// addToTxn adds partitions to the id's transaction (opening one if none is
// open) and persists it before returning.
func (r *TransactionCoordinator) addToTxn(ctx context.Context, s *shard, tid string, pid int64, epoch int32, add []topicPartition) *errs.Error {
	s.settle(ctx, tid)
	s.mu.Lock()
	m, ok := s.txns[tid]
	var e *errs.Error
	switch {
	case !ok:
		e = errs.New(errs.InvalidProducerIDMapping, "transactional id %q is not known: call InitProducerId first", tid)
	case s.pending[tid]:
		e = concurrent(tid)
	default:
		e = m.checkProducer(pid, epoch)
	}
	if e == nil && m.preparing() {
		e = concurrent(tid)
	}
	if e != nil {
		s.mu.Unlock()
		return e
	}
	next := m.clone()
	changed := false
	if m.state != kmsg.TransactionStateOngoing {
		next.state, next.startMs, changed = kmsg.TransactionStateOngoing, r.now().UnixMilli(), true
		next.partitions = map[topicPartition]bool{}
	}
	for _, tp := range add {
		if !next.partitions[tp] {
			next.partitions[tp], changed = true, true
		}
	}
	if !changed {
		s.mu.Unlock()
		return nil
	}
	next.lastUpdateMs = r.now().UnixMilli()
	done := s.writeLocked(next, nil)
	s.mu.Unlock()
	return coordinator.Await(ctx, stateTopic, done)
}

// verifyPartitions answers AddPartitionsToTxn with verify_only.
func (r *TransactionCoordinator) verifyPartitions(s *shard, req *txnv1.AddPartitionsToTxnRequest) *txnv1.AddPartitionsToTxnResponse {
	tid := req.GetTransactionalId()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &txnv1.AddPartitionsToTxnResponse{}
	m, ok := s.txns[tid]
	var e *errs.Error
	if !ok {
		e = errs.New(errs.InvalidProducerIDMapping, "transactional id %q is not known", tid)
	} else {
		e = m.checkProducer(req.GetProducerId(), req.GetProducerEpoch())
	}
	if e != nil {
		out.Error = e.Proto()
	}
	for _, p := range req.GetPartitions() {
		res := &txnv1.AddPartitionResult{Partition: p}
		switch {
		case e != nil:
			res.Error = e.Proto()
		case m.state != kmsg.TransactionStateOngoing || !m.partitions[topicPartition{p.GetTopic(), p.GetPartition()}]:
			res.Error = errs.New(errs.InvalidTxnState, "%s-%d is not in the ongoing transaction of %q (producer %d epoch %d, state %s)",
				p.GetTopic(), p.GetPartition(), tid, m.producerID, m.epoch, m.state).Proto()
		}
		out.Results = append(out.Results, res)
	}
	return out
}

// AddOffsetsToTxn adds the group's __consumer_offsets partition (Kafka's
// hash of the group id) to the transaction, for the offsets a
// read-process-write producer commits in it.
func (r *TransactionCoordinator) AddOffsetsToTxn(ctx context.Context, req *txnv1.AddOffsetsToTxnRequest) (*txnv1.AddOffsetsToTxnResponse, error) {
	fail := func(e *errs.Error) (*txnv1.AddOffsetsToTxnResponse, error) {
		return &txnv1.AddOffsetsToTxnResponse{Error: e.Proto()}, nil
	}
	if req.GetGroupId() == "" {
		return fail(errs.Invalid(errs.InvalidGroupID, "group_id", "the group id is empty"))
	}
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, req.GetTransactionalId()); e != nil {
		return nil, e
	}
	if err := authz.Check(ctx, r.deps.Authorizer(), authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	s, e := r.shardFor(req.GetTransactionalId())
	if e != nil {
		return fail(e)
	}
	t, ok := r.deps.Metadata.Load().Topics[metadata.OffsetsTopic]
	if !ok || len(t.Partitions) == 0 {
		return fail(errs.New(errs.CoordinatorNotAvailable, "%s does not exist yet; the group coordinator creates it on the group's first FindCoordinator", metadata.OffsetsTopic))
	}
	tp := topicPartition{metadata.OffsetsTopic, coordinator.PartitionFor(req.GetGroupId(), int32(len(t.Partitions)))}
	if e := r.addToTxn(ctx, s, req.GetTransactionalId(), req.GetProducerId(), req.GetProducerEpoch(), []topicPartition{tp}); e != nil {
		return fail(e)
	}
	return &txnv1.AddOffsetsToTxnResponse{}, nil
}

// EndTxn commits or aborts the producer's ongoing transaction: the decision
// (PrepareCommit / PrepareAbort, with the bumped epoch) is persisted, the
// answer carries the producer id and epoch to use next, and the markers
// are written in the background.
//
// A retried EndTxn (the producer id and epoch of the transaction that
// ended last) succeeds if it asks for the outcome that transaction had, and
// gets INVALID_TXN_STATE otherwise; it never touches a later transaction.
// CONCURRENT_TRANSACTIONS while the markers of that outcome are still
// being written. No transaction open: INVALID_TXN_STATE.
func (r *TransactionCoordinator) EndTxn(ctx context.Context, req *txnv1.EndTxnRequest) (*txnv1.EndTxnResponse, error) {
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, req.GetTransactionalId()); e != nil {
		return nil, e
	}
	return r.endTxn(ctx, req, endBump), nil
}

// endTxnMode is how EndTxn ends a transaction.
type endTxnMode int

const (
	// endBump bumps the producer epoch (KIP-890): the gRPC API.
	endBump endTxnMode = iota
	// endKeepEpoch keeps the producer's id and epoch, as Kafka's
	// coordinator does for EndTxn below v5 (transaction version 1): such a
	// client cannot learn new ones from the answer. Its next transaction
	// runs at the same epoch, so a delayed EndTxn of the ended one can end
	// the next (the weakness KIP-890 part 2 closes).
	endKeepEpoch
	// endBumpAbortAny is endBump, and an abort with no transaction open
	// succeeds and bumps the epoch too, as Kafka answers EndTxn v5
	// (transaction version 2): a client whose produce requests failed
	// cannot know whether they opened the transaction.
	endBumpAbortAny
)

// endTxn serves EndTxn in the given mode.
func (r *TransactionCoordinator) endTxn(ctx context.Context, req *txnv1.EndTxnRequest, mode endTxnMode) *txnv1.EndTxnResponse {
	bumpEpoch := mode != endKeepEpoch
	tid := req.GetTransactionalId()
	fail := func(e *errs.Error) *txnv1.EndTxnResponse {
		return &txnv1.EndTxnResponse{Error: e.Proto(), ProducerId: -1, ProducerEpoch: -1}
	}
	s, e := r.shardFor(tid)
	if e != nil {
		return fail(e)
	}
	var out *txnv1.EndTxnResponse
	var done <-chan *errs.Error
	e = s.withPID(ctx, func(pid int64) bool {
		m, ok := s.txns[tid]
		switch {
		case !ok:
			out = fail(errs.New(errs.InvalidProducerIDMapping, "transactional id %q is not known", tid))
			return false
		case s.pending[tid]:
			out = fail(concurrent(tid))
			return false
		case !plantedNoEpochBump() && m.lastProducerID >= 0 && req.GetProducerId() == m.lastProducerID && req.GetProducerEpoch() == int32(m.lastEpoch) &&
			!(m.state == kmsg.TransactionStateOngoing && m.lastProducerID == m.producerID && m.lastEpoch == m.epoch):
			// Names the transaction that ended last, unless that one
			// ended without a bump and the same epoch runs the open one.
			out = r.retriedEnd(m, req.GetCommit())
			return false
		}
		if e := m.checkProducer(req.GetProducerId(), req.GetProducerEpoch()); e != nil {
			out = fail(e)
			return false
		}
		switch {
		case m.preparing():
			out = fail(concurrent(tid))
			return false
		case m.state != kmsg.TransactionStateOngoing && (mode != endBumpAbortAny || req.GetCommit()):
			out = fail(errs.New(errs.InvalidTxnState, "transactional id %q has no open transaction (state %s)", tid, m.state))
			return false
		case bumpEpoch && needsNewPID(m.epoch) && pid < 0:
			return true
		}
		next := m.end(req.GetCommit(), bumpEpoch, r.now(), func() int64 { return pid })
		done = s.prepareLocked(next)
		out = &txnv1.EndTxnResponse{ProducerId: next.producerID, ProducerEpoch: int32(next.epoch)}
		return false
	})
	if e != nil {
		return fail(e)
	}
	if done != nil {
		if e := coordinator.Await(ctx, stateTopic, done); e != nil {
			out = fail(e)
		}
	}
	return out
}

// retriedEnd answers an EndTxn that names the transaction that ended last.
func (r *TransactionCoordinator) retriedEnd(m *txnMeta, commit bool) *txnv1.EndTxnResponse {
	if m.fenced {
		return &txnv1.EndTxnResponse{Error: errs.New(errs.ProducerFenced, "transactional id %q: producer %d epoch %d was fenced and its transaction aborted",
			m.tid, m.lastProducerID, m.lastEpoch).Proto(), ProducerId: -1, ProducerEpoch: -1}
	}
	committed := m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStateCompleteCommit
	aborted := m.state == kmsg.TransactionStatePrepareAbort || m.state == kmsg.TransactionStateCompleteAbort
	switch {
	case (commit && committed) || (!commit && aborted):
		if m.preparing() {
			return &txnv1.EndTxnResponse{Error: concurrent(m.tid).Proto(), ProducerId: -1, ProducerEpoch: -1}
		}
		return &txnv1.EndTxnResponse{ProducerId: m.producerID, ProducerEpoch: int32(m.epoch)}
	case committed || aborted:
		return &txnv1.EndTxnResponse{Error: errs.New(errs.InvalidTxnState, "transactional id %q: the transaction of producer %d epoch %d ended with the other outcome (state %s)",
			m.tid, m.lastProducerID, m.lastEpoch, m.state).Proto(), ProducerId: -1, ProducerEpoch: -1}
	}
	return &txnv1.EndTxnResponse{Error: errs.New(errs.ProducerFenced, "transactional id %q: producer %d epoch %d is fenced", m.tid, m.lastProducerID, m.lastEpoch).Proto(),
		ProducerId: -1, ProducerEpoch: -1}
}

// AbortTransaction aborts the id's open transaction on an operator's
// request (KIP-664), fencing its producer (the abort bumps the epoch).
func (r *TransactionCoordinator) AbortTransaction(ctx context.Context, req *txnv1.AbortTransactionRequest) (*txnv1.AbortTransactionResponse, error) {
	tid := req.GetTransactionalId()
	fail := func(e *errs.Error) (*txnv1.AbortTransactionResponse, error) {
		return &txnv1.AbortTransactionResponse{Error: e.Proto()}, nil
	}
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, tid); e != nil {
		return nil, e
	}
	s, e := r.shardFor(tid)
	if e != nil {
		return fail(e)
	}
	var done <-chan *errs.Error
	var out *errs.Error
	e = s.withPID(ctx, func(pid int64) bool {
		m, ok := s.txns[tid]
		switch {
		case !ok:
			out = errs.New(errs.TransactionalIDNotFound, "transactional id %q is not known", tid)
		case s.pending[tid] || m.preparing():
			out = concurrent(tid)
		case m.state != kmsg.TransactionStateOngoing:
			out = errs.New(errs.InvalidTxnState, "transactional id %q has no open transaction (state %s)", tid, m.state)
		case needsNewPID(m.epoch) && pid < 0:
			return true
		default:
			done = s.prepareLocked(m.fence(r.now(), func() int64 { return pid }))
		}
		return false
	})
	if e == nil {
		e = out
	}
	if e == nil && done != nil {
		e = coordinator.Await(ctx, stateTopic, done)
	}
	if e != nil {
		return fail(e)
	}
	return &txnv1.AbortTransactionResponse{}, nil
}

// ListTransactions lists the transactional ids of every shard loaded here,
// filtered by state, producer id and (for open transactions) how long they
// have been open.
func (r *TransactionCoordinator) ListTransactions(ctx context.Context, req *txnv1.ListTransactionsRequest) (*txnv1.ListTransactionsResponse, error) {
	if req.GetDurationFilterMs() < 0 {
		return &txnv1.ListTransactionsResponse{Error: errs.Invalid(errs.InvalidRequest, "duration_filter_ms", "%d is negative", req.GetDurationFilterMs()).Proto()}, nil
	}
	now := r.now().UnixMilli()
	out := &txnv1.ListTransactionsResponse{}
	for _, s := range r.loadedShards() {
		s.mu.Lock()
		if !s.loaded {
			s.mu.Unlock()
			continue
		}
		for _, m := range s.txns {
			st := stateProto(m.state)
			switch {
			case len(req.GetStateFilters()) > 0 && !slices.Contains(req.GetStateFilters(), st):
			case len(req.GetProducerIdFilters()) > 0 && !slices.Contains(req.GetProducerIdFilters(), m.producerID):
			case req.GetDurationFilterMs() > 0 && (m.startMs < 0 || now-m.startMs < req.GetDurationFilterMs()):
			default:
				out.Transactions = append(out.Transactions, &txnv1.TransactionListing{TransactionalId: m.tid, ProducerId: m.producerID, State: st})
			}
		}
		s.mu.Unlock()
	}
	// Only the ids the caller may Describe (Kafka's rule), decided after
	// the shard locks are released.
	out.Transactions = authz.FilterAllowedFunc(ctx, r.deps.Authorizer(), authz.Describe, authz.TransactionalID, out.Transactions,
		func(l *txnv1.TransactionListing) string { return l.GetTransactionalId() })
	sort.Slice(out.Transactions, func(i, j int) bool {
		return out.Transactions[i].GetTransactionalId() < out.Transactions[j].GetTransactionalId()
	})
	return out, nil
}

// DescribeTransactions describes transactional ids this process
// coordinates; others get NOT_COORDINATOR with a hint.
func (r *TransactionCoordinator) DescribeTransactions(ctx context.Context, req *txnv1.DescribeTransactionsRequest) (*txnv1.DescribeTransactionsResponse, error) {
	out := &txnv1.DescribeTransactionsResponse{}
	for _, tid := range req.GetTransactionalIds() {
		d := &txnv1.TransactionDescription{TransactionalId: tid, StartTimeMs: -1}
		out.Transactions = append(out.Transactions, d)
		if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Describe, tid); e != nil {
			d.Error = e.Proto()
			continue
		}
		s, e := r.shardFor(tid)
		if e != nil {
			d.Error = e.Proto()
			continue
		}
		s.mu.Lock()
		m, ok := s.txns[tid]
		if !ok {
			d.Error = errs.New(errs.TransactionalIDNotFound, "transactional id %q is not known", tid).Proto()
		} else {
			d.State, d.ProducerId, d.ProducerEpoch = stateProto(m.state), m.producerID, int32(m.epoch)
			d.TransactionTimeoutMs, d.StartTimeMs = m.timeoutMs, m.startMs
			for tp := range m.partitions {
				d.Partitions = append(d.Partitions, tp.proto())
			}
		}
		s.mu.Unlock()
		sort.Slice(d.Partitions, func(i, j int) bool {
			a, b := d.Partitions[i], d.Partitions[j]
			return a.GetTopic() < b.GetTopic() || (a.GetTopic() == b.GetTopic() && a.GetPartition() < b.GetPartition())
		})
	}
	return out, nil
}
