package txncoord

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// kafkaCall sends msg (its version set) through the handler the role
// registers for its key, as the listener would, and returns the answer.
func (h *harness) kafkaCall(msg kmsg.Request) kmsg.Response {
	h.t.Helper()
	m := kafka.NewMux()
	h.r.registerKafka(m)
	handler, minV, maxV, ok := m.Lookup(msg.Key())
	require.True(h.t, ok, "key %d registered", msg.Key())
	require.True(h.t, msg.GetVersion() >= minV && msg.GetVersion() <= maxV, "version %d served", msg.GetVersion())
	rep, err := handler(ctx(h.t), &kafka.Request{Key: msg.Key(), Version: msg.GetVersion(), Msg: msg, Conn: &kafka.Conn{Principal: "User:ANONYMOUS"}})
	require.NoError(h.t, err)
	if rep.Wait != nil {
		return rep.Wait(ctx(h.t))
	}
	require.NotNil(h.t, rep.Msg)
	return rep.Msg
}

func (h *harness) kInit(v int16, tid *string, pid int64, epoch int16) *kmsg.InitProducerIDResponse {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = v, tid, 30000, pid, epoch
	resp := h.kafkaCall(req).(*kmsg.InitProducerIDResponse)
	require.Equal(h.t, v, resp.Version)
	return resp
}

func (h *harness) kAdd(v int16, tid string, pid int64, epoch int16, topic string, parts ...int32) *kmsg.AddPartitionsToTxnResponse {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch = v, tid, pid, epoch
	req.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: topic, Partitions: parts}}
	return h.kafkaCall(req).(*kmsg.AddPartitionsToTxnResponse)
}

func (h *harness) kEnd(v int16, tid string, pid int64, epoch int16, commit bool) *kmsg.EndTxnResponse {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = v, tid, pid, epoch, commit
	return h.kafkaCall(req).(*kmsg.EndTxnResponse)
}

func ptr(s string) *string { return &s }

// kcode is Kafka's number of a catalog code.
func kcode(c errs.Code) int16 { return errs.Lookup(c).Kafka }

func partitionCodes(resp *kmsg.AddPartitionsToTxnResponse) map[int32]int16 {
	out := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.ErrorCode
		}
	}
	return out
}

// The versions registered are the ones the handlers serve completely.
func TestKafkaVersions(t *testing.T) {
	h := newHarness(t)
	m := kafka.NewMux()
	h.r.registerKafka(m)
	got := map[int16][2]int16{}
	for _, v := range m.Versions() {
		got[v.ApiKey] = [2]int16{v.MinVersion, v.MaxVersion}
	}
	require.Equal(t, map[int16][2]int16{22: {0, 5}, 24: {0, 5}, 25: {0, 4}, 26: {0, 5}, 65: {0, 0}, 66: {0, 1}}, got)
}

// A client below EndTxn v5 cannot learn a bumped epoch: its transactions
// end at the epoch they ran at (Kafka's transaction version 1), so its next
// transaction, with the same epoch, is accepted; a retried EndTxn of the
// ended transaction gets its outcome again.
func TestKafkaEndTxnBelowV5KeepsTheEpoch(t *testing.T) {
	h := newHarness(t)
	init := h.kInit(4, ptr("tx"), -1, -1)
	require.Zero(t, init.ErrorCode)
	pid, epoch := init.ProducerID, init.ProducerEpoch

	for i := range 3 {
		require.Equal(t, map[int32]int16{0: 0, 1: 0}, partitionCodes(h.kAdd(3, "tx", pid, epoch, "t", 0, 1)), "transaction %d", i)
		end := h.kEnd(4, "tx", pid, epoch, i != 1)
		require.Zero(t, end.ErrorCode, "transaction %d", i)
		m := h.awaitState("tx", map[bool]kmsg.TransactionState{true: kmsg.TransactionStateCompleteCommit, false: kmsg.TransactionStateCompleteAbort}[i != 1])
		require.Equal(t, epoch, m.epoch, "the epoch stays")
		require.Equal(t, pid, m.producerID)
	}
	sent := h.sent()
	require.Len(t, sent, 3)
	for _, mk := range sent {
		require.Equal(t, int32(epoch), mk.GetProducerEpoch(), "markers carry the epoch the transactions ran at")
	}
	require.Zero(t, h.kEnd(4, "tx", pid, epoch, true).ErrorCode, "a retried commit of the committed transaction")
	require.Equal(t, kcode(errs.InvalidTxnState), h.kEnd(4, "tx", pid, epoch, false).ErrorCode, "a retry asking for the other outcome")
	require.Len(t, h.sent(), 3, "retries write nothing")
}

// EndTxn v5 (KIP-890 part 2) bumps the epoch and answers the one to use
// next; the old epoch is fenced from then on, and answered
// INVALID_PRODUCER_EPOCH to versions before PRODUCER_FENCED existed.
func TestKafkaEndTxnV5BumpsTheEpoch(t *testing.T) {
	h := newHarness(t)
	init := h.kInit(5, ptr("tx"), -1, -1)
	pid, epoch := init.ProducerID, init.ProducerEpoch
	require.Zero(t, partitionCodes(h.kAdd(3, "tx", pid, epoch, "t", 0))[0])
	end := h.kEnd(5, "tx", pid, epoch, true)
	require.Zero(t, end.ErrorCode)
	require.Equal(t, pid, end.ProducerID)
	require.Equal(t, epoch+1, end.ProducerEpoch)
	h.awaitState("tx", kmsg.TransactionStateCompleteCommit)

	require.Equal(t, kcode(errs.ProducerFenced), partitionCodes(h.kAdd(3, "tx", pid, epoch, "t", 1))[1])
	require.Equal(t, kcode(errs.InvalidProducerEpoch), partitionCodes(h.kAdd(1, "tx", pid, epoch, "t", 1))[1], "v1 predates PRODUCER_FENCED")
	require.Zero(t, partitionCodes(h.kAdd(3, "tx", pid, end.ProducerEpoch, "t", 1))[1])

	// A late EndTxn of the ended transaction never ends the open one.
	late := h.kEnd(5, "tx", pid, epoch, false)
	require.Equal(t, kcode(errs.ProducerFenced), late.ErrorCode)
	require.Equal(t, int64(-1), late.ProducerID)
	require.Equal(t, kcode(errs.InvalidProducerEpoch), h.kEnd(1, "tx", pid, epoch, false).ErrorCode)
	require.Equal(t, kmsg.TransactionStateOngoing, h.state("tx").state)
}

// InitProducerId: a null transactional id is an idempotent producer, an
// empty one is refused; v3+ bump the epoch of the producer they name
// (KIP-360); a new producer with the id fences the old one, which learns it
// as PRODUCER_FENCED from v4 on and INVALID_PRODUCER_EPOCH before.
func TestKafkaInitProducerID(t *testing.T) {
	h := newHarness(t)
	idem := h.kInit(5, nil, -1, -1)
	require.Zero(t, idem.ErrorCode)
	require.GreaterOrEqual(t, idem.ProducerID, int64(0))
	require.Zero(t, idem.ProducerEpoch)

	empty := h.kInit(5, ptr(""), -1, -1)
	require.Equal(t, kcode(errs.InvalidRequest), empty.ErrorCode)
	require.Equal(t, int64(-1), empty.ProducerID)

	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis = 4, ptr("tx"), int32(h.r.cfg.MaxTimeout.Milliseconds()+1)
	require.Equal(t, kcode(errs.InvalidTransactionTimeout), h.kafkaCall(req).(*kmsg.InitProducerIDResponse).ErrorCode)

	first := h.kInit(2, ptr("tx"), -1, -1)
	require.Zero(t, first.ErrorCode)
	second := h.kInit(4, ptr("tx"), first.ProducerID, first.ProducerEpoch)
	require.Zero(t, second.ErrorCode)
	require.Equal(t, first.ProducerID, second.ProducerID)
	require.Equal(t, first.ProducerEpoch+1, second.ProducerEpoch, "KIP-360: the named producer's epoch is bumped")
	// v2 has no producer id and epoch: a new producer, which bumps again.
	third := h.kInit(2, ptr("tx"), 77, 7)
	require.Zero(t, third.ErrorCode)
	require.Equal(t, second.ProducerEpoch+1, third.ProducerEpoch)

	// Naming the epoch just before the current one is the retry of the
	// call that bumped it (KIP-360); older ones are fenced.
	require.Equal(t, third.ProducerEpoch, h.kInit(4, ptr("tx"), second.ProducerID, second.ProducerEpoch).ProducerEpoch)
	require.Equal(t, kcode(errs.ProducerFenced), h.kInit(4, ptr("tx"), first.ProducerID, first.ProducerEpoch).ErrorCode)
	require.Equal(t, kcode(errs.InvalidProducerEpoch), h.kInit(3, ptr("tx"), first.ProducerID, first.ProducerEpoch).ErrorCode)
	require.Equal(t, kcode(errs.ProducerFenced), h.kEnd(3, "tx", second.ProducerID, second.ProducerEpoch, true).ErrorCode)
}

// AddPartitionsToTxn answers every partition it was sent: a partition that
// does not exist gets UNKNOWN_TOPIC_OR_PARTITION and the others the call's
// error (nothing was added); v4+ batches check (verify_only) or add per
// transactional id.
func TestKafkaAddPartitionsToTxn(t *testing.T) {
	h := newHarness(t)
	init := h.kInit(4, ptr("tx"), -1, -1)
	pid, epoch := init.ProducerID, init.ProducerEpoch

	resp := h.kAdd(3, "tx", pid, epoch, "t", 0, 7)
	require.Equal(t, map[int32]int16{0: kcode(errs.UnknownTopicOrPartition), 7: kcode(errs.UnknownTopicOrPartition)}, partitionCodes(resp))
	require.Equal(t, kmsg.TransactionStateEmpty, h.state("tx").state, "nothing added")
	require.Equal(t, map[int32]int16{2: kcode(errs.InvalidProducerIDMapping)}, partitionCodes(h.kAdd(3, "nobody", pid, epoch, "t", 2)))
	require.Equal(t, map[int32]int16{2: kcode(errs.InvalidRequest)}, partitionCodes(h.kAdd(3, "", pid, epoch, "t", 2)), "an empty transactional id")
	require.Equal(t, map[int32]int16{1: 0}, partitionCodes(h.kAdd(0, "tx", pid, epoch, "t", 1)))

	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	check := kmsg.NewAddPartitionsToTxnRequestTransaction()
	check.TransactionalID, check.ProducerID, check.ProducerEpoch, check.VerifyOnly = "tx", pid, epoch, true
	check.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: "t", Partitions: []int32{1, 2}}}
	stale := check
	stale.ProducerEpoch = epoch - 1
	stale.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: "t", Partitions: []int32{1}}}
	req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{check, stale}
	batch := h.kafkaCall(req).(*kmsg.AddPartitionsToTxnResponse)
	require.Zero(t, batch.ErrorCode)
	require.Len(t, batch.Transactions, 2)
	require.Equal(t, "tx", batch.Transactions[0].TransactionalID)
	p := batch.Transactions[0].Topics[0].Partitions
	require.Equal(t, []kmsg.AddPartitionsToTxnResponseTransactionTopicPartition{{Partition: 1}, {Partition: 2, ErrorCode: kcode(errs.InvalidTxnState)}}, p)
	require.Equal(t, kcode(errs.ProducerFenced), batch.Transactions[1].Topics[0].Partitions[0].ErrorCode)
	require.False(t, h.state("tx").partitions[topicPartition{"t", 2}], "verify_only adds nothing")
}

// AddOffsetsToTxn adds the group's offsets partition; an empty group id is
// INVALID_GROUP_ID.
func TestKafkaAddOffsetsToTxn(t *testing.T) {
	h := newHarness(t)
	init := h.kInit(4, ptr("tx"), -1, -1)
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = 3, "tx", init.ProducerID, init.ProducerEpoch, "g"
	require.Zero(t, h.kafkaCall(req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
	require.Len(t, h.state("tx").partitions, 1)
	req.Group = ""
	require.Equal(t, kcode(errs.InvalidGroupID), h.kafkaCall(req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
	req.Group, req.ProducerEpoch = "g", init.ProducerEpoch+1
	require.Equal(t, kcode(errs.InvalidProducerEpoch), h.kafkaCall(req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
}

// DescribeTransactions and ListTransactions answer Kafka's state names,
// partitions by topic, and the state filters Kafka does not know.
func TestKafkaDescribeAndListTransactions(t *testing.T) {
	h := newHarness(t)
	a := h.kInit(4, ptr("a"), -1, -1)
	h.kInit(4, ptr("b"), -1, -1)
	h.kAdd(3, "a", a.ProducerID, a.ProducerEpoch, "t", 2, 0)
	h.clock.Add(5000)

	dreq := kmsg.NewPtrDescribeTransactionsRequest()
	dreq.TransactionalIDs = []string{"a", "zz", "b"}
	desc := h.kafkaCall(dreq).(*kmsg.DescribeTransactionsResponse)
	require.Len(t, desc.TransactionStates, 3)
	d := desc.TransactionStates[0]
	require.Equal(t, "a", d.TransactionalID)
	require.Zero(t, d.ErrorCode)
	require.Equal(t, "Ongoing", d.State)
	require.Equal(t, int32(30000), d.TimeoutMillis)
	require.Equal(t, a.ProducerID, d.ProducerID)
	require.Equal(t, h.clock.Load()-5000, d.StartTimestamp)
	require.Equal(t, []kmsg.DescribeTransactionsResponseTransactionStateTopic{{Topic: "t", Partitions: []int32{0, 2}}}, d.Topics)
	require.Equal(t, kcode(errs.TransactionalIDNotFound), desc.TransactionStates[1].ErrorCode)
	require.Equal(t, "zz", desc.TransactionStates[1].TransactionalID)
	require.Equal(t, "Empty", desc.TransactionStates[2].State)

	list := func(v int16, states []string, duration int64) *kmsg.ListTransactionsResponse {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version, req.StateFilters, req.DurationFilterMillis = v, states, duration
		return h.kafkaCall(req).(*kmsg.ListTransactionsResponse)
	}
	ids := func(resp *kmsg.ListTransactionsResponse) map[string]string {
		out := map[string]string{}
		for _, s := range resp.TransactionStates {
			out[s.TransactionalID] = s.TransactionState
		}
		return out
	}
	require.Equal(t, map[string]string{"a": "Ongoing", "b": "Empty"}, ids(list(1, nil, -1)))
	require.Equal(t, map[string]string{"a": "Ongoing", "b": "Empty"}, ids(list(0, nil, 4000)), "v0 has no duration filter")
	require.Equal(t, map[string]string{"a": "Ongoing"}, ids(list(1, nil, 4000)))
	require.Empty(t, ids(list(1, nil, 6000)))
	resp := list(1, []string{"Ongoing", "Bogus"}, -1)
	require.Equal(t, map[string]string{"a": "Ongoing"}, ids(resp))
	require.Equal(t, []string{"Bogus"}, resp.UnknownStateFilters)
	resp = list(1, []string{"ongoing"}, -1)
	require.Empty(t, ids(resp), "state names are matched exactly, as Kafka does")
	require.Equal(t, []string{"ongoing"}, resp.UnknownStateFilters)
}

// An EndTxn v5 abort with no transaction open succeeds and bumps the epoch
// (KIP-890 part 2: the client cannot know whether a failed produce opened
// one); its retry gets the same answer. Below v5, and for a commit, it is
// INVALID_TXN_STATE.
func TestKafkaEndTxnV5AbortsWithoutATransaction(t *testing.T) {
	h := newHarness(t)
	init := h.kInit(5, ptr("tx"), -1, -1)
	pid, epoch := init.ProducerID, init.ProducerEpoch
	require.Equal(t, kcode(errs.InvalidTxnState), h.kEnd(4, "tx", pid, epoch, false).ErrorCode)
	require.Equal(t, kcode(errs.InvalidTxnState), h.kEnd(5, "tx", pid, epoch, true).ErrorCode)

	end := h.kEnd(5, "tx", pid, epoch, false)
	require.Zero(t, end.ErrorCode)
	require.Equal(t, pid, end.ProducerID)
	require.Equal(t, epoch+1, end.ProducerEpoch)
	h.awaitState("tx", kmsg.TransactionStateCompleteAbort)
	require.Empty(t, h.sent(), "no partition, no marker")
	retry := h.kEnd(5, "tx", pid, epoch, false)
	require.Zero(t, retry.ErrorCode)
	require.Equal(t, epoch+1, retry.ProducerEpoch)
	require.Equal(t, kcode(errs.ProducerFenced), partitionCodes(h.kAdd(3, "tx", pid, epoch, "t", 0))[0])
	require.Zero(t, partitionCodes(h.kAdd(3, "tx", pid, end.ProducerEpoch, "t", 0))[0])
}
