package txncoord

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/service"
)

// harness is a transaction coordinator with one loaded shard over an
// in-memory log, a clock the test moves, and partition leaders that
// record the markers they get (and refuse them while refuse is set).
type harness struct {
	t     *testing.T
	r     *TransactionCoordinator
	s     *shard
	log   *coordinator.MemLog
	clock atomic.Int64 // unix ms

	mu      sync.Mutex
	markers []*storagev1.TxnMarker
	refuse  atomic.Bool
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, log: &coordinator.MemLog{}}
	h.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	img := metadata.Empty()
	img.Revision = 1
	img.Brokers[1] = &commonv1.Broker{Id: 1, Roles: []string{"storage-node", "transaction-coordinator"}, State: commonv1.BrokerState_BROKER_STATE_ALIVE,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "127.0.0.1", Port: 1}}}
	for name, n := range map[string]int32{"t": 3, stateTopic: 1, metadata.OffsetsTopic: 5} {
		tp := &metadata.Topic{Name: name, Internal: strings.HasPrefix(name, "__")}
		for p := range n {
			tp.Partitions = append(tp.Partitions, &commonv1.PartitionState{Topic: name, Partition: p, LeaderId: 1, LeaderEpoch: 3})
		}
		img.Topics[name] = tp
	}
	cache := metadata.NewCache()
	cache.Reset(img)
	fc := &fakeController{}
	r := &TransactionCoordinator{cfg: Config{MaxTimeout: time.Minute, IDExpiration: time.Hour}, logger: log.Discard(), shards: map[int32]*shard{},
		deps: service.Deps{Metadata: cache, Node: config.Node{ID: 1}},
		now:  func() time.Time { return time.UnixMilli(h.clock.Load()) }}
	r.pids = newPIDManager(fc.fetch, r.logger)
	r.m = newMetrics(metricnoop.NewMeterProvider().Meter("test"), r)
	r.markers = &markerWriter{send: h.send, logger: r.logger, m: r.m}
	t.Cleanup(r.pids.close)
	h.r = r
	h.s = h.load()
	return h
}

// load starts a shard over the harness's log, as a new coordinator would.
func (h *harness) load() *shard {
	if h.s != nil {
		h.s.unload()
	}
	s := newShard(h.r, 0, h.log)
	s.coordEpoch = 3
	s.load()
	require.True(h.t, s.isLoaded())
	h.r.mu.Lock()
	h.r.shards[0] = s
	h.r.mu.Unlock()
	h.t.Cleanup(s.unload)
	h.s = s
	return s
}

func (h *harness) send(_ context.Context, m *storagev1.TxnMarker) map[topicPartition]error {
	out := map[topicPartition]error{}
	for _, p := range m.GetPartitions() {
		tp := topicPartition{p.GetTopic(), p.GetPartition()}
		if h.refuse.Load() {
			out[tp] = errs.New(errs.NotLeaderOrFollower, "moving")
		} else {
			out[tp] = nil
		}
	}
	if !h.refuse.Load() {
		h.mu.Lock()
		h.markers = append(h.markers, m)
		h.mu.Unlock()
	}
	return out
}

func (h *harness) sent() []*storagev1.TxnMarker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*storagev1.TxnMarker(nil), h.markers...)
}

func (h *harness) state(tid string) *txnMeta {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if m, ok := h.s.txns[tid]; ok {
		return m.clone()
	}
	return nil
}

// awaitState waits until tid is in state st.
func (h *harness) awaitState(tid string, st kmsg.TransactionState) *txnMeta {
	h.t.Helper()
	var m *txnMeta
	require.Eventually(h.t, func() bool {
		m = h.state(tid)
		return m != nil && m.state == st
	}, 5*time.Second, 2*time.Millisecond, "transactional id %q never reached %s", tid, st)
	return m
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func (h *harness) init(tid string, pid int64, epoch int32) (*txnv1.InitProducerIdResponse, error) {
	return h.r.InitProducerId(ctx(h.t), &txnv1.InitProducerIdRequest{TransactionalId: tid, TransactionTimeoutMs: 30000, ProducerId: pid, ProducerEpoch: epoch})
}

func (h *harness) mustInit(tid string) (int64, int32) {
	h.t.Helper()
	resp, err := h.init(tid, -1, -1)
	require.NoError(h.t, err)
	require.Nil(h.t, resp.GetError())
	return resp.GetProducerId(), resp.GetProducerEpoch()
}

func (h *harness) add(tid string, pid int64, epoch int32, parts ...*commonv1.TopicPartition) *txnv1.AddPartitionsToTxnResponse {
	resp, err := h.r.AddPartitionsToTxn(ctx(h.t), &txnv1.AddPartitionsToTxnRequest{TransactionalId: tid, ProducerId: pid, ProducerEpoch: epoch, Partitions: parts})
	require.NoError(h.t, err)
	return resp
}

func (h *harness) verify(tid string, pid int64, epoch int32, parts ...*commonv1.TopicPartition) *txnv1.AddPartitionsToTxnResponse {
	resp, err := h.r.AddPartitionsToTxn(ctx(h.t), &txnv1.AddPartitionsToTxnRequest{TransactionalId: tid, ProducerId: pid, ProducerEpoch: epoch, Partitions: parts, VerifyOnly: true})
	require.NoError(h.t, err)
	return resp
}

func (h *harness) end(tid string, pid int64, epoch int32, commit bool) *txnv1.EndTxnResponse {
	resp, err := h.r.EndTxn(ctx(h.t), &txnv1.EndTxnRequest{TransactionalId: tid, ProducerId: pid, ProducerEpoch: epoch, Commit: commit})
	require.NoError(h.t, err)
	return resp
}

func tp(topic string, p int32) *commonv1.TopicPartition {
	return &commonv1.TopicPartition{Topic: topic, Partition: p}
}

func code(e interface{ GetCode() errs.Code }) errs.Code {
	if e == nil {
		return 0
	}
	return e.GetCode()
}

// A transaction goes Empty → Ongoing → PrepareCommit → CompleteCommit, each
// step persisted before it is answered; EndTxn answers the bumped epoch,
// and the markers carry the ended transaction's producer id and epoch.
func TestTransactionCommits(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	require.Zero(t, epoch)
	require.Equal(t, kmsg.TransactionStateEmpty, h.state("tx").state)
	require.Len(t, h.log.Records(), 1, "InitProducerId is persisted")

	resp := h.add("tx", pid, epoch, tp("t", 0), tp("t", 1))
	require.Nil(t, resp.GetError())
	require.Len(t, resp.GetResults(), 2)
	require.Equal(t, kmsg.TransactionStateOngoing, h.state("tx").state)
	// Adding partitions already in the transaction writes nothing.
	h.add("tx", pid, epoch, tp("t", 1))
	require.Len(t, h.log.Records(), 2)

	end := h.end("tx", pid, epoch, true)
	require.Nil(t, end.GetError())
	require.Equal(t, pid, end.GetProducerId())
	require.Equal(t, int32(1), end.GetProducerEpoch(), "KIP-890: the epoch is bumped at the end of every transaction")
	m := h.awaitState("tx", kmsg.TransactionStateCompleteCommit)
	require.Empty(t, m.partitions)
	require.Equal(t, int16(1), m.epoch)

	sent := h.sent()
	require.Len(t, sent, 1)
	require.True(t, sent[0].GetCommitted())
	require.Equal(t, pid, sent[0].GetProducerId())
	require.Equal(t, int32(0), sent[0].GetProducerEpoch(), "the marker carries the ended transaction's epoch")
	require.Equal(t, int32(3), sent[0].GetCoordinatorEpoch())
	require.Len(t, sent[0].GetPartitions(), 2)

	var states []kmsg.TransactionState
	for _, r := range h.log.Records() {
		tid, err := decodeTxnKey(r.Key)
		require.NoError(t, err)
		m, err := decodeTxn(tid, r.Value)
		require.NoError(t, err)
		states = append(states, m.state)
	}
	require.Equal(t, []kmsg.TransactionState{kmsg.TransactionStateEmpty, kmsg.TransactionStateOngoing,
		kmsg.TransactionStatePrepareCommit, kmsg.TransactionStateCompleteCommit}, states)

	// The next transaction uses the new epoch; the old one is fenced.
	require.Equal(t, errs.ProducerFenced, code(h.add("tx", pid, 0, tp("t", 2)).GetError()))
	require.Nil(t, h.add("tx", pid, 1, tp("t", 2)).GetError())
	require.Equal(t, kmsg.TransactionStateOngoing, h.state("tx").state)
}

// Bad input gets Kafka's codes and changes nothing.
func TestTransactionRejectsBadInput(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	before := len(h.log.Records())

	require.Equal(t, errs.InvalidProducerIDMapping, code(h.add("nobody", pid, epoch, tp("t", 0)).GetError()), "unknown transactional id")
	require.Equal(t, errs.InvalidProducerIDMapping, code(h.add("tx", pid+1, epoch, tp("t", 0)).GetError()), "another producer id")
	require.Equal(t, errs.InvalidProducerEpoch, code(h.add("tx", pid, epoch+1, tp("t", 0)).GetError()), "an epoch from the future")
	unknown := h.add("tx", pid, epoch, tp("t", 0), tp("nope", 0), tp("t", 7))
	require.Equal(t, errs.UnknownTopicOrPartition, code(unknown.GetError()))
	require.Nil(t, unknown.GetResults()[0].GetError())
	require.Equal(t, errs.UnknownTopicOrPartition, code(unknown.GetResults()[1].GetError()))
	require.Equal(t, errs.UnknownTopicOrPartition, code(unknown.GetResults()[2].GetError()))
	require.Equal(t, kmsg.TransactionStateEmpty, h.state("tx").state, "nothing was added")
	require.Equal(t, errs.InvalidTxnState, code(h.end("tx", pid, epoch, true).GetError()), "EndTxn without a transaction")
	require.Equal(t, errs.InvalidProducerIDMapping, code(h.end("nobody", pid, epoch, true).GetError()))
	resp, err := h.r.InitProducerId(ctx(t), &txnv1.InitProducerIdRequest{TransactionalId: "tx", TransactionTimeoutMs: 60001, ProducerId: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidTransactionTimeout, code(resp.GetError()), "a timeout above txn.max-timeout")
	require.Equal(t, errs.InvalidRequest, code(h.add(strings.Repeat("x", 1025), pid, epoch, tp("t", 0)).GetError()), "an oversized transactional id")
	require.Equal(t, errs.InvalidRequest, code(h.add("tx", pid, epoch).GetError()), "no partitions")
	require.Equal(t, before, len(h.log.Records()), "no bad request wrote anything")
	require.Equal(t, int16(0), h.state("tx").epoch)
}

// A retried EndTxn of the transaction that just ended succeeds only with
// its outcome; a late one never touches the next transaction.
func TestRetriedAndLateEndTxn(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	h.add("tx", pid, epoch, tp("t", 0))
	require.Nil(t, h.end("tx", pid, epoch, true).GetError())
	h.awaitState("tx", kmsg.TransactionStateCompleteCommit)

	retry := h.end("tx", pid, epoch, true)
	require.Nil(t, retry.GetError())
	require.Equal(t, int32(1), retry.GetProducerEpoch(), "the retry learns the epoch to use next")
	require.Equal(t, errs.InvalidTxnState, code(h.end("tx", pid, epoch, false).GetError()), "a retry asking for the other outcome")
	require.Equal(t, kmsg.TransactionStateCompleteCommit, h.state("tx").state)

	// The next transaction begins; a late EndTxn of the first, even one
	// asking for abort, is refused and leaves it open.
	require.Nil(t, h.add("tx", pid, 1, tp("t", 1)).GetError())
	require.Equal(t, errs.ProducerFenced, code(h.end("tx", pid, epoch, false).GetError()))
	require.Equal(t, errs.ProducerFenced, code(h.end("tx", pid, epoch, true).GetError()))
	m := h.state("tx")
	require.Equal(t, kmsg.TransactionStateOngoing, m.state)
	require.True(t, m.partitions[topicPartition{"t", 1}])
	require.Len(t, h.sent(), 1, "no marker for the open transaction")
}

// InitProducerId of a new producer with the same transactional id aborts
// the open transaction (CONCURRENT_TRANSACTIONS meanwhile) and bumps the
// epoch, fencing the old producer: its writes, verification and EndTxn are
// refused with PRODUCER_FENCED.
func TestInitProducerIDFencesTheOldProducer(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	h.add("tx", pid, epoch, tp("t", 0))

	resp, err := h.init("tx", -1, -1)
	require.NoError(t, err)
	require.Equal(t, errs.ConcurrentTransactions, code(resp.GetError()))
	h.awaitState("tx", kmsg.TransactionStateCompleteAbort)
	sent := h.sent()
	require.Len(t, sent, 1)
	require.False(t, sent[0].GetCommitted())
	require.Equal(t, int32(0), sent[0].GetProducerEpoch())

	pid2, epoch2 := h.mustInit("tx")
	require.Equal(t, pid, pid2)
	require.Equal(t, int32(2), epoch2, "one bump for the abort, one for the new producer")

	require.Equal(t, errs.ProducerFenced, code(h.end("tx", pid, epoch, true).GetError()))
	require.Equal(t, errs.ProducerFenced, code(h.add("tx", pid, epoch, tp("t", 1)).GetError()))
	require.Equal(t, errs.ProducerFenced, code(h.verify("tx", pid, epoch, tp("t", 0)).GetError()))
}

// A transaction open longer than its timeout is aborted by the periodic
// scan, fencing its producer.
func TestTransactionTimeoutAborts(t *testing.T) {
	h := newHarness(t)
	resp, err := h.r.InitProducerId(ctx(t), &txnv1.InitProducerIdRequest{TransactionalId: "tx", TransactionTimeoutMs: 100, ProducerId: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	pid, epoch := resp.GetProducerId(), resp.GetProducerEpoch()
	h.add("tx", pid, epoch, tp("t", 0))
	h.s.tick(h.r.now().Add(50 * time.Millisecond))
	require.Equal(t, kmsg.TransactionStateOngoing, h.state("tx").state, "not yet timed out")
	h.s.tick(h.r.now().Add(150 * time.Millisecond))
	m := h.awaitState("tx", kmsg.TransactionStateCompleteAbort)
	require.Equal(t, int16(1), m.epoch)
	require.Equal(t, errs.ProducerFenced, code(h.end("tx", pid, epoch, true).GetError()), "the hung producer's late EndTxn")
	require.Equal(t, errs.ProducerFenced, code(h.end("tx", pid, epoch, false).GetError()))
	// It may come back with KIP-360's bump.
	again, err := h.init("tx", pid, epoch)
	require.NoError(t, err)
	require.Nil(t, again.GetError())
	require.Equal(t, int32(2), again.GetProducerEpoch())
}

// verify_only (KIP-890 part 1) answers per partition whether it is in the
// producer's ongoing transaction, and writes nothing.
func TestVerifyOnly(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	resp := h.verify("tx", pid, epoch, tp("t", 0))
	require.Nil(t, resp.GetError())
	require.Equal(t, errs.InvalidTxnState, code(resp.GetResults()[0].GetError()), "no transaction open")
	h.add("tx", pid, epoch, tp("t", 0))
	before := len(h.log.Records())
	resp = h.verify("tx", pid, epoch, tp("t", 0), tp("t", 1))
	require.Nil(t, resp.GetError())
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Equal(t, errs.InvalidTxnState, code(resp.GetResults()[1].GetError()))
	require.Equal(t, errs.InvalidProducerEpoch, code(h.verify("tx", pid, epoch+1, tp("t", 0)).GetError()))
	require.Equal(t, errs.InvalidProducerIDMapping, code(h.verify("other", pid, epoch, tp("t", 0)).GetError()))
	require.Equal(t, before, len(h.log.Records()))
	require.False(t, h.state("tx").partitions[topicPartition{"t", 1}])
	// After the transaction ends, its epoch no longer verifies.
	h.end("tx", pid, epoch, true)
	h.awaitState("tx", kmsg.TransactionStateCompleteCommit)
	require.Equal(t, errs.ProducerFenced, code(h.verify("tx", pid, epoch, tp("t", 0)).GetError()))
}

// A coordinator that loads the shard restores every transactional id from
// the log, and resumes writing the markers of a transaction whose outcome
// was persisted but not completed.
func TestReplayResumesMarkers(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	h.mustInit("idle")
	h.add("tx", pid, epoch, tp("t", 0), tp(metadata.OffsetsTopic, 2))
	h.refuse.Store(true) // leaders refuse markers: the coordinator keeps trying
	require.Nil(t, h.end("tx", pid, epoch, true).GetError())
	h.awaitState("tx", kmsg.TransactionStatePrepareCommit)

	s := h.load() // the coordinator dies; another takes over the log
	m := h.state("tx")
	require.Equal(t, kmsg.TransactionStatePrepareCommit, m.state)
	require.Equal(t, pid, m.lastProducerID)
	require.Equal(t, int16(0), m.lastEpoch)
	require.Equal(t, int16(1), m.epoch)
	require.Len(t, m.partitions, 2)
	require.Equal(t, kmsg.TransactionStateEmpty, h.state("idle").state)
	require.Empty(t, h.sent())

	h.refuse.Store(false)
	h.awaitState("tx", kmsg.TransactionStateCompleteCommit)
	sent := h.sent()
	require.NotEmpty(t, sent)
	require.True(t, sent[len(sent)-1].GetCommitted())
	require.Equal(t, int32(0), sent[len(sent)-1].GetProducerEpoch())
	require.Same(t, s, h.s)

	// And a replay of the completed log agrees.
	h.load()
	require.Equal(t, kmsg.TransactionStateCompleteCommit, h.state("tx").state)
	require.Equal(t, int16(1), h.state("tx").epoch)
}

// An exhausted epoch moves the transactional id to a new producer id.
func TestEpochExhaustionGetsANewProducerID(t *testing.T) {
	h := newHarness(t)
	pid, _ := h.mustInit("tx")
	h.s.mu.Lock()
	h.s.txns["tx"].epoch = maxEpoch
	h.s.mu.Unlock()
	h.add("tx", pid, maxEpoch, tp("t", 0))
	end := h.end("tx", pid, maxEpoch, true)
	require.Nil(t, end.GetError())
	require.NotEqual(t, pid, end.GetProducerId())
	require.Equal(t, int32(0), end.GetProducerEpoch())
	h.awaitState("tx", kmsg.TransactionStateCompleteCommit)
	sent := h.sent()
	require.Equal(t, pid, sent[0].GetProducerId(), "the markers name the ended transaction's producer")
	require.Equal(t, int32(maxEpoch), sent[0].GetProducerEpoch())
	// The retry of that EndTxn still succeeds, across a reload.
	h.load()
	retry := h.end("tx", pid, maxEpoch, true)
	require.Nil(t, retry.GetError())
	require.Equal(t, end.GetProducerId(), retry.GetProducerId())
}

// AddOffsetsToTxn adds the group's partition of __consumer_offsets.
func TestAddOffsetsToTxn(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	resp, err := h.r.AddOffsetsToTxn(ctx(t), &txnv1.AddOffsetsToTxnRequest{TransactionalId: "tx", ProducerId: pid, ProducerEpoch: epoch, GroupId: "g"})
	require.NoError(t, err)
	require.Nil(t, resp.GetError())
	want := topicPartition{metadata.OffsetsTopic, coordinator.PartitionFor("g", 5)}
	require.Equal(t, map[topicPartition]bool{want: true}, h.state("tx").partitions)
}

// KIP-664: list, describe, and abort a hanging transaction on request.
func TestListDescribeAbort(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("a")
	h.mustInit("b")
	h.add("a", pid, epoch, tp("t", 2), tp("t", 0))
	h.clock.Add(5000)

	n, age := h.r.ongoing()
	require.Equal(t, 1, n)
	require.InDelta(t, 5.0, age, 0.001, "the hanging-transaction gauge")

	list, err := h.r.ListTransactions(ctx(t), &txnv1.ListTransactionsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetTransactions(), 2)
	list, err = h.r.ListTransactions(ctx(t), &txnv1.ListTransactionsRequest{StateFilters: []txnv1.TransactionState{txnv1.TransactionState_TRANSACTION_STATE_ONGOING}, DurationFilterMs: 4000})
	require.NoError(t, err)
	require.Len(t, list.GetTransactions(), 1)
	require.Equal(t, "a", list.GetTransactions()[0].GetTransactionalId())

	desc, err := h.r.DescribeTransactions(ctx(t), &txnv1.DescribeTransactionsRequest{TransactionalIds: []string{"a", "zz"}})
	require.NoError(t, err)
	d := desc.GetTransactions()[0]
	require.Equal(t, txnv1.TransactionState_TRANSACTION_STATE_ONGOING, d.GetState())
	require.Equal(t, []*commonv1.TopicPartition{tp("t", 0), tp("t", 2)}, d.GetPartitions())
	require.Equal(t, int32(30000), d.GetTransactionTimeoutMs())
	require.Equal(t, errs.TransactionalIDNotFound, code(desc.GetTransactions()[1].GetError()))

	ab, err := h.r.AbortTransaction(ctx(t), &txnv1.AbortTransactionRequest{TransactionalId: "a"})
	require.NoError(t, err)
	require.Nil(t, ab.GetError())
	h.awaitState("a", kmsg.TransactionStateCompleteAbort)
	require.Equal(t, errs.ProducerFenced, code(h.end("a", pid, epoch, true).GetError()))
	ab, err = h.r.AbortTransaction(ctx(t), &txnv1.AbortTransactionRequest{TransactionalId: "b"})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidTxnState, code(ab.GetError()))
}

// A transactional id this process does not coordinate is answered
// NOT_COORDINATOR with a hint; one whose shard is not loaded yet
// COORDINATOR_LOAD_IN_PROGRESS.
func TestNotCoordinator(t *testing.T) {
	h := newHarness(t)
	h.r.mu.Lock()
	delete(h.r.shards, 0)
	h.r.mu.Unlock()
	resp := h.add("tx", 1, 0, tp("t", 0))
	require.Equal(t, errs.CoordinatorLoadInProgress, code(resp.GetError()), "metadata names this node: it is taking over")
	h.r.deps.Node.ID = 9
	resp = h.add("tx", 1, 0, tp("t", 0))
	require.Equal(t, errs.NotCoordinator, code(resp.GetError()))
	require.Equal(t, int32(1), resp.GetError().GetCoordinator().GetNodeId())
}

// A transactional id idle past its expiration is removed with a tombstone:
// replay forgets it too, and its next InitProducerId starts over with a new
// producer id. An id with an open transaction never expires.
func TestTransactionalIDExpires(t *testing.T) {
	h := newHarness(t)
	pid, _ := h.mustInit("idle")
	opid, oepoch := h.mustInit("open")
	h.add("open", opid, oepoch, tp("t", 0))
	h.s.mu.Lock()
	h.s.txns["open"].timeoutMs = math.MaxInt32
	h.s.mu.Unlock()
	h.clock.Add(time.Hour.Milliseconds() + 1)
	h.s.tick(h.r.now())
	require.Eventually(t, func() bool { return h.state("idle") == nil }, 5*time.Second, 2*time.Millisecond)
	require.NotNil(t, h.state("open"))
	recs := h.log.Records()
	require.Nil(t, recs[len(recs)-1].Value, "a tombstone")
	h.load()
	require.Nil(t, h.state("idle"))
	require.Equal(t, kmsg.TransactionStateOngoing, h.state("open").state)
	again, _ := h.mustInit("idle")
	require.NotEqual(t, pid, again)
}

// InitProducerId at an exhausted epoch moves the id to a new producer id
// with epoch 0.
func TestInitProducerIDAtExhaustedEpoch(t *testing.T) {
	h := newHarness(t)
	pid, _ := h.mustInit("tx")
	h.s.mu.Lock()
	h.s.txns["tx"].epoch = maxEpoch
	h.s.mu.Unlock()
	npid, nepoch := h.mustInit("tx")
	require.NotEqual(t, pid, npid)
	require.Zero(t, nepoch)
	h.load()
	m := h.state("tx")
	require.Equal(t, npid, m.producerID)
	require.Equal(t, int16(0), m.epoch)
}

// The next transaction's first AddPartitionsToTxn, arriving while the
// previous transaction's markers are still being written, is held until
// they are (instead of answering CONCURRENT_TRANSACTIONS at once); after
// settleWait it is answered CONCURRENT_TRANSACTIONS.
func TestAddPartitionsWaitsForTheMarkers(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	h.add("tx", pid, epoch, tp("t", 0))
	h.refuse.Store(true)
	end := h.end("tx", pid, epoch, true)
	require.Nil(t, end.GetError())
	h.awaitState("tx", kmsg.TransactionStatePrepareCommit)

	start := time.Now()
	require.Equal(t, errs.ConcurrentTransactions, code(h.add("tx", pid, end.GetProducerEpoch(), tp("t", 1)).GetError()))
	require.GreaterOrEqual(t, time.Since(start), settleWait)

	done := make(chan *txnv1.AddPartitionsToTxnResponse, 1)
	go func() { done <- h.add("tx", pid, end.GetProducerEpoch(), tp("t", 1)) }()
	select {
	case <-done:
		t.Fatal("answered while the markers were still being written")
	case <-time.After(100 * time.Millisecond):
	}
	h.refuse.Store(false)
	resp := <-done
	require.Nil(t, resp.GetError())
	m := h.state("tx")
	require.Equal(t, kmsg.TransactionStateOngoing, m.state)
	require.Equal(t, map[topicPartition]bool{{"t", 1}: true}, m.partitions)
}
