package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/errs"
	"github.com/sluice-io/sluice/libs/record"
)

// OffsetReset says where a consumer starts when it has no valid position
// (auto.offset.reset).
type OffsetReset int

// Reset policies.
const (
	// ResetLatest starts at the end: only records produced from now on.
	ResetLatest OffsetReset = iota
	// ResetEarliest starts at the log start.
	ResetEarliest
	// ResetNone fails instead.
	ResetNone
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Reset is auto.offset.reset. Default ResetLatest.
	Reset OffsetReset
	// PartitionMaxBytes bounds one chunk of one partition
	// (max.partition.fetch.bytes). Default 1 MiB.
	PartitionMaxBytes int
	// DecompressLimit caps one batch's decompressed size. Default
	// record.DefaultDecompressLimit.
	DecompressLimit int
}

// ConsumedRecord is a record read from a partition.
type ConsumedRecord struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Timestamp   time.Time
	Key, Value  []byte
	Headers     []record.Header
}

// TruncationError reports that a partition's log was truncated below the
// consumer's position after a leader change (KIP-320): records it consumed
// from Offset on were lost. The consumer has moved its position to Offset.
type TruncationError struct {
	Topic     string
	Partition int32
	// Offset is where the logs diverged.
	Offset int64
}

func (e *TruncationError) Error() string {
	return fmt.Sprintf("%s-%d: the log was truncated at offset %d below this consumer's position after a leader change", e.Topic, e.Partition, e.Offset)
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Consumer reads assigned partitions from their leaders over long-lived
// fetch streams: new records are pushed as soon as they are committed. It
// checks leader epochs on every fetch and detects log truncation. It is safe
// for concurrent use, but Poll is meant for one goroutine.
type Consumer struct {
	c   *Client
	cfg ConsumerConfig
	md  *metaCache

	mu        sync.Mutex
	positions map[TopicPartition]*position
	gen       int // bumped on every assignment change; streams of older generations stop
	notify    chan struct{}

	out    chan fetched
	cancel context.CancelFunc
	done   chan struct{}
}

type position struct {
	offset    int64 // next offset to return; -1 until resolved
	lastEpoch int32 // leader epoch of the last record returned, -1 if none
	paused    bool
}

// fetched is one chunk of records (or an error) from a stream of one
// assignment generation.
type fetched struct {
	gen     int
	records []*ConsumedRecord
	err     error
}

// NewConsumer returns a consumer with no assignment.
func (c *Client) NewConsumer(cfg ConsumerConfig) *Consumer {
	if cfg.PartitionMaxBytes == 0 {
		cfg.PartitionMaxBytes = 1 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Consumer{
		c: c, cfg: cfg, md: newMetaCache(c), positions: map[TopicPartition]*position{},
		// Up to 64 fetched chunks wait for Poll; streams pause beyond that.
		notify: make(chan struct{}, 1), out: make(chan fetched, 64), cancel: cancel, done: make(chan struct{}),
	}
	go func() {
		defer close(k.done)
		k.run(ctx)
	}()
	return k
}

// Assign sets the partitions to read. Partitions that stay keep their
// positions; new ones start per the reset policy unless Seek names one.
func (k *Consumer) Assign(tps ...TopicPartition) {
	k.mu.Lock()
	next := map[TopicPartition]*position{}
	for _, tp := range tps {
		if p, ok := k.positions[tp]; ok {
			next[tp] = p
		} else {
			next[tp] = &position{offset: -1, lastEpoch: -1}
		}
	}
	k.positions = next
	k.gen++
	k.mu.Unlock()
	k.kick()
}

// AssignTopic assigns every partition of a topic.
func (k *Consumer) AssignTopic(ctx context.Context, topic string) error {
	n, err := k.md.partitions(ctx, topic, time.Now())
	if err != nil {
		return err
	}
	tps := make([]TopicPartition, n)
	for i := range tps {
		tps[i] = TopicPartition{topic, int32(i)}
	}
	k.Assign(tps...)
	return nil
}

// Seek sets the next offset to read of an assigned partition.
func (k *Consumer) Seek(tp TopicPartition, offset int64) {
	k.mu.Lock()
	if p, ok := k.positions[tp]; ok {
		p.offset, p.lastEpoch = offset, -1
		k.gen++
	}
	k.mu.Unlock()
	k.kick()
}

// Position returns the next offset Poll will return for a partition (-1
// while unresolved).
func (k *Consumer) Position(tp TopicPartition) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.positions[tp]; ok {
		return p.offset
	}
	return -1
}

func (k *Consumer) kick() {
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

// Poll returns the next records, waiting until some arrive or ctx ends
// (then it returns what it has, possibly nothing, and ctx's error). A
// *TruncationError is returned alone, once, when a partition's log was
// truncated under the consumer.
func (k *Consumer) Poll(ctx context.Context) ([]*ConsumedRecord, error) {
	for {
		select {
		case f := <-k.out:
			if f.err != nil {
				return nil, f.err
			}
			if recs := k.accept(f); len(recs) > 0 {
				k.traceConsume(ctx, recs)
				return recs, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// accept drops records from streams of an older assignment (before a
// Seek or reassignment) and records already returned, and advances
// positions.
func (k *Consumer) accept(f fetched) []*ConsumedRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.gen != k.gen {
		return nil
	}
	out := f.records[:0]
	for _, r := range f.records {
		p, ok := k.positions[TopicPartition{r.Topic, r.Partition}]
		if !ok || p.offset >= 0 && r.Offset < p.offset {
			continue
		}
		p.offset, p.lastEpoch = r.Offset+1, r.LeaderEpoch
		out = append(out, r)
	}
	return out
}

// RecordContext returns ctx carrying the trace context a producer put in a
// record's headers (W3C traceparent), so processing the record can be a
// span of the producer's trace, or link to it.
func RecordContext(ctx context.Context, r *ConsumedRecord) context.Context {
	carrier := propagation.MapCarrier{}
	for _, h := range r.Headers {
		if h.Key == "traceparent" || h.Key == "tracestate" {
			carrier[h.Key] = string(h.Value)
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// traceConsume records a "consume" span for records returned by Poll,
// linked to the spans that produced them.
func (k *Consumer) traceConsume(ctx context.Context, recs []*ConsumedRecord) {
	tel := k.c.cfg.Telemetry
	if tel == nil || len(recs) == 0 {
		return
	}
	var links []trace.Link
	for _, r := range recs {
		if sc := trace.SpanContextFromContext(RecordContext(context.Background(), r)); sc.IsValid() && len(links) < 128 {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if len(links) == 0 {
		return
	}
	_, span := tel.Tracer("client").Tracer("github.com/sluice-io/sluice/libs/client").Start(ctx, "consume",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attribute.Int("records", len(recs))))
	span.End()
}

// Close stops fetching.
func (k *Consumer) Close() {
	k.cancel()
	<-k.done
}

// run keeps one fetch stream per leader node for the assigned partitions,
// restarting them when the assignment, a position (Seek) or a leader
// changes.
func (k *Consumer) run(ctx context.Context) {
	var (
		cancelStreams context.CancelFunc = func() {}
		wg            sync.WaitGroup
		restart       = make(chan struct{}, 1)
	)
	defer func() {
		cancelStreams()
		wg.Wait()
	}()
	for {
		cancelStreams()
		wg.Wait()
		sctx, cancel := context.WithCancel(ctx)
		cancelStreams = cancel
		gen, byLeader, retry := k.plan(sctx)
		for addr, parts := range byLeader {
			wg.Go(func() {
				if err := k.stream(sctx, gen, addr, parts); err != nil && sctx.Err() == nil {
					select {
					case restart <- struct{}{}:
					default:
					}
				}
			})
		}
		var wait <-chan time.Time
		if retry {
			wait = time.After(200 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.notify:
		case <-restart:
			time.Sleep(50 * time.Millisecond) // let metadata settle after a failover
		case <-wait:
		}
	}
}

// streamPart is one partition of a fetch stream, with its starting point.
type streamPart struct {
	tp        TopicPartition
	offset    int64
	lastEpoch int32
	epoch     *int32
}

// plan resolves positions and groups partitions by leader. retry is set
// when some partition could not be placed (no leader yet).
func (k *Consumer) plan(ctx context.Context) (int, map[string][]streamPart, bool) {
	k.mu.Lock()
	gen := k.gen
	tps := make([]TopicPartition, 0, len(k.positions))
	for tp := range k.positions {
		tps = append(tps, tp)
	}
	k.mu.Unlock()
	out := map[string][]streamPart{}
	retry := false
	for _, tp := range tps {
		if _, err := k.md.partitions(ctx, tp.Topic, time.Now()); err != nil {
			retry = true
			continue
		}
		l, ok := k.md.leader(tp.Topic, tp.Partition)
		if !ok {
			k.md.refreshSoon(tp.Topic)
			retry = true
			continue
		}
		k.mu.Lock()
		p, ok := k.positions[tp]
		var off int64
		var last int32
		if ok {
			off, last = p.offset, p.lastEpoch
		}
		k.mu.Unlock()
		if !ok {
			continue
		}
		if off < 0 {
			resolved, err := k.resetOffset(ctx, tp, l.addr)
			if err != nil {
				k.deliver(ctx, fetched{gen: gen, err: err})
				retry = true
				continue
			}
			k.mu.Lock()
			if p.offset < 0 {
				p.offset = resolved
			}
			off = p.offset
			k.mu.Unlock()
		}
		epoch := l.epoch
		out[l.addr] = append(out[l.addr], streamPart{tp: tp, offset: off, lastEpoch: last, epoch: &epoch})
	}
	return gen, out, retry
}

// resetOffset finds the starting offset for the reset policy.
func (k *Consumer) resetOffset(ctx context.Context, tp TopicPartition, addr string) (int64, error) {
	if k.cfg.Reset == ResetNone {
		return 0, errs.New(errs.OffsetOutOfRange, "%s-%d has no position and auto.offset.reset is none; Seek first", tp.Topic, tp.Partition)
	}
	spec := storagev1.OffsetSpec_OFFSET_SPEC_LATEST
	if k.cfg.Reset == ResetEarliest {
		spec = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
	}
	conn, err := k.c.Conn(addr)
	if err != nil {
		return 0, err
	}
	resp, err := storagev1.NewStorageServiceClient(conn).ListOffsets(ctx, &storagev1.ListOffsetsRequest{
		Partitions: []*storagev1.ListOffsetsPartition{{Topic: tp.Topic, Partition: tp.Partition, Spec: spec}},
	})
	if err != nil {
		return 0, err
	}
	res := resp.GetResults()[0]
	if e := errs.FromProto(res.GetError()); e != nil {
		return 0, e
	}
	return res.GetOffset(), nil
}

// stream reads partitions from one leader until the stream fails or a
// partition needs attention (a new leader, truncation, a reset).
func (k *Consumer) stream(ctx context.Context, gen int, addr string, parts []streamPart) error {
	conn, err := k.c.Conn(addr)
	if err != nil {
		return err
	}
	req := &storagev1.FetchRequest{Follow: true, Format: storagev1.RecordFormat_RECORD_FORMAT_BATCHES, MaxWaitMs: 500}
	byTP := map[TopicPartition]streamPart{}
	for _, p := range parts {
		fp := &storagev1.FetchPartition{Topic: p.tp.Topic, Partition: p.tp.Partition, FetchOffset: p.offset,
			CurrentLeaderEpoch: p.epoch, PartitionMaxBytes: int32(k.cfg.PartitionMaxBytes)}
		if p.lastEpoch >= 0 {
			le := p.lastEpoch
			fp.LastFetchedEpoch = &le
		}
		req.Partitions = append(req.Partitions, fp)
		byTP[p.tp] = p
	}
	stream, err := storagev1.NewStorageServiceClient(conn).Fetch(ctx, req, grpc.ForceCodecV2(chunkCodec))
	if err != nil {
		return err
	}
	return k.receive(ctx, gen, stream, byTP)
}

func (k *Consumer) receive(ctx context.Context, gen int, stream grpc.ServerStreamingClient[storagev1.FetchResponse], parts map[TopicPartition]streamPart) error {
	var it record.Iterator
	it.DecompressLimit = k.cfg.DecompressLimit
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		tp := TopicPartition{resp.GetTopic(), resp.GetPartition()}
		if e := errs.FromProto(resp.GetError()); e != nil {
			return k.partitionError(ctx, gen, tp, e)
		}
		if d := resp.GetDivergingEpoch(); d != nil {
			k.mu.Lock()
			p, ok := k.positions[tp]
			truncated := ok && d.GetEndOffset() < p.offset
			if ok {
				p.offset, p.lastEpoch = min(p.offset, d.GetEndOffset()), -1
			}
			k.mu.Unlock()
			if truncated {
				k.deliver(ctx, fetched{gen: gen, err: &TruncationError{Topic: tp.Topic, Partition: tp.Partition, Offset: d.GetEndOffset()}})
			}
			return errors.New("log diverged; restarting the fetch")
		}
		start := parts[tp].offset
		var recs []*ConsumedRecord
		var block []ConsumedRecord // records are allocated in blocks, not one by one
		it.Reset(resp.GetBatches())
		for it.Next() {
			b := it.Batch()
			if b.Attributes.Control() {
				continue
			}
			r := it.Record()
			if r.Offset < start {
				continue
			}
			if len(block) == cap(block) {
				block = make([]ConsumedRecord, 0, 256)
			}
			block = append(block, ConsumedRecord{
				Topic: tp.Topic, Partition: tp.Partition, Offset: r.Offset, LeaderEpoch: b.PartitionLeaderEpoch,
				Timestamp: time.UnixMilli(r.Timestamp), Key: r.Key, Value: r.Value, Headers: r.Headers,
			})
			cr := &block[len(block)-1]
			if b.Attributes.Codec() != record.CodecNone {
				// Decompressed records live in the iterator's reused
				// buffer; uncompressed ones point into this chunk's own
				// buffer, which nothing reuses.
				cr.Key, cr.Value, cr.Headers = cloneNil(r.Key), cloneNil(r.Value), cloneHeaders(r.Headers)
			} else if len(r.Headers) > 0 {
				cr.Headers = append([]record.Header(nil), r.Headers...)
			}
			recs = append(recs, cr)
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("%s-%d: decoding fetched batches: %w", tp.Topic, tp.Partition, err)
		}
		if len(recs) > 0 {
			if !k.deliver(ctx, fetched{gen: gen, records: recs}) {
				return ctx.Err()
			}
		}
	}
}

// partitionError handles a partition's fetch error: refresh leadership, or
// reset the position when it fell out of the log.
func (k *Consumer) partitionError(ctx context.Context, gen int, tp TopicPartition, e *errs.Error) error {
	switch {
	case e.Code == errs.OffsetOutOfRange:
		if k.cfg.Reset == ResetNone {
			k.deliver(ctx, fetched{gen: gen, err: e})
		}
		k.mu.Lock()
		if p, ok := k.positions[tp]; ok {
			p.offset, p.lastEpoch = -1, -1
		}
		k.mu.Unlock()
	case e.Leader != nil && e.Leader.GetLeaderAddress() != "":
		k.md.hint(tp.Topic, tp.Partition, e.Leader)
	default:
		k.md.refreshSoon(tp.Topic)
	}
	return e
}

// deliver hands records to Poll, waiting while the buffer is full.
func (k *Consumer) deliver(ctx context.Context, f fetched) bool {
	select {
	case k.out <- f:
		return true
	case <-ctx.Done():
		return false
	}
}

func cloneNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func cloneHeaders(hs []record.Header) []record.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]record.Header, len(hs))
	for i, h := range hs {
		out[i] = record.Header{Key: h.Key, Value: cloneNil(h.Value)}
	}
	return out
}
