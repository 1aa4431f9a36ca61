package client

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// seqNode is an in-process leader of topic "t" (seqParts partitions) that
// checks producer sequences as the storage nodes do: per partition and
// producer id the epoch and the last five batches; a retry of one of them
// is answered with its original offset, a gap with
// OUT_OF_ORDER_SEQUENCE_NUMBER, an unknown producer id is accepted at any
// sequence. A fault hook chooses answers, so the tests can fail a request
// of their choice; real storage nodes cannot be made to. It answers
// requests in order, holding each answer until a few more requests have
// arrived, so several are in flight at once as on a busy network.
type seqNode struct {
	metadatav1.UnimplementedMetadataServiceServer
	storagev1.UnimplementedStorageServiceServer

	// hold: answers wait until this many requests are unanswered (or
	// holdFor passes).
	hold    int
	holdFor time.Duration
	// telemetry is the client's (nil: none).
	telemetry *Telemetry
	// fault, when set, is asked about each batch before it is checked;
	// a non-nil error is the answer and nothing is appended; append
	// appends it first, as if only the answer were lost.
	fault func(n int, part int32, h record.BatchHeader) (err *errs.Error, appendFirst bool)
	// maxMessageBytes, when set, refuses larger batches as a topic's
	// max.message.bytes does.
	maxMessageBytes int
	tooLarge        int // batches refused for maxMessageBytes

	mu        sync.Mutex
	logs      map[int32][]string // record values per partition, in offset order
	producers map[int32]map[int64]*seqState
	batches   int // batches received, the fault hook's n
	maxQueued int // most requests unanswered at once
	sent      []sentBatch
}

const seqParts = 2

type seqState struct {
	epoch int16
	last  []seqEntry // the last five, oldest first
}

type seqEntry struct {
	first, last int32
	base        int64
}

// sentBatch is one batch as the node received it.
type sentBatch struct {
	part  int32
	pid   int64
	epoch int16
	seq   int32
	count int32
}

func newSeqNode() *seqNode {
	return &seqNode{hold: 5, holdFor: 20 * time.Millisecond, logs: map[int32][]string{}, producers: map[int32]map[int64]*seqState{}}
}

func (f *seqNode) GetMetadata(_ context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp := &metadatav1.GetMetadataResponse{Brokers: []*commonv1.Broker{{Id: 1, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "node1", Port: 1}}}}}
	for _, name := range req.GetTopics() {
		ti := &metadatav1.TopicInfo{Name: name}
		for p := range int32(seqParts) {
			ti.Partitions = append(ti.Partitions, &commonv1.PartitionState{Topic: name, Partition: p, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}})
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

func (f *seqNode) ProduceStream(stream grpc.BidiStreamingServer[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]) error {
	reqs := make(chan *storagev1.ProduceStreamRequest, 64)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				close(reqs)
				return
			}
			reqs <- req
		}
	}()
	var queue []*storagev1.ProduceStreamRequest
	for {
		if len(queue) == 0 {
			req, ok := <-reqs
			if !ok {
				if err := <-recvErr; !errors.Is(err, io.EOF) {
					return err
				}
				return nil
			}
			queue = append(queue, req)
		}
		// Hold the answers until more requests arrive, briefly.
		deadline := time.After(f.holdFor)
	gather:
		for len(queue) < f.hold {
			select {
			case req, ok := <-reqs:
				if !ok {
					break gather
				}
				queue = append(queue, req)
			case <-deadline:
				break gather
			}
		}
		f.mu.Lock()
		f.maxQueued = max(f.maxQueued, len(queue))
		f.mu.Unlock()
		for _, req := range queue {
			resp := f.answer(req.GetRequest())
			if resp == nil {
				return status.Error(codes.Unavailable, "stream cut by the fault hook")
			}
			if err := stream.Send(&storagev1.ProduceStreamResponse{RequestId: req.GetRequestId(), Response: resp}); err != nil {
				return err
			}
		}
		queue = queue[:0]
	}
}

// errCut, returned by a fault hook, cuts the stream instead of answering.
var errCut = errs.New(errs.NodeUnreachable, "cut")

// answer appends a request's batches; nil means cut the stream.
func (f *seqNode) answer(req *storagev1.ProduceRequest) *storagev1.ProduceResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &storagev1.ProduceResponse{}
	cut := false
	for _, p := range req.GetPartitions() {
		res := &storagev1.ProducePartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(), BaseOffset: -1}
		out.Results = append(out.Results, res)
		data := p.GetBatches()
		h, ok := record.ParseBatchHeader(data)
		if !ok || h.Size() != len(data) {
			res.Error = errs.New(errs.CorruptMessage, "expected one batch per partition").Proto()
			continue
		}
		if _, err := record.CheckBatch(data, record.ValidateOptions{}); err != nil {
			// A stale CRC (producer fields stamped without it) fails the
			// batch for good, and so the test.
			res.Error = errs.From(err).Proto()
			continue
		}
		n := f.batches
		f.batches++
		f.sent = append(f.sent, sentBatch{part: p.GetPartition(), pid: h.ProducerID, epoch: h.ProducerEpoch, seq: h.BaseSequence, count: h.RecordCount})
		if f.maxMessageBytes > 0 && len(data) > f.maxMessageBytes {
			f.tooLarge++
			res.Error = errs.New(errs.MessageTooLarge, "batch of %d bytes exceeds max.message.bytes %d", len(data), f.maxMessageBytes).Proto()
			continue
		}
		if f.fault != nil {
			if e, appendFirst := f.fault(n, p.GetPartition(), h); e != nil {
				if appendFirst {
					f.appendLocked(p.GetPartition(), data, h)
				}
				if e == errCut {
					cut = true
					continue
				}
				res.Error = e.Proto()
				continue
			}
		}
		base, e := f.appendLocked(p.GetPartition(), data, h)
		if e != nil {
			res.Error = e.Proto()
			continue
		}
		res.BaseOffset = base
	}
	if cut {
		return nil
	}
	return out
}

// appendLocked checks a batch's sequence and appends it, or returns the
// offset of its earlier copy.
func (f *seqNode) appendLocked(part int32, data []byte, h record.BatchHeader) (int64, *errs.Error) {
	if f.producers[part] == nil {
		f.producers[part] = map[int64]*seqState{}
	}
	st := f.producers[part][h.ProducerID]
	last := h.LastSequence()
	if h.ProducerID >= 0 && st != nil {
		switch {
		case h.ProducerEpoch < st.epoch:
			return -1, errs.New(errs.InvalidProducerEpoch, "epoch %d is older than %d", h.ProducerEpoch, st.epoch)
		case h.ProducerEpoch > st.epoch:
			if h.BaseSequence != 0 {
				return -1, errs.New(errs.OutOfOrderSequenceNumber, "a new epoch starts at sequence 0, got %d", h.BaseSequence)
			}
			st.epoch, st.last = h.ProducerEpoch, nil
		default:
			for _, e := range st.last {
				if e.first == h.BaseSequence && e.last == last {
					return e.base, nil // a retry: its original offset
				}
			}
			if prev := st.last[len(st.last)-1].last; h.BaseSequence != addSeq(prev, 1) {
				return -1, errs.New(errs.OutOfOrderSequenceNumber, "sequence %d after %d", h.BaseSequence, prev)
			}
		}
	}
	if h.ProducerID >= 0 && st == nil {
		st = &seqState{epoch: h.ProducerEpoch}
		f.producers[part][h.ProducerID] = st
	}
	base := int64(len(f.logs[part]))
	var it record.Iterator
	it.Reset(data)
	for it.Next() {
		f.logs[part] = append(f.logs[part], string(it.Record().Value))
	}
	if it.Err() != nil {
		return -1, errs.New(errs.CorruptMessage, "%v", it.Err())
	}
	if st != nil {
		st.last = append(st.last, seqEntry{first: h.BaseSequence, last: last, base: base})
		if len(st.last) > 5 {
			st.last = st.last[1:]
		}
	}
	return base, nil
}

// appendedLocked reports whether the log holds the batch already (a retry
// the leader would answer with its offsets).
func (f *seqNode) appendedLocked(part int32, h record.BatchHeader) bool {
	st := f.producers[part][h.ProducerID]
	if st == nil || st.epoch != h.ProducerEpoch {
		return false
	}
	for _, e := range st.last {
		if e.first == h.BaseSequence && e.last == h.LastSequence() {
			return true
		}
	}
	return false
}

func (f *seqNode) log(part int32) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.logs[part]...)
}

func (f *seqNode) sentBatches() []sentBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentBatch(nil), f.sent...)
}

// startSeqNode serves f in process and returns a producer whose producer
// ids come from a counter (ids counts the calls).
func startSeqNode(t *testing.T, f *seqNode, cfg ProducerConfig) (p *Producer, ids *atomic.Int64) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	metadatav1.RegisterMetadataServiceServer(srv, f)
	storagev1.RegisterStorageServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	c, err := New(Config{Bootstrap: []string{"node1:1"}, Telemetry: f.telemetry, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	require.NoError(t, err)
	if cfg.MaxBatchBytes == 0 {
		// The tests count on a batch every BatchBytes: batches that grow
		// while requests are in flight would leave too few to fail.
		cfg.MaxBatchBytes = cfg.BatchBytes
	}
	p = c.NewProducer(cfg)
	ids = &atomic.Int64{}
	p.initID = func(ctx context.Context) (int64, int16, error) {
		return 1000 + ids.Add(1), 0, nil
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = c.Close()
		srv.Stop()
		wg.Wait()
	})
	return p, ids
}

// requireSettled checks the producer's bookkeeping once every record has
// its result: nothing in flight, outstanding or counted as a resend.
func requireSettled(t *testing.T, p *Producer) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Zero(t, p.inflight)
	for tp, pp := range p.parts {
		require.Zero(t, pp.inflight, "%v", tp)
		require.Zero(t, pp.idem.resend, "%v", tp)
		require.Empty(t, pp.idem.outstanding, "%v", tp)
		require.Empty(t, pp.ready, "%v", tp)
		require.Empty(t, pp.held, "%v: no callbacks held", tp)
		require.Equal(t, pp.sealed, pp.settled, "%v: every sealed record settled", tp)
	}
}

// produceNumbered produces records "0".."n-1" to partition part, one
// batch every `per` records (BatchBytes is set small), and returns their
// results in produce order.
func produceNumbered(t *testing.T, p *Producer, part int32, n int) []Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*Record, n)
	for i := range recs {
		recs[i] = &Record{Topic: "t", Partition: part, Value: []byte(strconv.Itoa(i))}
	}
	res, _ := p.ProduceSync(ctx, recs...)
	return res
}

// numbers returns "0".."n-1" without the skipped ones.
func numbers(n int, skip func(i int) bool) []string {
	var out []string
	for i := range n {
		if skip == nil || !skip(i) {
			out = append(out, strconv.Itoa(i))
		}
	}
	return out
}

// Each partition's batches are numbered from 0 by records, under one
// producer id fetched once before the first send, and carry it in their
// headers.
func TestIdempotentProducerSequencesPerPartition(t *testing.T) {
	f := newSeqNode()
	f.hold = 1
	p, ids := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, Linger: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*Record
	for i := range 300 {
		recs = append(recs, &Record{Topic: "t", Partition: int32(i % seqParts), Value: []byte(strconv.Itoa(i))})
	}
	_, err := p.ProduceSync(ctx, recs...)
	require.NoError(t, err)
	require.EqualValues(t, 1, ids.Load(), "one producer id for the producer")
	next := map[int32]int32{}
	perPart := map[int32]int{}
	for _, b := range f.sentBatches() {
		require.EqualValues(t, 1001, b.pid)
		require.EqualValues(t, 0, b.epoch)
		require.Equal(t, next[b.part], b.seq, "partition %d: sequences follow record counts", b.part)
		next[b.part] += b.count
		perPart[b.part]++
	}
	for part := range int32(seqParts) {
		require.EqualValues(t, 150, next[part], "partition %d", part)
		require.Greater(t, perPart[part], 5, "partition %d: several batches", part)
		require.Equal(t, numbers(300, func(i int) bool { return int32(i%seqParts) != part }), f.log(part))
	}
}

// The second of five requests in flight fails with a retriable error (not
// appended, or appended with its answer lost): the three after it are
// refused as out of order, and all are resent in order, so the log holds
// every record once, in produce order, at the offsets reported.
func TestIdempotentProducerKeepsOrderAcrossRetry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         *errs.Error
		appendFirst bool
		at          int // the batch that fails, counted from 0 as they arrive
	}{
		{"refused", errs.New(errs.NotLeaderOrFollower, "not the leader"), false, 1},
		{"answer lost", errs.New(errs.RequestTimedOut, "replication timed out"), true, 1},
		{"stream cut after append", errCut, true, 1},
		{"stream cut before append", errCut, false, 1},
		// The leader does not know the producer id before the first batch
		// is appended, and would take a second one at any sequence.
		{"first batch refused", errs.New(errs.NotEnoughReplicas, "too few in-sync replicas"), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSeqNode()
			var failed atomic.Int32
			f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
				if n == tc.at && failed.Add(1) == 1 {
					return tc.err, tc.appendFirst
				}
				return nil, false
			}
			p, ids := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, Linger: 5 * time.Millisecond, RetryBackoff: time.Millisecond})
			const n = 400
			res := produceNumbered(t, p, 0, n)
			for i, r := range res {
				require.NoError(t, r.Err, "record %d", i)
				require.EqualValues(t, i, r.Offset, "record %d is acknowledged at its place", i)
			}
			require.Equal(t, numbers(n, nil), f.log(0), "every record once, in order")
			requireSettled(t, p)
			require.EqualValues(t, 1, ids.Load(), "no new producer id for a retriable error")
			f.mu.Lock()
			require.GreaterOrEqual(t, f.maxQueued, 5, "five requests were in flight")
			f.mu.Unlock()
			// After the failure the batches go again from the failed
			// one, in sequence order, and the new ones after them.
			sent := f.sentBatches()
			j := tc.at + 1
			for j < len(sent) && sent[j].seq != sent[tc.at].seq {
				j++
			}
			require.Less(t, j, len(sent), "the failed batch was resent")
			var after []int32
			for _, b := range sent[j:] {
				after = append(after, b.seq)
			}
			require.IsIncreasing(t, after, "from the failed batch on, sequences are sent in order")
		})
	}
}

// A batch refused for good after it was sent (OUT_OF_ORDER_SEQUENCE_NUMBER
// with nothing earlier outstanding, UNKNOWN_PRODUCER_ID, a fatal error)
// fails its records with the leader's error; the partition takes a new
// producer id and starts again at sequence 0, and the batches that were in
// flight behind it go again under it, in order. The other partition keeps
// its producer id.
func TestIdempotentProducerNewIDAfterFatalBatchError(t *testing.T) {
	for _, code := range []errs.Code{errs.OutOfOrderSequenceNumber, errs.UnknownProducerID, errs.InvalidRecord} {
		t.Run(code.String(), func(t *testing.T) {
			f := newSeqNode()
			meters := &meterRecorder{counts: map[string]int64{}}
			f.telemetry = &Telemetry{MeterProvider: meters}
			var failedSeq atomic.Int32
			failedSeq.Store(-1)
			f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
				// The second batch of partition 0: the first is answered
				// before it, so nothing earlier is outstanding.
				if part == 0 && h.BaseSequence > 0 && failedSeq.CompareAndSwap(-1, h.BaseSequence) {
					return errs.New(code, "refused by the test"), false
				}
				return nil, false
			}
			p, ids := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, Linger: 5 * time.Millisecond, RetryBackoff: time.Millisecond})
			const n = 400
			other := produceNumbered(t, p, 1, 50)
			for _, r := range other {
				require.NoError(t, r.Err)
			}
			res := produceNumbered(t, p, 0, n)
			var failed []int
			off := int64(0)
			for i, r := range res {
				if r.Err != nil {
					require.True(t, errs.Is(r.Err, code), "record %d: %v", i, r.Err)
					failed = append(failed, i)
					continue
				}
				require.Equal(t, off, r.Offset, "record %d", i)
				off++
			}
			require.NotEmpty(t, failed)
			first := int(failedSeq.Load())
			require.Equal(t, first, failed[0], "the refused batch's records fail")
			require.Equal(t, failed[len(failed)-1]-first+1, len(failed), "only one batch fails")
			require.Equal(t, numbers(n, func(i int) bool { return i >= failed[0] && i <= failed[len(failed)-1] }), f.log(0),
				"every other record once, in order")
			require.EqualValues(t, 2, ids.Load(), "a new producer id after the failure")
			require.EqualValues(t, 1, meters.get("sluice.client.producer.sequence_resets"))
			requireSettled(t, p)

			// Partition 0 after the failure: the new id, from sequence 0
			// on, without a gap.
			var next int32
			newID := false
			for _, b := range f.sentBatches() {
				if b.part != 0 || b.pid != 1002 {
					continue
				}
				newID = true
				require.Equal(t, next, b.seq)
				next += b.count
			}
			require.True(t, newID)
			require.EqualValues(t, n-first-len(failed), next, "the records after the failed batch went under the new id")

			// Partition 1 keeps its producer id and sequences.
			more := produceNumbered(t, p, 1, 10)
			require.NoError(t, more[9].Err)
			sent := f.sentBatches()
			last := sent[len(sent)-1]
			require.EqualValues(t, 1, last.part)
			require.EqualValues(t, 1001, last.pid)
			require.NotZero(t, last.seq)
		})
	}
}

// A batch that was sent and then ran out of delivery time (its outcome
// unknown) fails with REQUEST_TIMED_OUT; the partition takes a new
// producer id and the later batches go under it, in order.
func TestIdempotentProducerNewIDAfterDeliveryTimeout(t *testing.T) {
	f := newSeqNode()
	f.hold = 1
	var stuck atomic.Int32
	stuck.Store(-1)
	f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
		// The second batch never gets through: its stream is cut each
		// time, before it is appended.
		if h.BaseSequence > 0 && h.ProducerID == 1001 && (stuck.CompareAndSwap(-1, h.BaseSequence) || stuck.Load() == h.BaseSequence) {
			return errCut, false
		}
		return nil, false
	}
	p, ids := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, Linger: 5 * time.Millisecond, RetryBackoff: 20 * time.Millisecond,
		RetryBackoffMax: 50 * time.Millisecond, DeliveryTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 100
	results := make([]Result, n)
	var wg sync.WaitGroup
	firstTen := make(chan struct{})
	var firstTenLeft atomic.Int32
	firstTenLeft.Store(10)
	for i := range n {
		if i == 10 {
			// The first two batches (records 0-5 and 6-9) are sent; the
			// rest come once both have their outcome (the second fails
			// at its delivery timeout), so their own timeout is a whole
			// one later whatever the machine's load.
			<-firstTen
		}
		wg.Add(1)
		require.NoError(t, p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte(strconv.Itoa(i))}, func(r Result) {
			results[i] = r
			if i < 10 && firstTenLeft.Add(-1) == 0 {
				close(firstTen)
			}
			wg.Done()
		}))
		if i == 9 {
			require.NoError(t, p.Flush(ctx))
		}
	}
	wg.Wait()
	first := int(stuck.Load())
	require.Positive(t, first)
	var failed []int
	for i, r := range results {
		if r.Err != nil {
			require.True(t, errs.Is(r.Err, errs.RequestTimedOut), "record %d: %v", i, r.Err)
			failed = append(failed, i)
		}
	}
	var want []int
	for i := first; i < 10; i++ {
		want = append(want, i)
	}
	require.Equal(t, want, failed, "the stuck batch's records fail")
	require.Equal(t, numbers(n, func(i int) bool { return i >= first && i < 10 }), f.log(0))
	requireSettled(t, p)
	require.EqualValues(t, 2, ids.Load())
}

// Without a producer id no batch is sent; when getting one keeps failing,
// records fail at their delivery timeout naming the error.
func TestIdempotentProducerWaitsForProducerID(t *testing.T) {
	f := newSeqNode()
	p, _ := startSeqNode(t, f, ProducerConfig{DeliveryTimeout: 500 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond})
	var calls atomic.Int32
	p.initID = func(context.Context) (int64, int16, error) {
		calls.Add(1)
		return -1, -1, errs.New(errs.CoordinatorNotAvailable, "no transaction coordinator yet")
	}
	res := produceNumbered(t, p, 0, 3)
	for _, r := range res {
		require.True(t, errs.Is(r.Err, errs.RequestTimedOut), "got %v", r.Err)
		require.ErrorContains(t, r.Err, "getting a producer id")
		require.ErrorContains(t, r.Err, "COORDINATOR_NOT_AVAILABLE")
	}
	require.Empty(t, f.sentBatches(), "nothing sent without a producer id")
	require.Greater(t, calls.Load(), int32(1), "retried")
}

// Without idempotence batches carry no producer id and one request per
// partition is in flight.
func TestProducerWithoutIdempotence(t *testing.T) {
	f := newSeqNode()
	p, ids := startSeqNode(t, f, ProducerConfig{DisableIdempotence: true, Acks: AcksLeader, BatchBytes: 200})
	require.Equal(t, 1, p.cfg.MaxInFlight)
	res := produceNumbered(t, p, 0, 100)
	require.NoError(t, res[99].Err)
	require.Zero(t, ids.Load())
	for _, b := range f.sentBatches() {
		require.EqualValues(t, -1, b.pid)
		require.EqualValues(t, -1, b.seq)
	}
	f.mu.Lock()
	require.Equal(t, 1, f.maxQueued)
	f.mu.Unlock()
}

func TestProducerConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  ProducerConfig
		want string
	}{
		{ProducerConfig{Acks: AcksLeader}, "Acks: the idempotent producer needs acks all, got 1; set DisableIdempotence"},
		{ProducerConfig{Acks: AcksNone}, "got 0"},
		{ProducerConfig{MaxInFlight: 6}, "MaxInFlight: the idempotent producer allows at most 5 requests in flight, got 6"},
		{ProducerConfig{MaxInFlight: -1, DisableIdempotence: true}, "MaxInFlight: must not be negative"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			err := tc.cfg.Validate()
			require.True(t, errs.Is(err, errs.InvalidConfig), "got %v", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, ok := range []ProducerConfig{{}, {Acks: AcksAll, MaxInFlight: 5}, {DisableIdempotence: true, Acks: AcksNone, MaxInFlight: 10}} {
		require.NoError(t, ok.Validate(), "%+v", ok)
	}
	cfg := ProducerConfig{}
	cfg.defaults()
	require.Equal(t, 5, cfg.MaxInFlight)
	require.Equal(t, AcksAll, cfg.Acks)

	// The producer of a bad configuration says why on Produce.
	c, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	p := c.NewProducer(ProducerConfig{Acks: AcksLeader})
	defer func() { _ = p.Close(context.Background()) }()
	err = p.Produce(context.Background(), &Record{Topic: "t"}, nil)
	require.True(t, errs.Is(err, errs.InvalidConfig), "got %v", err)
}

// Sequences wrap at MaxInt32 to 0.
func TestAddSeqWraps(t *testing.T) {
	require.EqualValues(t, 0, addSeq(1<<31-1, 1))
	require.EqualValues(t, 4, addSeq(1<<31-3, 7))
	require.EqualValues(t, 12, addSeq(2, 10))
}

// Random faults on every batch (refusals, lost answers, cut streams before
// and after the append, fatal refusals) never make the producer write a
// record twice or out of order: each partition's log holds exactly the
// acknowledged records, in produce order, at the offsets reported, and a
// record that failed is not in it.
func TestIdempotentProducerRandomFaults(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(strconv.Itoa(int(seed)), func(t *testing.T) {
			f := newSeqNode()
			rng := rand.New(rand.NewPCG(seed, 42))
			faults := map[string]int{}
			f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
				// Called with f.mu held: rng and faults need no lock. A
				// leader refuses for good only what it has not appended:
				// the retry of an appended batch is found in its window.
				x := rng.IntN(100)
				if x >= 19 && x < 21 && f.appendedLocked(part, h) {
					x = 100
				}
				switch {
				case x < 8:
					faults["refused"]++
					return errs.New(errs.NotLeaderOrFollower, "not the leader"), false
				case x < 13:
					faults["answer lost"]++
					return errs.New(errs.RequestTimedOut, "replication timed out"), true
				case x < 16:
					faults["cut before append"]++
					return errCut, false
				case x < 19:
					faults["cut after append"]++
					return errCut, true
				case x < 20:
					faults["fatal"]++
					return errs.New(errs.InvalidRecord, "refused by the test"), false
				case x < 21:
					faults["out of order"]++
					return errs.New(errs.OutOfOrderSequenceNumber, "refused by the test"), false
				}
				return nil, false
			}
			p, ids := startSeqNode(t, f, ProducerConfig{BatchBytes: 300, Linger: time.Millisecond, RetryBackoff: time.Millisecond,
				RetryBackoffMax: 5 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const n = 3000
			recs := make([]*Record, n)
			for i := range recs {
				recs[i] = &Record{Topic: "t", Partition: int32(i % seqParts), Value: []byte(strconv.Itoa(i))}
			}
			res, _ := p.ProduceSync(ctx, recs...)
			acked := map[int32][]string{}
			failed := 0
			for i, r := range res {
				if r.Err != nil {
					require.NotEqual(t, errs.RequestTimedOut, errs.CodeOf(r.Err), "record %d: %v", i, r.Err)
					failed++
					continue
				}
				require.EqualValues(t, len(acked[r.Partition]), r.Offset, "record %d: offsets follow the acknowledged records", i)
				acked[r.Partition] = append(acked[r.Partition], strconv.Itoa(i))
			}
			for part := range int32(seqParts) {
				require.Equal(t, acked[part], f.log(part), "partition %d: the log is the acknowledged records, in order", part)
			}
			requireSettled(t, p)
			f.mu.Lock()
			t.Logf("faults %v; %d records failed; %d producer ids", faults, failed, ids.Load())
			f.mu.Unlock()
		})
	}
}

// A producer id refused for want of an ACL fails the waiting records at
// once with the server's message instead of retrying until their delivery
// timeout; a record produced after an administrator granted the ACL gets
// an id and is delivered.
func TestIdempotentProducerFailsFastWhenRefusedAnID(t *testing.T) {
	f := newSeqNode()
	p, _ := startSeqNode(t, f, ProducerConfig{DeliveryTimeout: time.Minute, RetryBackoffMax: 50 * time.Millisecond})
	var granted atomic.Bool
	var calls atomic.Int32
	p.initID = func(context.Context) (int64, int16, error) {
		calls.Add(1)
		if !granted.Load() {
			return -1, -1, errs.New(errs.ClusterAuthorizationFailed, "User:alice may not IdempotentWrite Cluster \"kafka-cluster\"")
		}
		return 7, 0, nil
	}
	start := time.Now()
	res := produceNumbered(t, p, 0, 3)
	for _, r := range res {
		require.True(t, errs.Is(r.Err, errs.ClusterAuthorizationFailed), "got %v", r.Err)
		require.ErrorContains(t, r.Err, "may not IdempotentWrite")
	}
	require.Less(t, time.Since(start), 30*time.Second, "failed at once, not at the one-minute delivery timeout")
	require.Empty(t, f.sentBatches())

	granted.Store(true)
	// A record produced once the refusal's backoff (50 ms) ended asks
	// again and is delivered.
	require.Eventually(t, func() bool {
		return produceNumbered(t, p, 1, 1)[0].Err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, calls.Load(), int32(2), "asked again after the refusal")
}

// After a producer id is refused, records fail with the refusal without
// asking again until a backoff ends: RetryBackoff, doubling with each
// refusal in a row up to RetryBackoffMax, and reset by an id granted.
// Without it a refused producer asked once per record.
func TestIdempotentProducerBacksOffAfterRefusedID(t *testing.T) {
	f := newSeqNode()
	p, _ := startSeqNode(t, f, ProducerConfig{DeliveryTimeout: time.Minute, RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: 400 * time.Millisecond})
	var clock atomic.Int64 // the backoff's clock, advanced by hand
	p.mu.Lock()
	p.idClock = func() time.Time { return time.Unix(0, clock.Load()) }
	p.mu.Unlock()
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	var granted atomic.Bool
	var calls atomic.Int32
	p.initID = func(context.Context) (int64, int16, error) {
		calls.Add(1)
		if !granted.Load() {
			return -1, -1, errs.New(errs.ClusterAuthorizationFailed, "User:alice may not IdempotentWrite Cluster \"kafka-cluster\"")
		}
		return 7, 0, nil
	}
	refused := func(want int32, msg string) {
		t.Helper()
		for _, r := range produceNumbered(t, p, 0, 1) {
			require.True(t, errs.Is(r.Err, errs.ClusterAuthorizationFailed), "%s: got %v", msg, r.Err)
		}
		require.Equal(t, want, calls.Load(), msg)
	}
	refused(1, "the first record asks")
	for range 5 {
		refused(1, "records during the backoff do not ask")
	}
	advance(99 * time.Millisecond)
	refused(1, "99 ms into a 100 ms backoff")
	advance(time.Millisecond)
	refused(2, "after 100 ms")
	advance(199 * time.Millisecond)
	refused(2, "the second backoff is 200 ms")
	advance(time.Millisecond)
	refused(3, "after 200 ms")
	advance(400 * time.Millisecond)
	refused(4, "after 400 ms")
	advance(399 * time.Millisecond)
	refused(4, "the backoff stays at RetryBackoffMax")
	res := produceNumbered(t, p, 0, 1)
	require.ErrorContains(t, res[0].Err, "refused 4 times in a row; the producer asks again for records produced after 400ms")
	advance(time.Millisecond)
	refused(5, "after 400 ms")

	granted.Store(true)
	advance(400 * time.Millisecond)
	for _, r := range produceNumbered(t, p, 0, 2) {
		require.NoError(t, r.Err)
	}
	require.EqualValues(t, 6, calls.Load())
	p.mu.Lock()
	require.Zero(t, p.idRefusals, "an id granted resets the backoff")
	p.mu.Unlock()
}
