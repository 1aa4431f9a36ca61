package storagenode

import (
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpcmd "google.golang.org/grpc/metadata"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

const defaultProduceTimeout = 30 * time.Second

// partition finds a replica this node hosts, or explains where the
// partition is: NOT_LEADER_OR_FOLLOWER naming the leader when it lives
// elsewhere, UNKNOWN_TOPIC_OR_PARTITION when it does not exist.
func (r *StorageNode) partition(topic string, p int32) (*replica.Partition, error) {
	if part, ok := r.replicas.Get(replica.TP{Topic: topic, Partition: p}); ok {
		return r.awaitRole(part), nil
	}
	img := r.deps.Metadata.Load()
	t, ok := img.Topics[topic]
	if !ok {
		return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", topic)
	}
	ps, ok := img.Partition(topic, p)
	if !ok {
		return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; %d does not exist", topic, len(t.Partitions), p)
	}
	if slices.Contains(ps.GetReplicas(), r.replicas.NodeID()) {
		// Metadata already places a replica here, but the replica manager
		// applies it after the cache: a request right after a topic is
		// created would be told this node does not lead, and a Kafka
		// client would wait for its next metadata refresh (5 s in
		// franz-go) to learn nothing new. Wait for the replica instead.
		if part, ok := r.awaitReplica(replica.TP{Topic: topic, Partition: p}); ok {
			return r.awaitRole(part), nil
		}
	}
	return nil, errs.New(errs.NotLeaderOrFollower, "node %d hosts no replica of %s-%d; node %d leads it", r.replicas.NodeID(), topic, p, ps.GetLeaderId()).
		WithLeader(&edpb.LeaderHint{Topic: topic, Partition: p, LeaderId: ps.GetLeaderId(), LeaderEpoch: ps.GetLeaderEpoch(), LeaderAddress: img.Address(ps.GetLeaderId())})
}

// replicaOpenWait bounds how long a request waits for a replica that
// metadata places on this node to be opened.
const replicaOpenWait = time.Second

// awaitReplica waits, at most replicaOpenWait, for the replica manager to
// open a replica.
func (r *StorageNode) awaitReplica(tp replica.TP) (*replica.Partition, bool) {
	timer := time.NewTimer(replicaOpenWait)
	defer timer.Stop()
	for {
		changed := r.replicas.Changed() // before looking, so no change is missed
		if part, ok := r.replicas.Get(tp); ok {
			return part, true
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, false
		case <-r.replicas.Stopping():
			return nil, false
		}
	}
}

// awaitRole waits, at most replicaOpenWait, for a replica just opened to
// learn its role (leader epoch -1 until then): it is visible as soon as it
// is open, before the replica manager applies its state, and would answer
// NOT_LEADER_OR_FOLLOWER naming no leader meanwhile.
func (r *StorageNode) awaitRole(part *replica.Partition) *replica.Partition {
	if _, _, epoch, _, _ := part.FollowerState(); epoch >= 0 {
		return part
	}
	timer := time.NewTimer(replicaOpenWait)
	defer timer.Stop()
	for {
		changed := part.Changed()
		if _, _, epoch, _, _ := part.FollowerState(); epoch >= 0 {
			return part
		}
		select {
		case <-changed:
		case <-timer.C:
			return part
		case <-r.replicas.Stopping():
			return part
		}
	}
}

func acksOf(a storagev1.Acks) replica.Acks {
	switch a {
	case storagev1.Acks_ACKS_NONE:
		return replica.AcksNone
	case storagev1.Acks_ACKS_LEADER:
		return replica.AcksLeader
	default:
		return replica.AcksAll
	}
}

// batchesOf returns the batch bytes of a produce partition, building one
// batch from plain records (those without a timestamp get the time now()
// tells).
func batchesOf(pp *storagev1.ProducePartition, now func() time.Time) ([]byte, error) {
	if b := pp.GetBatches(); b != nil {
		return b, nil
	}
	codec := record.Codec(0)
	if c := pp.GetCompression(); c > commonv1.Compression_COMPRESSION_NONE {
		codec = record.Codec(c - 1)
	}
	bld := record.NewBuilder(codec)
	if pr := pp.GetProducer(); pr != nil {
		bld.SetProducer(pr.GetProducerId(), int16(pr.GetProducerEpoch()), pr.GetBaseSequence())
		bld.SetTransactional(pr.GetTransactional())
	}
	nowMs := now().UnixMilli()
	for _, rec := range pp.GetRecords().GetRecords() {
		ts := rec.GetTimestampMs()
		if ts == 0 {
			ts = nowMs
		}
		hs := make([]record.Header, len(rec.GetHeaders()))
		for i, h := range rec.GetHeaders() {
			hs[i] = record.Header{Key: h.GetKey(), Value: h.GetValue()}
		}
		if err := bld.Append(&record.Record{Timestamp: ts, Key: rec.Key, Value: rec.Value, Headers: hs}); err != nil {
			return nil, err
		}
	}
	return bld.Build()
}

// pending is one partition's append waiting for its acknowledgement.
type pending struct {
	res    *storagev1.ProducePartitionResult
	part   *replica.Partition
	append storage.AppendResult
	epoch  int32
	// span is the "replicate" span of a traced append, registered as it
	// was appended; done unregisters it.
	span trace.Span
	done func()
}

// abandon ends the spans of appends nobody will wait for.
func abandon(waits []pending) {
	for _, w := range waits {
		if w.span != nil {
			w.done()
			w.span.End()
		}
	}
}

// appendAll appends every partition of a request in order and returns
// what is left to wait for. Results of partitions that failed are final.
func (r *StorageNode) appendAll(ctx context.Context, req *storagev1.ProduceRequest) (*storagev1.ProduceResponse, []pending) {
	acks := acksOf(req.GetAcks())
	out := &storagev1.ProduceResponse{Results: make([]*storagev1.ProducePartitionResult, len(req.GetPartitions()))}
	var waits []pending
	span := trace.SpanFromContext(ctx)
	traced := r.tracesReplication(ctx, acks)
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Write, authz.Topic)
	for i, pp := range req.GetPartitions() {
		res := &storagev1.ProducePartitionResult{Topic: pp.GetTopic(), Partition: pp.GetPartition(), BaseOffset: -1, LogAppendTimeMs: -1}
		out.Results[i] = res
		// Authorized before the topic is looked up, so a caller without
		// access learns nothing about which topics exist.
		err := r.authorizeProduceTopic(ctx, &topics, pp.GetTopic())
		var part *replica.Partition
		var w pending
		if err == nil {
			part, err = r.partition(pp.GetTopic(), pp.GetPartition())
		}
		if err == nil {
			var batches []byte
			if batches, err = batchesOf(pp, r.deps.Clock()); err == nil {
				var ar storage.AppendResult
				var epoch int32
				if metadata.CoordinatorRole(pp.GetTopic()) != "" {
					ar, epoch, err = r.appendInternal(ctx, part, pp, req.GetCoordinator(), batches, acks)
				} else if err = r.verifyTxn(ctx, part, pp, req.GetTransactionalId(), batches); err == nil {
					if traced {
						var carrier propagation.MapCarrier
						_, w.span, carrier = r.startReplicateSpan(ctx, pp.GetTopic(), pp.GetPartition())
						ar, epoch, w.done, err = part.AppendTraced(batches, acks, pp.CurrentLeaderEpoch, record.FromClient, w.span, carrier)
						if err != nil {
							w.span.SetStatus(otelcodes.Error, err.Error())
							w.span.End()
							w.span = nil
						}
					} else {
						ar, epoch, err = part.Append(batches, acks, pp.CurrentLeaderEpoch, record.FromClient)
					}
				}
				if err == nil && ar.Duplicate {
					r.duplicateBatches.Add(ctx, 1)
				}
				if err == nil {
					r.producedBytes.Add(ctx, int64(ar.Bytes))
					r.producedRecords.Add(ctx, ar.Records)
					res.BaseOffset, res.LogAppendTimeMs, res.LogStartOffset = ar.FirstOffset, ar.LogAppendTime, ar.LogStartOffset
					if span.IsRecording() {
						span.AddEvent("appended", trace.WithAttributes(attribute.String("topic", pp.GetTopic()),
							attribute.Int("partition", int(pp.GetPartition())), attribute.Int64("offset", ar.FirstOffset),
							attribute.Int("records", int(ar.Records)), attribute.Int("leader_epoch", int(epoch))))
					}
					w.res, w.part, w.append, w.epoch = res, part, ar, epoch
					if w.span != nil {
						w.span.SetAttributes(attribute.Int64("last_offset", ar.LastOffset))
					}
					waits = append(waits, w)
				}
			}
		}
		if err != nil {
			res.Error = errs.ItemError(err)
		}
	}
	if acks == replica.AcksNone {
		for _, w := range waits {
			w.res.BaseOffset = -1
		}
		return out, nil
	}
	return out, waits
}

// awaitAll waits for every pending append's acknowledgement concurrently.
// For a traced acks=all produce each partition's wait is a "replicate"
// span: followers' appends join it, and it records when each caught up.
func (r *StorageNode) awaitAll(ctx context.Context, acks replica.Acks, waits []pending) {
	if len(waits) == 0 {
		return
	}
	traced := r.tracesReplication(ctx, acks)
	var wg sync.WaitGroup
	for i, w := range waits {
		one := func() {
			wctx := ctx
			switch {
			case w.span != nil:
				// The request's context, which the caller may have
				// replaced since appending, with the span the append began.
				wctx = trace.ContextWithSpan(ctx, w.span)
				defer func() {
					w.done()
					w.span.End()
				}()
			case traced:
				// Appends to internal topics register after the append.
				var span trace.Span
				var carrier propagation.MapCarrier
				wctx, span, carrier = r.startReplicateSpan(ctx, w.res.GetTopic(), w.res.GetPartition())
				span.SetAttributes(attribute.Int64("last_offset", w.append.LastOffset))
				done := w.part.TraceAppend(w.append.LastOffset, span, carrier)
				defer func() {
					done()
					span.End()
				}()
			}
			if err := w.part.AwaitAck(wctx, w.append, w.epoch, acks); err != nil {
				w.res.Error = errs.ItemError(err)
				trace.SpanFromContext(wctx).SetStatus(otelcodes.Error, err.Error())
			}
		}
		if i == len(waits)-1 {
			one() // the last (often the only) one waits here
			continue
		}
		wg.Go(one)
	}
	wg.Wait()
}

// tracesReplication reports whether an append of a request in ctx gets a
// "replicate" span: acks=all, spans exported, and the request sampled.
func (r *StorageNode) tracesReplication(ctx context.Context, acks replica.Acks) bool {
	return acks == replica.AcksAll && r.deps.Telemetry != nil && r.deps.Telemetry.Exporting() &&
		trace.SpanFromContext(ctx).SpanContext().IsSampled()
}

// It also returns the span's context as a carrier, which followers'
// appends of the traced offsets continue.
func (r *StorageNode) startReplicateSpan(ctx context.Context, topic string, partition int32) (context.Context, trace.Span, propagation.MapCarrier) {
	ctx, span := r.tracer.Start(ctx, "replicate", trace.WithAttributes(attribute.String("topic", topic), attribute.Int("partition", int(partition))))
	carrier := propagation.MapCarrier{}
	r.deps.Telemetry.Propagator.Inject(ctx, carrier)
	return ctx, span, carrier
}

// requestSpan starts the span of one produce request, continuing the
// trace the request carries (on a stream, gRPC metadata covers the whole
// stream, not each request).
func (r *StorageNode) requestSpan(ctx context.Context, req *storagev1.ProduceRequest) (context.Context, trace.Span) {
	if tc := req.GetTraceContext(); len(tc) > 0 && r.deps.Telemetry != nil {
		ctx = r.deps.Telemetry.Propagator.Extract(ctx, propagation.MapCarrier(tc))
	}
	return r.tracer.Start(ctx, "produce", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("acks", req.GetAcks().String()), attribute.Int("partitions", len(req.GetPartitions()))))
}

func produceTimeout(req *storagev1.ProduceRequest) time.Duration {
	if req.GetTimeoutMs() > 0 {
		return time.Duration(req.GetTimeoutMs()) * time.Millisecond
	}
	return defaultProduceTimeout
}

// Produce appends each partition's batches and answers at the requested
// acknowledgement level.
func (r *StorageNode) Produce(ctx context.Context, req *storagev1.ProduceRequest) (*storagev1.ProduceResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, produceTimeout(req))
	defer cancel()
	if err := r.authorizeProduce(ctx, req); err != nil {
		return nil, err
	}
	ctx, span := r.requestSpan(ctx, req)
	defer span.End()
	start := time.Now()
	out, waits := r.appendAll(ctx, req)
	var throttle time.Duration
	if principal, clientID, ok := quotaClient(ctx); ok && r.deps.Quotas != nil {
		throttle = r.recordProduce(principal, clientID, req, time.Since(start))
	}
	r.awaitAll(ctx, acksOf(req.GetAcks()), waits)
	if throttle > 0 {
		out.ThrottleTimeMs = throttleMs(throttle)
		_ = grpc.SetHeader(ctx, grpcmd.Pairs(ThrottleHeader, strconv.Itoa(int(out.ThrottleTimeMs)))) // fails only if the call ended
		hold(ctx, throttle)
	}
	return out, nil
}

func validateStreamRequest(r *storagev1.ProduceStreamRequest) error {
	if r.GetRequest() == nil {
		return errs.Invalid(errs.InvalidRequest, "request", "is missing")
	}
	return validateProduce(r.GetRequest())
}

// maxPipelined bounds the requests of one stream waiting for their
// acknowledgement; the stream stops reading beyond it (backpressure).
const maxPipelined = 256

// streamFuture is one request of a ProduceStream waiting to be answered.
type streamFuture struct {
	id   uint64
	resp *storagev1.ProduceResponse
	err  *edpb.Error
	done bool
}

// streamAnswers answers a stream's requests in the order they arrived.
// Whoever completes the oldest unanswered request sends it and every
// completed one behind it, so an acks=1 request is answered by the
// goroutine that appended it, with no hand-off to another goroutine (each
// costs a wakeup, and on a busy machine a wakeup can wait milliseconds for
// a CPU).
type streamAnswers struct {
	stream grpc.BidiStreamingServer[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]

	mu     sync.Mutex
	space  *sync.Cond // signalled when the queue shrinks or the stream fails
	queue  []*streamFuture
	err    error // the first Send failure
	closed bool  // the handler returned: Send is no longer allowed
}

// add queues a request, waiting while maxPipelined are unanswered.
func (a *streamAnswers) add(f *streamFuture) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.queue) >= maxPipelined && a.err == nil {
		a.space.Wait()
	}
	if a.err != nil {
		return a.err
	}
	a.queue = append(a.queue, f)
	return nil
}

// complete marks a request answered and sends what is now in order.
func (a *streamAnswers) complete(f *streamFuture) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f.done = true
	sent := 0
	for sent < len(a.queue) && a.queue[sent].done && a.err == nil && !a.closed {
		h := a.queue[sent]
		if err := a.stream.Send(&storagev1.ProduceStreamResponse{RequestId: h.id, Response: h.resp, Error: h.err}); err != nil {
			a.err = err
			break
		}
		a.queue[sent] = nil
		sent++
	}
	if sent > 0 {
		a.queue = a.queue[sent:]
	}
	if sent > 0 || a.err != nil {
		a.space.Broadcast()
	}
}

// drain waits until every queued request is answered or the stream
// failed; the client half-closed and awaits its last answers.
func (a *streamAnswers) drain() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.queue) > 0 && a.err == nil {
		a.space.Wait()
	}
	return a.err
}

// close forbids further sends: the handler is returning.
func (a *streamAnswers) close() {
	a.mu.Lock()
	a.closed = true
	a.err = cmp.Or(a.err, context.Canceled)
	a.space.Broadcast()
	a.mu.Unlock()
}

// ProduceStream appends requests in the order they arrive and answers them
// in the same order, while many wait for their acknowledgements at once:
// a pipelined producer's requests share fsyncs and replication round trips.
func (r *StorageNode) ProduceStream(stream grpc.BidiStreamingServer[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]) error {
	ctx := stream.Context()
	answers := &streamAnswers{stream: stream}
	answers.space = sync.NewCond(&answers.mu)
	defer answers.close()
	// A stopping node ends the stream once what it accepted is answered
	// (grpcx.EndStreams); the producer resends the rest to the new leader.
	grpcx.OnStop(ctx, func() { _ = answers.drain() }) // a failed stream has nothing left to answer
	var in produceIn
	defer in.Release()
	principal, clientID, quotaOn := quotaClient(ctx)
	quotaOn = quotaOn && r.deps.Quotas != nil
	var throttle time.Duration
	for {
		in.Release()
		// A client over its quota: its next request waits.
		hold(ctx, throttle)
		throttle = 0
		err := stream.RecvMsg(&in)
		if errors.Is(err, io.EOF) {
			return answers.drain()
		}
		if grpcx.IsStopping(err) {
			_ = answers.drain() // the stream ends with err either way
			return err
		}
		if err != nil {
			return err
		}
		req := &in.msg
		if verr := validateStreamRequest(req); verr != nil {
			// A bad request is answered with its error; the stream goes on.
			f := &streamFuture{id: req.GetRequestId(), err: errs.ItemError(verr)}
			if err := answers.add(f); err != nil {
				return err
			}
			answers.complete(f)
			continue
		}
		preq := req.GetRequest()
		if aerr := r.authorizeProduce(ctx, preq); aerr != nil {
			// Refused as a whole (transactional id): answered like a bad
			// request, the stream goes on.
			f := &streamFuture{id: req.GetRequestId(), err: errs.ItemError(aerr)}
			if err := answers.add(f); err != nil {
				return err
			}
			answers.complete(f)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, produceTimeout(preq))
		rctx, span := r.requestSpan(rctx, preq)
		start := time.Now()
		resp, waits := r.appendAll(rctx, preq)
		if quotaOn {
			throttle = r.recordProduce(principal, clientID, preq, time.Since(start))
		}
		resp.ThrottleTimeMs = throttleMs(throttle)
		id := req.GetRequestId()
		in.Release() // the batches are in the log now
		f := &streamFuture{id: id, resp: resp}
		if err := answers.add(f); err != nil {
			abandon(waits)
			span.End()
			cancel()
			return err
		}
		acks := acksOf(preq.GetAcks())
		if acks != replica.AcksAll || len(waits) == 0 {
			// Nothing to wait for: answer here.
			span.End()
			cancel()
			answers.complete(f)
			continue
		}
		go func() {
			defer cancel()
			r.awaitAll(rctx, acks, waits)
			span.End()
			answers.complete(f)
		}()
	}
}
