package txncoord

// The transaction APIs of Kafka's wire protocol. Each handler converts the
// kmsg request to the role's gRPC request, calls the very method the gRPC
// service calls (so validation, persistence and fencing are the same over
// both protocols) and converts the answer back, with Kafka's error codes
// for the request's version.

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Versions served. Each is served completely; clients use the highest
// version both sides know.
const (
	// InitProducerId v5 differs from v4 only in that the client knows
	// TRANSACTION_ABORTABLE, which this coordinator never answers.
	initPIDMaxVersion = 5
	// AddPartitionsToTxn v0-v3 are the client path; v4 and v5 are Kafka's
	// broker-to-broker batches (several transactional ids, verify_only).
	addPartitionsMaxVersion = 5
	// AddOffsetsToTxn v4 adds only TRANSACTION_ABORTABLE to v3.
	addOffsetsMaxVersion = 4
	// EndTxn v5 (KIP-890 part 2) bumps the epoch and answers the producer
	// id and epoch for the next transaction.
	endTxnMaxVersion = 5
	// DescribeTransactions has only v0.
	describeTxnsMaxVersion = 0
	// ListTransactions v2 adds a transactional-id regular expression, whose
	// error (INVALID_REGULAR_EXPRESSION) the catalog does not have yet.
	listTxnsMaxVersion = 1
)

// The first version of each API that knows PRODUCER_FENCED (KIP-588);
// Kafka answers older versions INVALID_PRODUCER_EPOCH instead.
const (
	initPIDFencedSince       = 4
	addPartitionsFencedSince = 2
	addOffsetsFencedSince    = 2
	endTxnFencedSince        = 2
)

// endTxnBumpSince is the first EndTxn version that answers the next
// producer id and epoch: only those clients can follow an epoch bumped at
// every transaction end (KIP-890 part 2).
const endTxnBumpSince = 5

// registerKafka registers the transaction APIs on the process's Kafka mux.
func (r *TransactionCoordinator) registerKafka(m *kafka.Mux) {
	if m == nil {
		return // a role built without a Kafka listener (tests)
	}
	m.Handle(kmsg.InitProducerID.Int16(), 0, initPIDMaxVersion, r.kafkaInitProducerID)
	m.Handle(kmsg.AddPartitionsToTxn.Int16(), 0, addPartitionsMaxVersion, r.kafkaAddPartitionsToTxn)
	m.Handle(kmsg.AddOffsetsToTxn.Int16(), 0, addOffsetsMaxVersion, r.kafkaAddOffsetsToTxn)
	m.Handle(kmsg.EndTxn.Int16(), 0, endTxnMaxVersion, r.kafkaEndTxn)
	m.Handle(kmsg.DescribeTransactions.Int16(), 0, describeTxnsMaxVersion, r.kafkaDescribeTransactions)
	m.Handle(kmsg.ListTransactions.Int16(), 0, listTxnsMaxVersion, r.kafkaListTransactions)
}

// txnCode is the Kafka error code of a role's per-item error, answered to
// a request of version v of an API that knows PRODUCER_FENCED from
// fencedSince on.
func txnCode(p *edpb.Error, v, fencedSince int16) int16 {
	e := errs.FromProto(p)
	switch {
	case e == nil: // a nil *errs.Error must not reach ErrorCode as a non-nil error
		return 0
	case e.Code == errs.ProducerFenced && v < fencedSince:
		return kafka.ErrorCode(errs.New(errs.InvalidProducerEpoch, "%s", e.Message))
	}
	return kafka.ErrorCode(e)
}

// protoCode is the Kafka error code of a role's per-item error.
func protoCode(p *edpb.Error) int16 { return txnCode(p, 0, 0) }

// errCode is txnCode for an error the handler itself found.
func errCode(e *errs.Error, v, fencedSince int16) int16 { return txnCode(e.Proto(), v, fencedSince) }

func badMsg(req *kafka.Request) error {
	return fmt.Errorf("API key %d: unexpected request type %T", req.Key, req.Msg)
}

// kafkaInitProducerID serves InitProducerId (key 22) with and without a
// transactional id; v3+ carry the producer's current id and epoch
// (KIP-360) to bump its epoch after an error instead of starting over.
func (r *TransactionCoordinator) kafkaInitProducerID(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	return initProducerIDReply(ctx, req, r.deps.Authorizer(), r.deps.Metadata, r.InitProducerId)
}

// initProducerIDReply answers a Kafka InitProducerId through call: this
// role's method, or, on a process without the role, a transaction
// coordinator's over gRPC. The caller is authorized here, for the Kafka
// client: a forwarded call reaches the coordinator as this process.
func initProducerIDReply(ctx context.Context, req *kafka.Request, a authz.Authorizer, md *metadata.Cache,
	call func(context.Context, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error)) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.InitProducerIDRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	v := msg.Version
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.Version = v
	fail := func(e *errs.Error) kafka.Reply {
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = errCode(e, v, initPIDFencedSince), -1, -1
		return kafka.Now(resp)
	}
	preq := initProducerIDToProto(msg)
	if msg.TransactionalID != nil {
		// Kafka tells a null id (idempotence only) from an empty one,
		// which it refuses; the role's request has only the string.
		if *msg.TransactionalID == "" {
			return fail(errs.Invalid(errs.InvalidRequest, "transactional_id", "the transactional id is empty; send null for an idempotent producer")), nil
		}
	}
	if e := authorizeInit(ctx, a, md, preq); e != nil {
		return fail(e), nil
	}
	return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
		out, err := call(ctx, preq)
		if err != nil {
			out = &txnv1.InitProducerIdResponse{Error: errs.ItemError(err), ProducerId: -1, ProducerEpoch: -1}
		}
		resp.ErrorCode = txnCode(out.GetError(), v, initPIDFencedSince)
		resp.ProducerID, resp.ProducerEpoch = out.GetProducerId(), int16(out.GetProducerEpoch())
		if resp.ErrorCode != 0 {
			resp.ProducerID, resp.ProducerEpoch = -1, -1
		}
		return resp
	}}, nil
}

// initProducerIDToProto converts an InitProducerId request; versions
// before v3 have no producer id and epoch (-1: a new producer).
func initProducerIDToProto(msg *kmsg.InitProducerIDRequest) *txnv1.InitProducerIdRequest {
	out := &txnv1.InitProducerIdRequest{TransactionTimeoutMs: msg.TransactionTimeoutMillis, ProducerId: -1, ProducerEpoch: -1}
	if msg.TransactionalID != nil {
		out.TransactionalId = *msg.TransactionalID
	}
	if msg.Version >= 3 {
		out.ProducerId, out.ProducerEpoch = msg.ProducerID, int32(msg.ProducerEpoch)
	}
	return out
}

// addPartitions is one transaction's AddPartitionsToTxn, from either
// request layout.
type addPartitions struct {
	tid        string
	pid        int64
	epoch      int16
	verifyOnly bool
	topics     []kmsg.AddPartitionsToTxnRequestTransactionTopic
}

// kafkaAddPartitionsToTxn serves AddPartitionsToTxn (key 24): v0-v3 add a
// producer's partitions to its transaction; v4+ carry a batch of
// transactions, each adding or (verify_only, KIP-890 part 1) checking.
func (r *TransactionCoordinator) kafkaAddPartitionsToTxn(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.AddPartitionsToTxnRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	v := msg.Version
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	resp.Version = v
	if v < 4 {
		one := addPartitions{tid: msg.TransactionalID, pid: msg.ProducerID, epoch: msg.ProducerEpoch}
		for _, t := range msg.Topics {
			one.topics = append(one.topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
			for _, t := range r.addPartitions(ctx, one, v) {
				rt := kmsg.NewAddPartitionsToTxnResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, p.ErrorCode
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp
		}}, nil
	}
	if e := authorizeClusterAction(ctx, r.deps.Authorizer()); e != nil {
		resp.ErrorCode = errCode(e, v, addPartitionsFencedSince)
		return kafka.Now(resp), nil
	}
	batch := make([]addPartitions, 0, len(msg.Transactions))
	for _, t := range msg.Transactions {
		batch = append(batch, addPartitions{tid: t.TransactionalID, pid: t.ProducerID, epoch: t.ProducerEpoch, verifyOnly: t.VerifyOnly, topics: t.Topics})
	}
	return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
		for _, one := range batch {
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = one.tid
			rt.Topics = r.addPartitions(ctx, one, v)
			resp.Transactions = append(resp.Transactions, rt)
		}
		return resp
	}}, nil
}

// addPartitions runs one transaction's AddPartitionsToTxn and answers
// every partition it named, in request order. A partition without an
// error of its own in a call that failed gets the call's error: Kafka
// answers OPERATION_NOT_ATTEMPTED there, which clients retry as they retry
// the call's error.
func (r *TransactionCoordinator) addPartitions(ctx context.Context, one addPartitions, v int16) []kmsg.AddPartitionsToTxnResponseTransactionTopic {
	preq := &txnv1.AddPartitionsToTxnRequest{TransactionalId: one.tid, ProducerId: one.pid, ProducerEpoch: int32(one.epoch), VerifyOnly: one.verifyOnly}
	for _, t := range one.topics {
		for _, p := range t.Partitions {
			preq.Partitions = append(preq.Partitions, &commonv1.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	var out *txnv1.AddPartitionsToTxnResponse
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, one.tid); e != nil {
		out = &txnv1.AddPartitionsToTxnResponse{Error: e.Proto()}
	} else if len(preq.Partitions) > 0 {
		var err error
		if out, err = r.AddPartitionsToTxn(ctx, preq); err != nil {
			out = &txnv1.AddPartitionsToTxnResponse{Error: errs.ItemError(err)}
		}
	}
	results := out.GetResults()
	if len(results) != len(preq.Partitions) {
		results = nil // answer every partition with the call's error
	}
	var topics []kmsg.AddPartitionsToTxnResponseTransactionTopic
	i := 0
	for _, t := range one.topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			perr := out.GetError()
			if results != nil && results[i].GetError() != nil {
				perr = results[i].GetError()
			}
			i++
			rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			rp.Partition, rp.ErrorCode = p, txnCode(perr, v, addPartitionsFencedSince)
			rt.Partitions = append(rt.Partitions, rp)
		}
		topics = append(topics, rt)
	}
	return topics
}

// kafkaAddOffsetsToTxn serves AddOffsetsToTxn (key 25).
func (r *TransactionCoordinator) kafkaAddOffsetsToTxn(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.AddOffsetsToTxnRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	v := msg.Version
	resp := kmsg.NewPtrAddOffsetsToTxnResponse()
	resp.Version = v
	// Read on the group is checked by AddOffsetsToTxn
	// (GROUP_AUTHORIZATION_FAILED).
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, msg.TransactionalID); e != nil {
		resp.ErrorCode = errCode(e, v, addOffsetsFencedSince)
		return kafka.Now(resp), nil
	}
	preq := &txnv1.AddOffsetsToTxnRequest{TransactionalId: msg.TransactionalID, ProducerId: msg.ProducerID, ProducerEpoch: int32(msg.ProducerEpoch), GroupId: msg.Group}
	return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
		out, err := r.AddOffsetsToTxn(ctx, preq)
		if err != nil {
			out = &txnv1.AddOffsetsToTxnResponse{Error: errs.ItemError(err)}
		}
		resp.ErrorCode = txnCode(out.GetError(), v, addOffsetsFencedSince)
		return resp
	}}, nil
}

// kafkaEndTxn serves EndTxn (key 26). v5 ends the transaction as the gRPC
// API does, bumping the epoch, and answers the id and epoch to use next;
// as in Kafka, a v5 abort with no transaction open succeeds and bumps the
// epoch too. Older versions keep the producer's epoch (Kafka's transaction
// version 1), since those clients cannot learn a new one.
func (r *TransactionCoordinator) kafkaEndTxn(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.EndTxnRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	v := msg.Version
	resp := kmsg.NewPtrEndTxnResponse()
	resp.Version = v
	if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Write, msg.TransactionalID); e != nil {
		resp.ErrorCode = errCode(e, v, endTxnFencedSince)
		return kafka.Now(resp), nil
	}
	preq := &txnv1.EndTxnRequest{TransactionalId: msg.TransactionalID, ProducerId: msg.ProducerID, ProducerEpoch: int32(msg.ProducerEpoch), Commit: msg.Commit}
	return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
		mode := endKeepEpoch
		if v >= endTxnBumpSince {
			mode = endBumpAbortAny
		}
		out := r.endTxn(ctx, preq, mode)
		resp.ErrorCode = txnCode(out.GetError(), v, endTxnFencedSince)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		if resp.ErrorCode == 0 {
			resp.ProducerID, resp.ProducerEpoch = out.GetProducerId(), int16(out.GetProducerEpoch())
		}
		return resp
	}}, nil
}

// kafkaDescribeTransactions serves DescribeTransactions (key 65, KIP-664)
// for the transactional ids this process coordinates; others get
// NOT_COORDINATOR.
func (r *TransactionCoordinator) kafkaDescribeTransactions(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.DescribeTransactionsRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	resp := kmsg.NewPtrDescribeTransactionsResponse()
	resp.Version = msg.Version
	var allowed []string
	denied := map[int]*errs.Error{}
	for i, tid := range msg.TransactionalIDs {
		if e := authorizeTxnID(ctx, r.deps.Authorizer(), authz.Describe, tid); e != nil {
			denied[i] = e
			continue
		}
		allowed = append(allowed, tid)
	}
	out, err := r.DescribeTransactions(ctx, &txnv1.DescribeTransactionsRequest{TransactionalIds: allowed})
	if err != nil {
		out = &txnv1.DescribeTransactionsResponse{}
		for _, tid := range allowed {
			out.Transactions = append(out.Transactions, &txnv1.TransactionDescription{TransactionalId: tid, Error: errs.ItemError(err)})
		}
	}
	descs := out.GetTransactions()
	for i, tid := range msg.TransactionalIDs {
		if e, ok := denied[i]; ok {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode = tid, kafka.ErrorCode(e)
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		var d *txnv1.TransactionDescription
		if len(descs) > 0 {
			d, descs = descs[0], descs[1:]
		}
		resp.TransactionStates = append(resp.TransactionStates, describedToKafka(tid, d))
	}
	return kafka.Now(resp), nil
}

// describedToKafka converts one description; its partitions come sorted
// by topic, then partition.
func describedToKafka(tid string, d *txnv1.TransactionDescription) kmsg.DescribeTransactionsResponseTransactionState {
	st := kmsg.NewDescribeTransactionsResponseTransactionState()
	st.TransactionalID = tid
	if d == nil {
		st.ErrorCode = kafka.ErrorCode(errs.New(errs.UnknownServerError, "no description of %q", tid))
		return st
	}
	if d.GetError() != nil {
		st.ErrorCode = protoCode(d.GetError())
		st.StartTimestamp, st.ProducerID, st.ProducerEpoch = -1, -1, -1
		return st
	}
	st.State = stateName(d.GetState())
	st.TimeoutMillis, st.StartTimestamp = d.GetTransactionTimeoutMs(), d.GetStartTimeMs()
	st.ProducerID, st.ProducerEpoch = d.GetProducerId(), int16(d.GetProducerEpoch())
	for _, p := range d.GetPartitions() {
		if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != p.GetTopic() {
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic = p.GetTopic()
			st.Topics = append(st.Topics, t)
		}
		t := &st.Topics[len(st.Topics)-1]
		t.Partitions = append(t.Partitions, p.GetPartition())
	}
	return st
}

// stateName is Kafka's name of a transaction state ("Ongoing", ...).
func stateName(s txnv1.TransactionState) string {
	if s == txnv1.TransactionState_TRANSACTION_STATE_UNSPECIFIED {
		return "Unknown"
	}
	return kmsg.TransactionState(s - 1).String()
}

// stateByName is the state Kafka names name, matched exactly as Kafka
// does.
func stateByName(name string) (txnv1.TransactionState, bool) {
	i := slices.Index(kmsg.TransactionStateStrings(), name)
	if i < 0 {
		return txnv1.TransactionState_TRANSACTION_STATE_UNSPECIFIED, false
	}
	return stateProto(kmsg.TransactionState(i)), true
}

// kafkaListTransactions serves ListTransactions (key 66, KIP-664): the
// transactions this process coordinates.
func (r *TransactionCoordinator) kafkaListTransactions(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	msg, ok := req.Msg.(*kmsg.ListTransactionsRequest)
	if !ok {
		return kafka.Reply{}, badMsg(req)
	}
	resp := kmsg.NewPtrListTransactionsResponse()
	resp.Version = msg.Version
	preq, unknown := listTransactionsToProto(msg)
	resp.UnknownStateFilters = unknown
	if len(msg.StateFilters) > 0 && len(preq.StateFilters) == 0 {
		return kafka.Now(resp), nil // only unknown states asked for: none matches
	}
	out, err := r.ListTransactions(ctx, preq)
	if err != nil {
		out = &txnv1.ListTransactionsResponse{Error: errs.ItemError(err)}
	}
	if e := out.GetError(); e != nil {
		resp.ErrorCode = protoCode(e)
		return kafka.Now(resp), nil
	}
	for _, t := range out.GetTransactions() {
		// Kafka leaves out the ids the principal may not describe.
		if !authz.Allowed(ctx, r.deps.Authorizer(), authz.Describe, authz.TransactionalID, t.GetTransactionalId()) {
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = t.GetTransactionalId(), t.GetProducerId(), stateName(t.GetState())
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return kafka.Now(resp), nil
}

// listTransactionsToProto converts a ListTransactions request and returns
// the state filters Kafka does not know. A negative duration filter (v1's
// default, and v0's only meaning) lists every transaction, as 0 does for
// the role.
func listTransactionsToProto(msg *kmsg.ListTransactionsRequest) (*txnv1.ListTransactionsRequest, []string) {
	out := &txnv1.ListTransactionsRequest{ProducerIdFilters: msg.ProducerIDFilters}
	var unknown []string
	for _, name := range msg.StateFilters {
		st, ok := stateByName(name)
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		out.StateFilters = append(out.StateFilters, st)
	}
	if msg.Version >= 1 && msg.DurationFilterMillis > 0 {
		out.DurationFilterMs = msg.DurationFilterMillis
	}
	return out, unknown
}
