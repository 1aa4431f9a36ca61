package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
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
	// APITimeout is default.api.timeout.ms: AssignTopic waits at most this
	// long for metadata while no node can answer, and a partition whose
	// leader keeps failing with retriable errors (unreachable, not ready,
	// being elected) has Poll return the last error once it has failed
	// for this long. Retrying goes on meanwhile and after. Default 60 s.
	APITimeout time.Duration
	// ReadCommitted is isolation.level=read_committed: only records below
	// the last stable offset are read, and records of aborted transactions
	// are dropped. The default reads every record below the high
	// watermark (read_uncommitted), as Kafka's consumer does.
	ReadCommitted bool
	// RecordsValidUntilNextPoll lets the consumer reuse the memory that
	// fetched records arrive in: the Key, Value and header values of the
	// records a Poll returns stay valid only until the next Poll (copy
	// what must outlive it). Without it every fetched byte lands in fresh
	// memory that the garbage collector must reclaim, which at hundreds
	// of MB/s costs more CPU than reading the records. Header keys and
	// the records of compressed batches are copies either way.
	RecordsValidUntilNextPoll bool
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
	// gen is bumped by every Assign and Seek. Streams of older
	// generations are ended; until then their records are dropped and
	// their answers move no position (owns).
	gen    int
	notify chan struct{}
	// live are the fetch streams open or being opened, for watch.
	live map[*liveStream]struct{}

	out   chan fetched
	ended chan streamEnd // partitions leaving fetch streams, for run
	// held is the chunk buffer of the records the last Poll returned,
	// recycled by the next (RecordsValidUntilNextPoll).
	heldMu sync.Mutex
	held   []byte
	cancel context.CancelFunc
	done   chan struct{}
}

type position struct {
	offset    int64 // next offset to return; -1 until resolved
	lastEpoch int32 // leader epoch of the last record returned, -1 if none
	paused    bool
	// undecodable is set when a *DecodeError was returned at offset: the
	// partition is not fetched again until Seek moves it.
	undecodable bool
}

// fetched is one chunk of records (or an error) from a stream of one
// assignment generation.
type fetched struct {
	gen     int
	records []*ConsumedRecord
	err     error
	// tp and next, when next > 0, move tp's position to next even past
	// the records: over markers and aborted transactions' records.
	tp   TopicPartition
	next int64
	// buf is the recycled buffer the records point into, if any
	// (RecordsValidUntilNextPoll).
	buf []byte
}

// NewConsumer returns a consumer with no assignment.
func (c *Client) NewConsumer(cfg ConsumerConfig) *Consumer {
	if cfg.PartitionMaxBytes == 0 {
		cfg.PartitionMaxBytes = 1 << 20
	}
	if cfg.APITimeout == 0 {
		cfg.APITimeout = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Consumer{
		c: c, cfg: cfg, md: newMetaCache(c), positions: map[TopicPartition]*position{},
		// Up to 64 fetched chunks wait for Poll; streams pause beyond that.
		notify: make(chan struct{}, 1), out: make(chan fetched, 64), cancel: cancel, done: make(chan struct{}),
		ended: make(chan streamEnd), live: map[*liveStream]struct{}{},
	}
	go func() {
		defer close(k.done)
		var wg sync.WaitGroup
		wg.Go(func() { k.watch(ctx) })
		k.run(ctx)
		wg.Wait()
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
	n, err := k.md.partitionsWait(ctx, topic, k.cfg.APITimeout)
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
		p.offset, p.lastEpoch, p.undecodable = offset, -1, false
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
	k.hold(nil)
	for {
		select {
		case f := <-k.out:
			if f.err != nil {
				if !k.current(f.gen) {
					continue // about positions a Seek or Assign has replaced
				}
				return nil, f.err
			}
			if recs := k.accept(f); len(recs) > 0 {
				k.hold(f.buf)
				k.traceConsume(ctx, recs)
				return recs, nil
			}
			if f.buf != nil {
				putChunkBuf(f.buf) // none of its records is returned
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// hold recycles the chunk buffer of the records the last Poll returned and
// keeps buf, the current one's, until the next Poll.
func (k *Consumer) hold(buf []byte) {
	k.heldMu.Lock()
	old := k.held
	k.held = buf
	k.heldMu.Unlock()
	if old != nil {
		putChunkBuf(old)
	}
}

func (k *Consumer) current(gen int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return gen == k.gen
}

// owns reports whether a stream or placement of generation gen, which
// placed tp with the position record pos, may still move that position:
// no Seek or Assign has come since, and tp's position is still pos. A
// stream of a replaced generation keeps running until the run loop ends
// it, and its answers (a reset, a truncation) are about a position the
// user may have set anew meanwhile. k.mu must be held.
func (k *Consumer) owns(gen int, tp TopicPartition, pos *position) bool {
	return gen == k.gen && pos != nil && k.positions[tp] == pos
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
	if f.next > 0 {
		// Only from where the chunk started: a chunk of a stream that was
		// placed before a Seek belongs to an older generation and never
		// gets here.
		if p, ok := k.positions[f.tp]; ok && p.offset >= 0 && p.offset < f.next {
			p.offset = f.next
		}
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
	_, span := tel.Tracer("github.com/sluice-io/sluice/libs/client").Start(ctx, "consume",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attribute.Int("records", len(recs))))
	span.End()
}

// Close stops fetching.
func (k *Consumer) Close() {
	k.cancel()
	<-k.done
}

// run keeps fetch streams to the leaders of the assigned partitions. A
// stream that fails affects only its own partitions: they are placed again
// after a backoff, on fresh metadata, while the others keep streaming. A
// new assignment or position (Seek) restarts every stream.
func (k *Consumer) run(ctx context.Context) {
	var (
		sctx                             = ctx
		cancelStreams context.CancelFunc = func() {}
		wg            sync.WaitGroup
		gen           = -1
		placed        map[TopicPartition]bool
		retry         map[TopicPartition]*retryState
		// resolved brings back a leader's starting offsets; only this
		// loop receives, and a generation's lookups all end (or are
		// received) before the next generation begins.
		resolved = make(chan *leaderPlan)
	)
	defer func() {
		cancelStreams()
		wg.Wait()
	}()
	for {
		k.mu.Lock()
		cur := k.gen
		k.mu.Unlock()
		if cur != gen {
			cancelStreams()
			wg.Wait()
			var cancel context.CancelFunc
			sctx, cancel = context.WithCancel(ctx)
			cancelStreams = cancel
			gen, placed, retry = cur, map[TopicPartition]bool{}, map[TopicPartition]*retryState{}
		}
		sc, g := sctx, gen
		start := func(addr string, parts []streamPart) {
			if !k.current(g) {
				// A Seek or Assign came meanwhile: the loop places the
				// partitions again for the new generation.
				return
			}
			for _, p := range parts {
				placed[p.tp] = true
			}
			wg.Go(func() { k.report(sc, k.stream(sc, g, addr, parts)) })
		}
		k.plan(sctx, gen, placed, retry, start, func(lp *leaderPlan) {
			wg.Go(func() {
				lp.offsets = k.resetOffsets(sc, lp.addr, lp.unsetPartitions())
				select {
				case resolved <- lp:
				case <-sc.Done():
				}
			})
		})
		var wake <-chan time.Time
		var timer *time.Timer
		if d, ok := nextRetry(retry, placed, time.Now()); ok {
			timer = time.NewTimer(max(d, time.Millisecond))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-k.notify:
		case e := <-k.ended:
			k.streamEnded(sctx, gen, e, placed, retry)
		case lp := <-resolved:
			k.settle(sctx, gen, lp, placed, retry, start)
		case <-wake:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// retryState is a partition that could not be placed on a stream, or whose
// stream failed: it is placed again at retryAt.
type retryState struct {
	since    time.Time // first failure since the partition was last read
	retryAt  time.Time
	backoff  backoff
	lastErr  error
	reported bool // the failure outlasted APITimeout and Poll returned it
	parked   bool // a non-retriable error went to Poll; wait for Seek or Assign
}

// nextRetry returns how long until the next partition not on a stream is
// due. A placed partition keeps its retry state (its failure clock runs
// until it reads again) but is not waiting: counting it would wake the loop
// every millisecond for as long as its stream lives.
func nextRetry(retry map[TopicPartition]*retryState, placed map[TopicPartition]bool, now time.Time) (time.Duration, bool) {
	var next time.Duration
	found := false
	for tp, r := range retry {
		if r.parked || placed[tp] {
			continue
		}
		if d := r.retryAt.Sub(now); !found || d < next {
			next, found = d, true
		}
	}
	return next, found
}

// settled marks an error that retrying cannot fix even though its code is
// retriable: metadata itself says the topic or partition does not exist.
type settled struct{ error }

func (s settled) Unwrap() error { return s.error }

// failed records a partition's failure. A non-retriable error goes to Poll
// at once and the partition waits for Seek or Assign; a retriable one is
// retried with backoff on fresh metadata, and goes to Poll (once) when it
// has lasted APITimeout (default.api.timeout.ms), so nothing waits
// silently forever.
func (k *Consumer) failed(ctx context.Context, gen int, tp TopicPartition, err error, retry map[TopicPartition]*retryState) {
	now := time.Now()
	r, ok := retry[tp]
	if !ok {
		r = &retryState{since: now}
		retry[tp] = r
	}
	r.lastErr = err
	if errors.As(err, new(settled)) || !errs.IsRetriable(err) {
		r.parked = true
		k.deliver(ctx, fetched{gen: gen, err: err})
		return
	}
	k.md.refreshSoon(tp.Topic)
	r.retryAt = now.Add(r.backoff.next())
	if !r.reported && now.Sub(r.since) >= k.cfg.APITimeout {
		r.reported = true
		k.deliver(ctx, fetched{gen: gen, err: timedOut(fmt.Sprintf("%s-%d: not readable for %v", tp.Topic, tp.Partition, k.cfg.APITimeout), err)})
	}
}

// report hands the run loop partitions that left a stream.
func (k *Consumer) report(ctx context.Context, e streamEnd) {
	if len(e.parts) == 0 {
		return
	}
	select {
	case k.ended <- e:
	case <-ctx.Done():
	}
}

// streamEnd reports partitions that left a fetch stream: one that the
// leader answered with an error (it goes on serving the others), or all
// that were left when the stream ended.
type streamEnd struct {
	parts   []TopicPartition
	addr    string
	started time.Time
	// final is set on the report of the stream's end (not of one dropped
	// partition).
	final bool
	// err ended the whole stream (nil when the server ended it).
	err error
	// failed are the partitions the leader answered with an error.
	failed map[TopicPartition]error
	// served are the partitions that were read without error.
	served map[TopicPartition]bool
}

// streamEnded places a stream's partitions again: at once when they ended
// for a reason already dealt with (a reset, a truncation), after a backoff
// when they failed.
func (k *Consumer) streamEnded(ctx context.Context, gen int, e streamEnd, placed map[TopicPartition]bool, retry map[TopicPartition]*retryState) {
	// A stream that ran for a while read from a working leader, even if it
	// had nothing to send.
	lived := time.Since(e.started) >= time.Second
	if e.err != nil && !errs.IsRetriable(e.err) {
		// One error for the whole stream, not one per partition.
		k.deliver(ctx, fetched{gen: gen, err: e.err})
		for _, tp := range e.parts {
			delete(placed, tp)
			retry[tp] = &retryState{since: time.Now(), lastErr: e.err, parked: true}
		}
		return
	}
	for _, tp := range e.parts {
		delete(placed, tp)
		if lived || e.served[tp] {
			delete(retry, tp)
		}
		err, ok := e.failed[tp]
		switch {
		case !ok && e.err != nil:
			err, ok = e.err, true
		case !ok && e.final:
			// The leader closed the stream without a word: try again
			// after a backoff, not in a tight loop.
			err, ok = errs.New(errs.NodeNotReady, "%s-%d: the leader at %s ended the fetch stream", tp.Topic, tp.Partition, e.addr), true
		}
		if ok && err != nil {
			k.failed(ctx, gen, tp, err, retry)
		} else if r, ok := retry[tp]; ok {
			r.retryAt = time.Time{}
		}
	}
}

// streamPart is one partition of a fetch stream, with its starting point
// and the position record it was placed with.
type streamPart struct {
	tp        TopicPartition
	offset    int64
	lastEpoch int32
	epoch     *int32
	pos       *position
}

// plan places the assigned partitions that are on no stream and due for a
// try. Partitions with a position go to start at once, one stream per
// leader; those without one get a stream of their own when their offsets
// are known. Their starting offsets come from one
// ListOffsets request per leader resolves: plan hands each such leader to
// lookup, which runs the request in the background, and settle finishes
// the placement when it answers. plan never waits on a leader, so one that
// does not answer costs only its own partitions a request deadline, and
// the run loop goes on handling Seeks, ended streams and retries. A
// partition waiting for its offset counts as placed, so it is not placed
// twice. Those it cannot place are recorded in retry. Only the run loop
// touches placed and retry.
func (k *Consumer) plan(ctx context.Context, gen int, placed map[TopicPartition]bool, retry map[TopicPartition]*retryState,
	start func(addr string, parts []streamPart), lookup func(*leaderPlan)) {
	k.mu.Lock()
	var tps []TopicPartition
	for tp := range k.positions {
		if !placed[tp] {
			tps = append(tps, tp)
		}
	}
	k.mu.Unlock()
	now := time.Now()
	byLeader := map[string]*leaderPlan{}
	for _, tp := range tps {
		if r, ok := retry[tp]; ok && (r.parked || now.Before(r.retryAt)) {
			continue
		}
		addr, sp, err := k.place(ctx, tp)
		if err != nil {
			if ctx.Err() == nil {
				k.failed(ctx, gen, tp, err, retry)
			}
			continue
		}
		if addr == "" {
			continue
		}
		lp := byLeader[addr]
		if lp == nil {
			lp = &leaderPlan{addr: addr}
			byLeader[addr] = lp
		}
		if sp.offset < 0 {
			lp.unset = append(lp.unset, sp)
		} else {
			lp.ready = append(lp.ready, sp)
		}
	}
	for _, lp := range byLeader {
		if len(lp.ready) > 0 {
			start(lp.addr, lp.ready)
			lp.ready = nil
		}
		if len(lp.unset) > 0 {
			for _, sp := range lp.unset {
				placed[sp.tp] = true
			}
			lookup(lp)
		}
	}
}

// settle places a leader's partitions once their starting offsets are
// known: each still assigned and unmoved (no Seek or Assign since) starts
// from the offset found, unless its position was set meanwhile; each whose
// lookup failed is retried.
func (k *Consumer) settle(ctx context.Context, gen int, lp *leaderPlan, placed map[TopicPartition]bool, retry map[TopicPartition]*retryState, start func(addr string, parts []streamPart)) {
	var ready []streamPart
	for i, sp := range lp.unset {
		delete(placed, sp.tp)
		res := lp.offsets[i]
		if res.err != nil {
			if ctx.Err() == nil {
				k.failed(ctx, gen, sp.tp, res.err, retry)
			}
			continue
		}
		k.mu.Lock()
		owned := k.owns(gen, sp.tp, sp.pos)
		if owned {
			if sp.pos.offset < 0 {
				sp.pos.offset = res.offset
			}
			sp.offset = sp.pos.offset
		}
		k.mu.Unlock()
		if owned {
			ready = append(ready, sp)
		}
	}
	if len(ready) > 0 {
		start(lp.addr, ready)
	}
}

// leaderPlan is what plan places on one leader: partitions ready to read
// and partitions that wait for their starting offsets (those with a
// negative offset).
type leaderPlan struct {
	addr    string
	ready   []streamPart
	unset   []streamPart
	offsets []resetResult // one per unset partition, once resolved
}

func (lp *leaderPlan) unsetPartitions() []TopicPartition {
	out := make([]TopicPartition, len(lp.unset))
	for i, sp := range lp.unset {
		out[i] = sp.tp
	}
	return out
}

// place finds a partition's leader and its position. An empty address
// means the partition is no longer assigned, or waits for a Seek. A
// partition with no position yet comes back with a negative offset, to be
// resolved by resetOffsets.
func (k *Consumer) place(ctx context.Context, tp TopicPartition) (addr string, sp streamPart, err error) {
	n, err := k.md.partitions(ctx, tp.Topic, time.Now())
	if err != nil {
		if errs.Is(err, errs.UnknownTopicOrPartition) {
			err = settled{err}
		}
		return "", streamPart{}, err
	}
	if tp.Partition >= n || tp.Partition < 0 {
		// The cached count may predate CreatePartitions: ask again first.
		if err := k.md.refresh(ctx, tp.Topic); err != nil {
			return "", streamPart{}, err
		}
		if n, _ = k.md.known(tp.Topic); tp.Partition >= n || tp.Partition < 0 {
			return "", streamPart{}, settled{errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; partition %d does not exist", tp.Topic, n, tp.Partition)}
		}
	}
	l, ok := k.md.leader(tp.Topic, tp.Partition)
	if !ok {
		return "", streamPart{}, errs.New(errs.LeaderNotAvailable, "%s-%d has no leader at the moment", tp.Topic, tp.Partition)
	}
	k.mu.Lock()
	p, ok := k.positions[tp]
	var off int64
	var last int32
	if ok {
		off, last = p.offset, p.lastEpoch
	}
	undecodable := ok && p.undecodable
	k.mu.Unlock()
	if !ok || undecodable {
		return "", streamPart{}, nil
	}
	epoch := l.epoch
	return l.addr, streamPart{tp: tp, offset: off, lastEpoch: last, epoch: &epoch, pos: p}, nil
}

// resetResult is one partition's starting offset, or why it has none.
type resetResult struct {
	offset int64
	err    error
}

// resetOffsets finds the starting offsets of partitions led by addr for
// the reset policy, with one ListOffsets request. The result has one entry
// per partition, in order.
func (k *Consumer) resetOffsets(ctx context.Context, addr string, tps []TopicPartition) []resetResult {
	out := make([]resetResult, len(tps))
	failAll := func(err error) []resetResult {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	if k.cfg.Reset == ResetNone {
		for i, tp := range tps {
			out[i].err = errs.New(errs.OffsetOutOfRange, "%s-%d has no position and auto.offset.reset is none; Seek first", tp.Topic, tp.Partition)
		}
		return out
	}
	spec := storagev1.OffsetSpec_OFFSET_SPEC_LATEST
	if k.cfg.Reset == ResetEarliest {
		spec = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
	}
	// The partitions wait for this call: a leader that drops packets must
	// not hold them for gRPC's connect timeout (20 s), nor for ever.
	ctx, cancel := k.c.withTimeout(ctx)
	defer cancel()
	conn, err := k.c.readyConn(ctx, addr)
	if err != nil {
		return failAll(err)
	}
	req := &storagev1.ListOffsetsRequest{IsolationLevel: k.isolation()}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &storagev1.ListOffsetsPartition{Topic: tp.Topic, Partition: tp.Partition, Spec: spec})
	}
	resp, err := storagev1.NewStorageServiceClient(conn).ListOffsets(ctx, req)
	if err != nil {
		return failAll(err)
	}
	byTP := make(map[TopicPartition]*storagev1.ListOffsetsResult, len(resp.GetResults()))
	for _, r := range resp.GetResults() {
		byTP[TopicPartition{r.GetTopic(), r.GetPartition()}] = r
	}
	for i, tp := range tps {
		r, ok := byTP[tp]
		switch {
		case !ok:
			out[i].err = errs.New(errs.UnknownServerError, "%s-%d: the leader at %s left it out of its ListOffsets answer", tp.Topic, tp.Partition, addr)
		case errs.FromProto(r.GetError()) != nil:
			out[i].err = errs.FromProto(r.GetError())
		default:
			out[i].offset = r.GetOffset()
		}
	}
	return out
}

// stream reads partitions from one leader until the stream fails or every
// partition on it needs attention (a new leader, truncation, a reset); the
// leader drops a partition from the stream when it answers it with an
// error and keeps serving the others.
func (k *Consumer) stream(ctx context.Context, gen int, addr string, parts []streamPart) streamEnd {
	end := streamEnd{addr: addr, started: time.Now(), final: true, failed: map[TopicPartition]error{}, served: map[TopicPartition]bool{}}
	for _, p := range parts {
		end.parts = append(end.parts, p.tp)
	}
	ls := &liveStream{addr: addr, parts: parts}
	ctx, ls.cancel = context.WithCancelCause(ctx)
	defer ls.cancel(nil)
	ls.heard()
	k.mu.Lock()
	k.live[ls] = struct{}{}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.live, ls)
		k.mu.Unlock()
	}()
	conn, err := k.c.Conn(addr)
	if err != nil {
		end.err = err
		return end
	}
	req := &storagev1.FetchRequest{Follow: true, Format: storagev1.RecordFormat_RECORD_FORMAT_BATCHES, MaxWaitMs: 500, IsolationLevel: k.isolation()}
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
	var codec encoding.CodecV2 = chunkCodec
	var pooled *pooledFetchCodec
	if k.cfg.RecordsValidUntilNextPoll {
		pooled = &pooledFetchCodec{fetchCodec: chunkCodec}
		codec = pooled
	}
	stream, err := storagev1.NewStorageServiceClient(conn).Fetch(ctx, req, grpc.ForceCodecV2(codec))
	if err == nil {
		err = k.receive(ctx, gen, stream, pooled, ls, byTP, &end)
	}
	if moved := context.Cause(ctx); ctx.Err() != nil && errs.Is(moved, errs.NotLeaderOrFollower) {
		err = moved // watch ended the stream: place the partitions again
	}
	if !errors.Is(err, io.EOF) {
		end.err = err
	}
	left := end.parts[:0]
	for _, tp := range end.parts {
		if _, gone := end.failed[tp]; !gone {
			left = append(left, tp)
		}
	}
	end.parts = left
	return end
}

// receive delivers a stream's records until it ends (io.EOF once the leader
// has dropped every partition). Per-partition outcomes go to end.
func (k *Consumer) receive(ctx context.Context, gen int, stream grpc.ServerStreamingClient[storagev1.FetchResponse], pooled *pooledFetchCodec,
	ls *liveStream, parts map[TopicPartition]streamPart, end *streamEnd) error {
	var it record.Iterator
	it.DecompressLimit = k.cfg.DecompressLimit
	broken := map[TopicPartition]bool{} // partitions parked on an undecodable batch
	// buf is the pooled buffer of the chunk being read, until it is
	// delivered with the chunk's records.
	var buf []byte
	defer func() {
		if buf != nil {
			putChunkBuf(buf)
		}
	}()
	for {
		if buf != nil {
			putChunkBuf(buf) // nothing delivered points into it
		}
		resp, err := stream.Recv()
		buf = pooled.take()
		if err != nil {
			return err
		}
		ls.heard()
		tp := TopicPartition{resp.GetTopic(), resp.GetPartition()}
		if broken[tp] {
			continue // the rest of its stream lies beyond a batch it cannot read
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			if k.drop(ctx, end, tp, k.partitionError(gen, tp, parts[tp].pos, e)) {
				return io.EOF
			}
			continue
		}
		if d := resp.GetDivergingEpoch(); d != nil {
			k.mu.Lock()
			p := parts[tp].pos
			owned := k.owns(gen, tp, p)
			truncated := owned && d.GetEndOffset() < p.offset
			if owned {
				p.offset, p.lastEpoch = min(p.offset, d.GetEndOffset()), -1
			}
			k.mu.Unlock()
			if truncated {
				k.deliver(ctx, fetched{gen: gen, err: &TruncationError{Topic: tp.Topic, Partition: tp.Partition, Offset: d.GetEndOffset()}})
			}
			// The leader dropped the partition; it is placed again at
			// once from the divergence point.
			if k.drop(ctx, end, tp, nil) {
				return io.EOF
			}
			continue
		}
		end.served[tp] = true
		start := parts[tp].offset
		var recs []*ConsumedRecord
		// Records are allocated in blocks, not one by one, each block no
		// larger than the rest of its batch: a tailing consumer's fetch
		// holds a record or two, and a fixed block of 256 made it allocate
		// ~35 KB per response (the client's GC then set the end-to-end p99).
		var block []ConsumedRecord
		aborted := newAbortFilter(resp.GetAbortedTransactions())
		it.Reset(resp.GetBatches())
		for it.Next() {
			b := it.Batch()
			r := it.Record()
			if b.Attributes.Control() {
				aborted.marker(b, r)
				continue
			}
			if r.Offset < start || aborted.drops(b) {
				continue
			}
			if len(block) == cap(block) {
				block = make([]ConsumedRecord, 0, min(256, it.Left()+1))
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
				if buf != nil {
					// Keys are strings, which must never change.
					for i := range cr.Headers {
						cr.Headers[i].Key = strings.Clone(cr.Headers[i].Key)
					}
				}
			}
			recs = append(recs, cr)
		}
		if it.Err() != nil {
			// Deliver what precedes the bad batch, then a *DecodeError,
			// and park the partition there until Seek.
			recs, bad := undecodableAt(recs, &it)
			if len(recs) > 0 {
				f := fetched{gen: gen, records: recs, buf: buf}
				buf = nil // the records' now, or lost with them
				if !k.deliver(ctx, f) {
					return ctx.Err()
				}
			}
			k.mu.Lock()
			if p := parts[tp].pos; k.owns(gen, tp, p) {
				p.undecodable = true
				if bad < 0 {
					bad = p.offset
				}
			}
			k.mu.Unlock()
			if !k.deliver(ctx, fetched{gen: gen, err: &DecodeError{Topic: tp.Topic, Partition: tp.Partition, Offset: bad, Err: it.Err()}}) {
				return ctx.Err()
			}
			broken[tp] = true
			if k.drop(ctx, end, tp, nil) { // parked by its position, not retried
				return io.EOF
			}
			continue
		}
		if next := resp.GetNextOffset(); len(recs) > 0 || next > start {
			f := fetched{gen: gen, records: recs, tp: tp, next: next}
			if len(recs) > 0 {
				f.buf, buf = buf, nil
			}
			if !k.deliver(ctx, f) {
				return ctx.Err()
			}
		}
	}
}

func (k *Consumer) isolation() commonv1.IsolationLevel {
	if k.cfg.ReadCommitted {
		return commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	return commonv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
}

// abortFilter drops the records of aborted transactions from a
// read_committed chunk, as Kafka's consumer does: the leader lists the
// aborted transactions overlapping the chunk (producer id, first offset);
// from a transaction's first offset on, that producer's transactional
// batches are dropped until its ABORT marker.
type abortFilter struct {
	pending []*storagev1.AbortedTransaction // by first offset, not yet reached
	active  map[int64]bool                  // producers inside an aborted transaction
}

func newAbortFilter(list []*storagev1.AbortedTransaction) *abortFilter {
	if len(list) == 0 {
		return nil
	}
	f := &abortFilter{pending: slices.Clone(list), active: map[int64]bool{}}
	slices.SortFunc(f.pending, func(a, b *storagev1.AbortedTransaction) int {
		return cmp.Compare(a.GetFirstOffset(), b.GetFirstOffset())
	})
	return f
}

// reach starts the aborted transactions that begin at or before offset.
func (f *abortFilter) reach(offset int64) {
	for len(f.pending) > 0 && f.pending[0].GetFirstOffset() <= offset {
		f.active[f.pending[0].GetProducerId()] = true
		f.pending = f.pending[1:]
	}
}

// drops reports whether a data batch belongs to an aborted transaction.
func (f *abortFilter) drops(b *record.BatchHeader) bool {
	if f == nil || !b.Attributes.Transactional() {
		return false
	}
	f.reach(b.LastOffset())
	return f.active[b.ProducerID]
}

// marker ends a producer's aborted transaction at its ABORT marker. The
// transactions begun up to the marker are started first, as Kafka's
// consumer does for every batch: a chunk may begin at the marker itself
// (the previous one ended at the last stable offset, inside the aborted
// transaction), and a transaction started only at the producer's next
// data batch would drop its next transaction's records.
func (f *abortFilter) marker(b *record.BatchHeader, r *record.Record) {
	if f == nil {
		return
	}
	f.reach(b.LastOffset())
	if t, err := record.ParseControlKey(r.Key); err == nil && t == record.ControlAbort {
		delete(f.active, b.ProducerID)
	}
}

// drop reports a partition the leader dropped from the stream (err nil:
// place it again at once), and whether none is left, so the stream can end
// (the leader keeps an empty stream open).
func (k *Consumer) drop(ctx context.Context, end *streamEnd, tp TopicPartition, err error) bool {
	if _, gone := end.failed[tp]; gone {
		return false
	}
	end.failed[tp] = err
	k.report(ctx, streamEnd{parts: []TopicPartition{tp}, started: end.started,
		failed: map[TopicPartition]error{tp: err}, served: map[TopicPartition]bool{tp: end.served[tp]}})
	return len(end.failed) == len(end.parts)
}

// partitionError handles a partition's fetch error and returns what to
// record as its failure (nil: place it again at once). A position that
// fell out of the log is reset by the reset policy, or, without one, is
// the caller's to fix (OFFSET_OUT_OF_RANGE with the valid range); a leader
// hint is applied at once. Only a stream of the current generation resets:
// a stale one's answer is about a position a Seek may have replaced.
func (k *Consumer) partitionError(gen int, tp TopicPartition, pos *position, e *errs.Error) error {
	switch {
	case e.Code == errs.OffsetOutOfRange && k.cfg.Reset != ResetNone:
		k.mu.Lock()
		if k.owns(gen, tp, pos) {
			pos.offset, pos.lastEpoch = -1, -1
		}
		k.mu.Unlock()
		return nil
	case e.Leader != nil && e.Leader.GetLeaderAddress() != "":
		k.md.hint(tp.Topic, tp.Partition, e.Leader)
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
		// The iterator reads records with kmsg's UnsafeReadFrom, so a
		// header key is a string over the decompression buffer too.
		out[i] = record.Header{Key: strings.Clone(h.Key), Value: cloneNil(h.Value)}
	}
	return out
}

// liveStream is a fetch stream, open or being opened, as watch sees it.
type liveStream struct {
	addr   string
	parts  []streamPart
	cancel context.CancelCauseFunc
	// last is when the stream last delivered anything, or began (unix
	// nanoseconds).
	last atomic.Int64
}

func (ls *liveStream) heard() { ls.last.Store(time.Now().UnixNano()) }

// Silent fetch streams are checked against metadata this often (each topic
// is asked for at most once per watchRefresh).
const (
	watchEvery   = 500 * time.Millisecond
	watchSilent  = time.Second
	watchRefresh = time.Second
)

// watch ends fetch streams whose partitions metadata says have moved to
// another leader while the stream heard nothing. A leader that is cut off
// the network (packets dropped, not refused) leaves its streams silent,
// as an idle partition does, and the connection's keepalive notices only
// after 15 s; a stream still being opened to it waits for gRPC's connect
// timeout (20 s). The old leader cannot tell the consumer that it lost the
// partition, so the consumer asks metadata, as the producer does for
// requests that go unanswered. An idle consumer pays for it with one
// metadata request per topic per watchRefresh.
func (k *Consumer) watch(ctx context.Context) {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	asked := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		k.mu.Lock()
		var silent []*liveStream
		for ls := range k.live {
			if now.Sub(time.Unix(0, ls.last.Load())) >= watchSilent {
				silent = append(silent, ls)
			}
		}
		k.mu.Unlock()
		for _, ls := range silent {
			for _, p := range ls.parts {
				tp := p.tp
				// A newer epoch only: metadata from a node that lags must
				// not end a stream placed by a leader hint.
				if l, ok := k.md.leader(tp.Topic, tp.Partition); ok && l.addr != ls.addr && (p.epoch == nil || l.epoch > *p.epoch) {
					ls.cancel(errs.New(errs.NotLeaderOrFollower, "%s-%d: metadata names %s as its leader while the fetch stream to %s is silent", tp.Topic, tp.Partition, l.addr, ls.addr))
					break
				}
				if now.Sub(asked[tp.Topic]) >= watchRefresh {
					asked[tp.Topic] = now
					k.md.refreshSoon(tp.Topic)
				}
			}
		}
		for topic, at := range asked {
			if now.Sub(at) >= time.Minute {
				delete(asked, topic) // a topic no longer read
			}
		}
	}
}
