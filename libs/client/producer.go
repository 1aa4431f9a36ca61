package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// Acks is the acknowledgement level of produced records.
type Acks = storagev1.Acks

// Acknowledgement levels.
const (
	AcksNone   = storagev1.Acks_ACKS_NONE
	AcksLeader = storagev1.Acks_ACKS_LEADER
	AcksAll    = storagev1.Acks_ACKS_ALL
)

// ProducerConfig configures a Producer. Zero values take the documented
// defaults, which follow Kafka's producer.
type ProducerConfig struct {
	// Acks is the acknowledgement level (acks). Default AcksAll.
	Acks Acks
	// Linger is how long a batch waits for more records before it is sent
	// (linger.ms). Default 5 ms.
	Linger time.Duration
	// BatchBytes is the size at which a batch is sealed and sent
	// (batch.size). Default 16 KiB.
	BatchBytes int
	// MaxBatchBytes is the most a batch grows to while its partition
	// cannot send it at once (all MaxInFlight requests unanswered, or
	// sealed batches waiting): records that arrive then join the open
	// batch instead of queueing as one BatchBytes batch after another,
	// so a loaded producer sends fewer, larger batches (fewer requests,
	// appends and fsyncs per byte) while an idle one sends as before, when
	// Linger ends or BatchBytes is reached. Default 1 MiB, at most
	// MaxRequestBytes; it stays under the default max.message.bytes
	// (1,048,588). A batch a topic with a smaller max.message.bytes
	// refuses is split and sent again in order, and that partition stops
	// growing batches (producer_split.go); a smaller value avoids the
	// round trip. Set it to BatchBytes to turn the growth off.
	MaxBatchBytes int
	// MaxRequestBytes bounds one produce request (max.request.size).
	// Default 1 MiB.
	MaxRequestBytes int
	// Compression is the batch codec (compression.type). Default none.
	Compression record.Codec
	// Partitioner chooses partitions for records without one. Default
	// DefaultPartitioner (Kafka-compatible murmur2 for keys, sticky without).
	Partitioner Partitioner
	// RetryBackoff is the first wait before a retry, doubled up to
	// RetryBackoffMax (retry.backoff.ms, retry.backoff.max.ms). Defaults
	// 100 ms and 1 s.
	RetryBackoff, RetryBackoffMax time.Duration
	// DeliveryTimeout bounds the time from Produce to the record's result,
	// retries included (delivery.timeout.ms). Default 2 minutes. When it
	// passes, the record fails with REQUEST_TIMED_OUT naming the last error
	// its batch met.
	DeliveryTimeout time.Duration
	// MaxBlock bounds how long Produce waits for a topic's metadata while
	// no node can answer (max.block.ms); it then fails with
	// REQUEST_TIMED_OUT naming the last error. Default 60 s.
	MaxBlock time.Duration
	// RequestTimeout bounds one produce request (request.timeout.ms).
	// Default 30 s.
	RequestTimeout time.Duration
	// MaxInFlight is the most batches of one partition sent but not yet
	// answered (max.in.flight.requests.per.connection). Default 5 with
	// idempotence, which keeps order across retries with up to 5; 1
	// without, since there a retry may overtake a later batch and reorder
	// records.
	MaxInFlight int
	// DisableIdempotence turns the idempotent producer off
	// (enable.idempotence=false). By default the producer is idempotent,
	// as Kafka's is since 3.0: it takes a producer id from a transaction
	// coordinator before its first send and numbers each partition's
	// batches, so a retry of a batch the leader already appended is not
	// appended again, and order holds across retries (see
	// producer_idem.go for what a caller sees when a batch fails).
	// Idempotence needs Acks AcksAll and MaxInFlight at most 5; other
	// values are a configuration error, as in Kafka.
	DisableIdempotence bool
	// BufferBytes bounds the records waiting to be sent (buffer.memory);
	// Produce blocks while it is full. Default 32 MiB.
	BufferBytes int
	// TransactionalID makes the producer transactional
	// (transactional.id): records are produced in transactions (see
	// txnproducer.go). It needs idempotence.
	TransactionalID string
	// TransactionTimeout is transaction.timeout.ms: the coordinator aborts
	// a transaction open longer. Default 60 s.
	TransactionTimeout time.Duration
}

// Validate reports a configuration that cannot work, as Kafka's producer
// does at construction: idempotence with acks 0 or 1, or with more than 5
// requests in flight. NewProducer returns a producer whose Produce fails
// with this error.
func (c *ProducerConfig) Validate() error {
	if c.MaxInFlight < 0 {
		return errs.Invalid(errs.InvalidConfig, "MaxInFlight", "must not be negative, got %d", c.MaxInFlight)
	}
	if c.DisableIdempotence {
		if c.TransactionalID != "" {
			return errs.Invalid(errs.InvalidConfig, "DisableIdempotence", "a transactional producer (TransactionalID %q) is idempotent; idempotence cannot be turned off", c.TransactionalID)
		}
		return nil
	}
	if c.TransactionTimeout < 0 {
		return errs.Invalid(errs.InvalidConfig, "TransactionTimeout", "must not be negative, got %v", c.TransactionTimeout)
	}
	if c.Acks != storagev1.Acks_ACKS_UNSPECIFIED && c.Acks != AcksAll {
		return errs.Invalid(errs.InvalidConfig, "Acks", "the idempotent producer needs acks all, got %s; set DisableIdempotence to use acks 0 or 1", acksName(c.Acks))
	}
	if c.MaxInFlight > maxIdempotentInFlight {
		return errs.Invalid(errs.InvalidConfig, "MaxInFlight", "the idempotent producer allows at most %d requests in flight, got %d", maxIdempotentInFlight, c.MaxInFlight)
	}
	return nil
}

// acksName spells an acknowledgement level as Kafka's acks config does.
func acksName(a Acks) string {
	switch a {
	case AcksNone:
		return "0"
	case AcksLeader:
		return "1"
	case AcksAll:
		return "all"
	}
	return a.String()
}

func (c *ProducerConfig) defaults() {
	if c.Acks == storagev1.Acks_ACKS_UNSPECIFIED {
		c.Acks = AcksAll
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Millisecond
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 16 << 10
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1 << 20
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
	c.MaxBatchBytes = max(min(c.MaxBatchBytes, c.MaxRequestBytes), c.BatchBytes)
	if c.Partitioner == nil {
		c.Partitioner = &DefaultPartitioner{}
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = time.Second
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 2 * time.Minute
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.MaxBlock == 0 {
		c.MaxBlock = time.Minute
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1
		if !c.DisableIdempotence {
			c.MaxInFlight = maxIdempotentInFlight
		}
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = 32 << 20
	}
}

// Record is a record to produce.
type Record struct {
	Topic string
	// Partition is the target partition, or -1 for the partitioner's choice.
	Partition int32
	// Key and Value: nil is null, distinct from empty.
	Key, Value []byte
	Headers    []record.Header
	// Timestamp; zero means now.
	Timestamp time.Time
}

// Result is the outcome of one produced record.
type Result struct {
	Record    *Record
	Partition int32
	// Offset is the record's offset (-1 with AcksNone or on error).
	Offset int64
	Err    error
}

// Producer sends records in batches. It is safe for concurrent use.
type Producer struct {
	c   *Client
	cfg ProducerConfig
	md  *metaCache
	// cfgErr is the configuration error Produce reports (see Validate).
	cfgErr error
	// idem: the producer is idempotent (producer_idem.go).
	idem    bool
	idemTel idemTelemetry
	// txn is the transaction state of a transactional producer, else nil
	// (txnproducer.go).
	txn *txnState
	// initID gets a producer id and epoch (InitProducerId).
	initID func(ctx context.Context) (int64, int16, error)
	// ctx ends when the producer closes; bg are the goroutines that
	// fetch producer ids.
	ctx context.Context
	bg  sync.WaitGroup

	mu        sync.Mutex
	parts     map[tpKey]*prodPartition
	buffered  int
	spaceFree *sync.Cond
	closed    bool
	inflight  int // batches sent and not yet answered, for Flush
	// id is the newest producer id (idempotence); idErr the last error
	// met getting one, reported by batches that time out waiting for it.
	id    prodID
	idErr error
	// idRefused is set when the last attempt to get a producer id was
	// refused (authorization) at idRefusedAt: batches that were already
	// waiting for an id then fail with it, and so do batches until
	// idRetryAt (by idClock), the end of a backoff doubling with each of
	// idRefusals consecutive refusals; the first batch after it asks
	// again.
	idRefused   error
	idRefusedAt time.Time
	idRetryAt   time.Time
	idRefusals  int
	idFetching  bool
	// idClock is the clock of the refusal backoff (time.Now; tests
	// replace it).
	idClock func() time.Time

	// throttle counts the throttle times nodes answered
	// (producer_throttle.go).
	throttle throttleStats

	wake   chan struct{}
	idle   *sync.Cond // signalled when a batch completes
	cancel context.CancelFunc
	done   chan struct{}

	connMu sync.Mutex
	conns  map[string]*prodConn

	// cbMu guards the callbacks waiting to run (see deliver).
	cbMu      sync.Mutex
	cbIdle    *sync.Cond // signalled when the queue is empty and no callback runs
	cbQueue   []delivery
	cbRunning bool

	// builders are reused batch builders: a sealed batch's bytes live in its
	// builder until the batch is done, then the builder is reused.
	builders sync.Pool
}

type tpKey struct {
	topic     string
	partition int32
}

// pendingRecord is kept small: a batch of 100-byte records holds thousands.
type pendingRecord struct {
	rec *Record
	cb  func(Result)
}

type prodBatch struct {
	tp   tpKey
	data []byte
	recs []pendingRecord
	// traced are the span contexts of the records produced under a trace
	// (nil when none was).
	traced   []trace.SpanContext
	bytes    int
	created  time.Time
	attempts int
	span     trace.Span // the request span of the current attempt
	// lastErr is the last retriable error of this batch, reported as the
	// cause if the delivery timeout passes.
	lastErr error
	// builder holds data; it goes back to the pool once the batch is done.
	builder *record.Builder
	// order is the batch's place among its partition's batches: the number
	// of the partition's records sealed before its first, so the pieces of
	// a split batch (producer_split.go) have places of their own.
	order uint64
	// seq is the batch's base sequence once it has been sent with one
	// (idempotence), else -1; idGen is the producer id generation it
	// belongs to.
	seq   int32
	idGen uint64
	// seqIdx is the batch's place among those its identity sequenced.
	seqIdx uint64
	// stampGen and stampSeq are the identity generation and sequence
	// whose producer fields data carries with a CRC over them (stampGen 0:
	// none yet, the CRC is not computed).
	stampGen uint64
	stampSeq int32
}

type prodPartition struct {
	tp        tpKey
	builder   *record.Builder
	open      []pendingRecord
	openTrace []trace.SpanContext
	lastCount int // records in the last sealed batch: the next one's capacity
	lastBytes int // bytes of the last sealed batch: the next one's buffer
	openBytes int
	openSince time.Time
	ready     []*prodBatch // sealed, oldest first
	inflight  int
	retryAt   time.Time
	backoff   time.Duration
	sealed    uint64 // records sealed so far: the next batch's order
	// settled counts the partition's records whose batches have settled
	// in order: the order of the next batch whose callbacks may run.
	// held are settled batches waiting for an earlier one, by order
	// (see finishLocked).
	settled uint64
	held    []heldDelivery
	// splitBytes, once a batch was refused as too large, is the size of
	// the pieces it was split into: batches are sealed at it, so they stay
	// under the topic's max.message.bytes (producer_split.go).
	splitBytes int
	idem       partIdem
}

// NewProducer returns a producer.
func (c *Client) NewProducer(cfg ProducerConfig) *Producer {
	cfgErr := cfg.Validate()
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c: c, cfg: cfg, md: newMetaCache(c), parts: map[tpKey]*prodPartition{}, cfgErr: cfgErr, idem: !cfg.DisableIdempotence, ctx: ctx,
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}), conns: map[string]*prodConn{},
		idClock: time.Now,
	}
	p.idemTel = newIdemTelemetry(c.cfg.Telemetry)
	p.initID = func(ctx context.Context) (int64, int16, error) {
		// An idempotent producer has no transactional id; -1, -1 asks
		// for a new producer id.
		return c.InitProducerID(ctx, "", 0, -1, -1)
	}
	if cfg.TransactionalID != "" {
		p.txn = newTxnState(&cfg)
	}
	p.builders.New = func() any { return record.NewBuilder(cfg.Compression) }
	p.spaceFree = sync.NewCond(&p.mu)
	p.idle = sync.NewCond(&p.mu)
	p.cbIdle = sync.NewCond(&p.cbMu)
	go func() {
		defer close(p.done)
		p.run(ctx)
	}()
	return p
}

// ErrProducerClosed is returned by Produce after Close.
var ErrProducerClosed = errors.New("producer is closed")

// Produce queues a record; cb (which may be nil) receives its result once.
// It blocks while the producer's buffer is full, until ctx ends. Callbacks
// run on one goroutine of the producer, in produce order within a
// partition, retries included: offset order, except without idempotence and
// with MaxInFlight above 1, where a retry may land after later batches. A
// slow callback delays the ones after it.
func (p *Producer) Produce(ctx context.Context, r *Record, cb func(Result)) error {
	if p.cfgErr != nil {
		return p.cfgErr
	}
	if r.Topic == "" {
		return errs.Invalid(errs.InvalidRequest, "topic", "is required")
	}
	// Known topics need no clock read here (they cost ~60 ns on some
	// machines, a tenth of the time of a small record); their metadata is
	// checked for age once per batch, below, and refreshed in the
	// background, as Kafka's producer does.
	n, ok := p.md.known(r.Topic)
	if !ok {
		var err error
		if n, err = p.md.partitionsWait(ctx, r.Topic, p.cfg.MaxBlock); err != nil {
			return err
		}
	}
	if r.Partition >= n {
		return errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; %d does not exist", r.Topic, n, r.Partition)
	}
	var sc trace.SpanContext
	if p.c.cfg.Telemetry != nil {
		sc = trace.SpanContextFromContext(ctx)
	}
	headers := r.Headers
	if sc.IsValid() {
		// The trace travels with the record, so a consumer's span can link
		// to the producer's (W3C traceparent header).
		carrier := propagation.MapCarrier{}
		p.c.cfg.Telemetry.TextMapPropagator().Inject(ctx, carrier)
		for k, v := range carrier {
			headers = append(headers[:len(headers):len(headers)], record.Header{Key: k, Value: []byte(v)})
		}
	}
	size := recordBytes(r.Key, r.Value, headers)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.txn != nil {
		if err := p.txnUsableLocked(); err != nil {
			return err
		}
	}
	for p.buffered+size > p.cfg.BufferBytes && p.buffered > 0 && !p.closed {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.waitCond(ctx, p.spaceFree)
	}
	if p.closed {
		return ErrProducerClosed
	}
	part := r.Partition
	if part < 0 {
		part = p.cfg.Partitioner.Partition(r.Key, n)
	}
	pp := p.partition(tpKey{r.Topic, part})
	ts := r.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	limit := p.batchLimitLocked(pp)
	if pp.openBytes > 0 && pp.openBytes+size > limit {
		p.sealLocked(pp)
	}
	if len(pp.open) == 0 && pp.lastBytes > 0 {
		// A batch that grows to MaxBatchBytes would otherwise be copied
		// into a twice larger buffer a dozen times on its way there. No
		// more than the batch may reach now: BufferBytes does not count
		// reserved room, and a partition that can send at once seals at
		// BatchBytes (many keyed partitions each holding 1 MiB of room
		// after a burst would add up).
		pp.builder.Grow(min(pp.lastBytes, limit))
	}
	// The builder knows each record's exact encoded size: it refuses a
	// record that would take the batch past the limit (size is an
	// estimate), and the record goes into the next batch instead. A record
	// alone larger than the limit is let through and left to the node.
	rec := &record.Record{Timestamp: ts.UnixMilli(), Key: r.Key, Value: r.Value, Headers: headers}
	pp.builder.SetMaxBytes(limit)
	err := pp.builder.Append(rec)
	if err != nil && len(pp.open) > 0 && errs.Is(err, errs.MessageTooLarge) {
		p.sealLocked(pp)
		pp.builder.SetMaxBytes(limit)
		err = pp.builder.Append(rec)
	}
	if err != nil {
		return err
	}
	if len(pp.open) == 0 {
		now := time.Now()
		pp.openSince = now
		p.md.refreshIfStale(r.Topic, now)
		if pp.open == nil {
			// Sized like the last batch, so the slice is not regrown and
			// copied a dozen times per batch.
			pp.open = make([]pendingRecord, 0, max(pp.lastCount, 16))
		}
	}
	pp.open = append(pp.open, pendingRecord{rec: r, cb: cb})
	if sc.IsValid() {
		pp.openTrace = append(pp.openTrace, sc)
	}
	pp.openBytes += size
	p.buffered += size
	if pp.openBytes >= limit {
		p.sealLocked(pp)
	}
	p.kick()
	return nil
}

// recordBytes is what a record counts for against BatchBytes, BufferBytes
// and the batch limits: its key, value and headers and a bound on the
// varints and fields around them (a record without headers needs at most
// 32 more bytes in practice; each header at most 10 for its two lengths).
func recordBytes(key, value []byte, headers []record.Header) int {
	n := len(key) + len(value) + 32
	for _, h := range headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// batchLimitLocked is the size at which the partition's open batch is
// sealed: BatchBytes while the partition can send at once, MaxBatchBytes
// while all its MaxInFlight requests are unanswered or sealed batches wait
// before it. A sealed batch would only wait then, and many small batches
// cost the leader one request, one append and one answer each; the batch
// that grows instead goes when an answer makes room and the batches before
// it have gone (sendReady). Once a batch was refused as too large, no batch
// passes the size of its pieces (producer_split.go).
func (p *Producer) batchLimitLocked(pp *prodPartition) int {
	limit := p.cfg.BatchBytes
	if pp.inflight >= p.cfg.MaxInFlight || len(pp.ready) > 0 {
		limit = p.cfg.MaxBatchBytes
	}
	if pp.splitBytes > 0 {
		limit = min(limit, pp.splitBytes)
	}
	return limit
}

// waitCond waits on c (p.mu held), waking when ctx ends too.
func (p *Producer) waitCond(ctx context.Context, c *sync.Cond) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		c.Broadcast()
		p.mu.Unlock()
	})
	c.Wait()
	stop()
}

func (p *Producer) partition(tp tpKey) *prodPartition {
	pp, ok := p.parts[tp]
	if !ok {
		pp = &prodPartition{tp: tp, builder: p.builders.Get().(*record.Builder)}
		p.parts[tp] = pp
	}
	return pp
}

// sealLocked closes the open batch of a partition and queues it.
func (p *Producer) sealLocked(pp *prodPartition) {
	if len(pp.open) == 0 {
		return
	}
	if p.txn != nil {
		pp.builder.SetTransactional(true)
	}
	build := pp.builder.Build
	var stampGen uint64
	var stampSeq int32
	if p.idem {
		// The producer fields the batch will most likely get at its first
		// send go in now, so the CRC is computed once while the batch is
		// in the cache; idemSequenceLocked stamps again only if they
		// differ (or were not known).
		if pid, epoch, seq, ok := p.idemPredictLocked(pp); ok {
			pp.builder.SetProducer(pid, epoch, seq)
			stampGen, stampSeq = pp.idem.gen, seq
		} else {
			build = pp.builder.BuildUnsealed
		}
	}
	data, err := build()
	recs := pp.open
	b := &prodBatch{tp: pp.tp, data: data, recs: recs, traced: pp.openTrace, bytes: pp.openBytes, created: pp.openSince, builder: pp.builder,
		order: pp.sealed, seq: -1, stampGen: stampGen, stampSeq: stampSeq}
	pp.sealed += uint64(len(recs))
	pp.open, pp.openTrace, pp.openBytes, pp.lastCount, pp.lastBytes = nil, nil, 0, len(recs), len(data)
	pp.builder = p.builders.Get().(*record.Builder)
	p.cfg.Partitioner.BatchSealed(pp.tp.partition)
	if err != nil {
		p.finishLocked(b, -1, err)
		return
	}
	pp.ready = append(pp.ready, b)
}

func (p *Producer) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// ProduceSync produces records and waits for all their results.
func (p *Producer) ProduceSync(ctx context.Context, recs ...*Record) ([]Result, error) {
	out := make([]Result, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		if err := p.Produce(ctx, r, func(res Result) { out[i] = res; wg.Done() }); err != nil {
			out[i] = Result{Record: r, Offset: -1, Err: err}
			wg.Done()
		}
	}
	wg.Wait()
	var errList []error
	for _, r := range out {
		if r.Err != nil {
			errList = append(errList, r.Err)
		}
	}
	return out, errors.Join(errList...)
}

// Flush sends every queued record now and waits until each has a result
// and its callback has returned. Calling it from a callback deadlocks.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	for _, pp := range p.parts {
		p.sealLocked(pp)
	}
	p.kick()
	for p.pendingLocked() {
		if ctx.Err() != nil {
			p.mu.Unlock()
			return ctx.Err()
		}
		p.waitCond(ctx, p.idle)
	}
	p.mu.Unlock()
	return p.waitCallbacks(ctx)
}

// waitCallbacks waits until every queued callback has run.
func (p *Producer) waitCallbacks(ctx context.Context) error {
	p.cbMu.Lock()
	defer p.cbMu.Unlock()
	for p.cbRunning || len(p.cbQueue) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stop := context.AfterFunc(ctx, func() {
			p.cbMu.Lock()
			p.cbIdle.Broadcast()
			p.cbMu.Unlock()
		})
		p.cbIdle.Wait()
		stop()
	}
	return nil
}

func (p *Producer) pendingLocked() bool {
	if p.inflight > 0 {
		return true
	}
	for _, pp := range p.parts {
		if len(pp.open) > 0 || len(pp.ready) > 0 {
			return true
		}
	}
	return false
}

// Close flushes (until ctx ends), fails what is left, and stops; every
// callback has run when it returns. Calling it from a callback deadlocks.
func (p *Producer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	p.closed = true
	for _, pp := range p.parts {
		p.sealLocked(pp)
		for _, b := range pp.ready {
			p.finishLocked(b, -1, ErrProducerClosed)
		}
		pp.ready, pp.idem.resend = nil, 0
	}
	p.spaceFree.Broadcast()
	p.mu.Unlock()
	p.cancel()
	<-p.done
	p.bg.Wait()
	p.connMu.Lock()
	for _, c := range p.conns {
		c.close()
	}
	p.connMu.Unlock()
	// Requests that were in flight fail as their streams close; their
	// callbacks, and those of the records failed above, run before Close
	// returns.
	p.mu.Lock()
	for p.inflight > 0 && ctx.Err() == nil {
		p.waitCond(ctx, p.idle)
	}
	if p.inflight == 0 {
		p.releaseHeldLocked()
	}
	p.mu.Unlock()
	if cerr := p.waitCallbacks(ctx); err == nil {
		err = cerr
	}
	return err
}

// finishLocked reports a batch's result to its records' callbacks (outside
// the lock, see deliver) and frees its buffer space. Every sealed batch, or
// every piece of a split one, settles here exactly once; the callbacks of
// one whose order is past the partition's settled count wait in held until
// the batches before it have settled.
func (p *Producer) finishLocked(b *prodBatch, base int64, err error) {
	if b.builder != nil {
		b.builder.Reset()
		p.builders.Put(b.builder)
		b.builder, b.data = nil, nil
	}
	if p.idem && b.seq >= 0 {
		p.idemSettledLocked(p.parts[b.tp], b, err)
	}
	if p.txn != nil && err != nil && err != errTxnAborted {
		p.txnFailedLocked(err)
	}
	p.buffered -= b.bytes
	p.spaceFree.Broadcast()
	p.idle.Broadcast()
	d := delivery{recs: b.recs, partition: b.tp.partition, base: base, err: err}
	pp := p.parts[b.tp]
	if b.order != pp.settled {
		// An earlier batch of the partition (one whose answer was lost
		// and is being resent, say) has not settled: this one's callbacks
		// wait for it, so they run in offset order. Its buffer space is
		// free already.
		i, _ := slices.BinarySearchFunc(pp.held, b.order, func(h heldDelivery, o uint64) int { return cmp.Compare(h.order, o) })
		pp.held = slices.Insert(pp.held, i, heldDelivery{order: b.order, d: d})
		return
	}
	pp.settled += uint64(len(b.recs))
	p.deliver(d)
	for len(pp.held) > 0 && pp.held[0].order == pp.settled {
		h := pp.held[0]
		pp.held[0] = heldDelivery{}
		pp.held = pp.held[1:]
		pp.settled += uint64(len(h.d.recs))
		p.deliver(h.d)
	}
}

// heldDelivery is a settled batch whose callbacks wait for an earlier
// batch of its partition.
type heldDelivery struct {
	order uint64
	d     delivery
}

// releaseHeldLocked delivers every held batch in order. Every batch
// settles, so none is held once nothing is pending; Close calls it in case
// one were, so that no callback is lost.
func (p *Producer) releaseHeldLocked() {
	for _, pp := range p.parts {
		for _, h := range pp.held {
			pp.settled = h.order + uint64(len(h.d.recs))
			p.deliver(h.d)
		}
		pp.held = nil
	}
}

// delivery is one finished batch whose callbacks are still to run.
type delivery struct {
	recs      []pendingRecord
	partition int32
	base      int64
	err       error
}

// deliver queues a batch's callbacks. One goroutine at a time runs the
// queue, in order; finishLocked queues a partition's batches in the order
// they were sealed (holding one that settles before an earlier one, as
// after a resend answered with the original offset), so the callbacks of
// one partition's records run in offset order (as Kafka's do), failures
// in their places. It runs outside the producer's lock and
// apart from the goroutines that receive responses: a callback that blocks
// (on Produce with a full buffer, say) delays later callbacks, never the
// responses that free the buffer.
func (p *Producer) deliver(d delivery) {
	p.cbMu.Lock()
	p.cbQueue = append(p.cbQueue, d)
	if p.cbRunning {
		p.cbMu.Unlock()
		return
	}
	p.cbRunning = true
	p.cbMu.Unlock()
	go p.runCallbacks()
}

// runCallbacks runs queued deliveries until the queue is empty.
func (p *Producer) runCallbacks() {
	var batch []delivery
	for {
		p.cbMu.Lock()
		if len(p.cbQueue) == 0 {
			p.cbRunning = false
			p.cbIdle.Broadcast()
			p.cbMu.Unlock()
			return
		}
		batch, p.cbQueue = p.cbQueue, batch[:0]
		p.cbMu.Unlock()
		for i := range batch {
			d := &batch[i]
			for idx, r := range d.recs {
				if r.cb == nil {
					continue
				}
				off := int64(-1)
				if d.err == nil && d.base >= 0 {
					off = d.base + int64(idx)
				}
				r.cb(Result{Record: r.rec, Partition: d.partition, Offset: off, Err: d.err})
			}
			*d = delivery{}
		}
	}
}

// run is the sender loop: it seals batches whose linger expired and sends
// ready batches to their leaders.
func (p *Producer) run(ctx context.Context) {
	timer := newWakeTimer()
	defer timer.Close()
	for {
		if next := p.sendReady(ctx); next > 0 {
			timer.Reset(next)
		} else {
			// Nothing queued: a record, an answer or a retry wakes the
			// loop. An idle producer that looked every Linger cost a
			// process with thousands of them most of a core.
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C:
		}
	}
}

// sendReady sends what can be sent and returns when to look again, or 0
// when no partition holds a batch, open or sealed: then only what queues
// one (which kicks the loop) gives a pass anything to do.
func (p *Producer) sendReady(ctx context.Context) time.Duration {
	now := time.Now()
	next := p.cfg.Linger
	lingering := false // a batch waits for its Linger to end
	queued := false    // some partition held a batch when the pass began
	byNode := map[string][]*prodBatch{}
	again := false // a partition can send more than one batch per pass
	p.mu.Lock()
	for _, pp := range p.parts {
		queued = queued || len(pp.open) > 0 || len(pp.ready) > 0
		if len(pp.open) > 0 {
			switch age := now.Sub(pp.openSince); {
			case pp.openBytes >= p.cfg.BatchBytes && pp.inflight < p.cfg.MaxInFlight && len(pp.ready) == 0:
				// Grew past BatchBytes while the partition could not send.
				p.sealLocked(pp)
			case age < p.cfg.Linger:
				next = min(next, p.cfg.Linger-age)
				lingering = true
			case pp.inflight < p.cfg.MaxInFlight && len(pp.ready) == 0:
				p.sealLocked(pp)
			}
			// Otherwise the batch could not go yet: it keeps filling until
			// an answer makes room (as Kafka's accumulator does), rather
			// than queueing as one small request after another.
		}
		// Batches are in creation order: those past their delivery
		// timeout are at the front.
		for len(pp.ready) > 0 && now.Sub(pp.ready[0].created) > p.cfg.DeliveryTimeout {
			b := p.takeReadyLocked(pp, 0)
			p.finishLocked(b, -1, p.deliveryTimedOut(b))
		}
		for p.idRefused != nil && len(pp.ready) > 0 && pp.ready[0].seq < 0 && len(pp.idem.outstanding) == 0 &&
			(!pp.ready[0].created.After(p.idRefusedAt) || p.idClock().Before(p.idRetryAt)) {
			b := p.takeReadyLocked(pp, 0)
			p.finishLocked(b, -1, p.idRefused)
		}
		if len(pp.ready) == 0 || pp.inflight >= p.cfg.MaxInFlight {
			continue
		}
		if now.Before(pp.retryAt) {
			next = min(next, pp.retryAt.Sub(now))
			continue
		}
		if p.txn != nil && !p.txnMaySendLocked(pp) {
			continue // the coordinator's answer, or the transaction's end, wakes the loop
		}
		idx := 0
		if p.idem {
			// An answer, or a producer id, wakes the loop when the
			// partition may send again.
			if idx = p.idemNextLocked(pp); idx < 0 {
				continue
			}
		}
		b := pp.ready[idx]
		leader, ok := p.md.leader(b.tp.topic, b.tp.partition)
		if e, absent := p.md.absentErr(b.tp.topic); !ok && absent && !p.c.retryTopicMetadata(b.tp.topic, e) {
			// Metadata confirmed the topic is gone (deleted): retrying
			// cannot help (Kafka fails such batches too). A topic this
			// client has just created is only unknown to a node that has
			// not caught up yet: its batches wait for a leader.
			p.takeReadyLocked(pp, idx)
			p.finishLocked(b, -1, fmt.Errorf("%s-%d: %w", b.tp.topic, b.tp.partition, e))
			continue
		}
		if !ok {
			if b.lastErr == nil {
				b.lastErr = errs.New(errs.LeaderNotAvailable, "metadata names no leader for %s-%d", b.tp.topic, b.tp.partition)
			}
			p.md.refreshSoon(b.tp.topic)
			next = min(next, 50*time.Millisecond)
			continue
		}
		p.takeReadyLocked(pp, idx)
		if p.idem {
			p.idemSequenceLocked(pp, b)
		}
		pp.inflight++
		p.inflight++
		b.attempts++
		byNode[leader.addr] = append(byNode[leader.addr], b)
		// One batch per partition per request: another pass at once sends
		// the next, or the expired open batch, while there is room.
		if pp.inflight < p.cfg.MaxInFlight && (len(pp.ready) > 0 || len(pp.open) > 0 && (now.Sub(pp.openSince) >= p.cfg.Linger || pp.openBytes >= p.cfg.BatchBytes)) {
			again = true
		}
	}
	p.mu.Unlock()
	for addr, batches := range byNode {
		p.send(ctx, addr, batches)
	}
	if again {
		p.kick()
	}
	if !queued {
		return 0
	}
	return lookAgain(next, lingering)
}

// lookAgain is when the sender loop looks again, next from now by the
// pass's account: at least a millisecond between passes (a retry backoff,
// a leader to come, a partition with every request in flight), except for
// a batch the pass found younger than a sub-millisecond Linger (lingering,
// next at most what is left of it): it goes when its Linger ends, not a
// millisecond later, nor a whole Linger later.
func lookAgain(next time.Duration, lingering bool) time.Duration {
	floor := time.Millisecond
	if lingering {
		floor = min(floor, next)
	}
	return max(next, floor)
}

// takeReadyLocked removes the i-th ready batch of a partition.
func (p *Producer) takeReadyLocked(pp *prodPartition, i int) *prodBatch {
	b := pp.ready[i]
	if i == 0 {
		pp.ready = pp.ready[1:]
	} else {
		pp.ready = slices.Delete(pp.ready, i, i+1)
	}
	if b.seq >= 0 {
		pp.idem.resend--
	}
	return b
}

// send groups batches into requests of at most MaxRequestBytes on the
// node's stream.
func (p *Producer) send(ctx context.Context, addr string, batches []*prodBatch) {
	for len(batches) > 0 {
		req := &storagev1.ProduceRequest{Acks: p.cfg.Acks, TimeoutMs: int32(p.cfg.RequestTimeout / time.Millisecond)}
		if p.txn != nil {
			req.TransactionalId = p.txn.id
		}
		var group []*prodBatch
		size := 0
		for len(batches) > 0 && (len(group) == 0 || size+len(batches[0].data) <= p.cfg.MaxRequestBytes) {
			b := batches[0]
			batches = batches[1:]
			size += len(b.data)
			group = append(group, b)
			epoch, _ := p.md.leaderEpoch(b.tp.topic, b.tp.partition)
			req.Partitions = append(req.Partitions, &storagev1.ProducePartition{
				Topic: b.tp.topic, Partition: b.tp.partition, CurrentLeaderEpoch: epoch,
				Data: &storagev1.ProducePartition_Batches{Batches: b.data},
			})
		}
		p.traceRequest(req, group)
		p.conn(addr).enqueue(req, group)
	}
}

// traceRequest starts the span of a request whose records were produced
// under a trace: a child of the first traced record's span, linked to the
// others'. The request carries it to the leader.
func (p *Producer) traceRequest(req *storagev1.ProduceRequest, group []*prodBatch) {
	tel := p.c.cfg.Telemetry
	if tel == nil {
		return
	}
	var parent trace.SpanContext
	var links []trace.Link
	for _, b := range group {
		for _, sc := range b.traced {
			if !parent.IsValid() {
				parent = sc
			} else if len(links) < 32 && !sc.Equal(parent) {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
	}
	if !parent.IsValid() {
		return
	}
	ctx, span := tel.Tracer("github.com/sluice-io/sluice/libs/client").Start(
		trace.ContextWithSpanContext(context.Background(), parent), "produce",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("partitions", len(req.GetPartitions())), attribute.String("acks", req.GetAcks().String())))
	carrier := propagation.MapCarrier{}
	tel.TextMapPropagator().Inject(ctx, carrier)
	req.TraceContext = carrier
	for _, b := range group {
		b.span = span
	}
}

// complete handles the answer (or failure) of one request.
func (p *Producer) complete(group []*prodBatch, resp *storagev1.ProduceResponse, reqErr error) {
	if len(group) > 0 && group[0].span != nil {
		if reqErr != nil {
			group[0].span.SetStatus(otelcodes.Error, reqErr.Error())
		}
		group[0].span.End()
		for _, b := range group {
			b.span = nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range group {
		pp := p.partition(b.tp)
		pp.inflight--
		p.inflight--
		err := reqErr
		base := int64(-1)
		if err == nil {
			if i >= len(resp.GetResults()) {
				err = errs.New(errs.UnknownServerError, "response has %d results for %d partitions", len(resp.GetResults()), len(group))
			} else {
				res := resp.GetResults()[i]
				if e := errs.FromProto(res.GetError()); e != nil {
					err = e
				}
				base = res.GetBaseOffset()
			}
		}
		if err == nil {
			pp.backoff = 0
			p.finishLocked(b, base, nil)
			continue
		}
		e := errs.From(err)
		if e.Leader != nil && e.Leader.GetLeaderAddress() != "" {
			p.md.hint(b.tp.topic, b.tp.partition, e.Leader)
		} else if e.Retriable() {
			p.md.refreshSoon(b.tp.topic)
		}
		if e.Code == errs.MessageTooLarge && p.splitTooLargeLocked(pp, b) {
			// Too large only as a whole: its pieces go in its place.
			continue
		}
		retry := e.Retriable()
		if !retry && p.idem && b.seq >= 0 && !p.closed {
			// Refused as out of order because an earlier batch is
			// missing: it goes again after that one (producer_idem.go).
			retry = p.idemRetryOnRefusal(pp, b, e)
		}
		if retry {
			b.lastErr = e
		}
		if retry && !p.closed && time.Since(b.created) < p.cfg.DeliveryTimeout {
			if p.idem {
				// In order, behind the batches still in flight.
				p.idemRequeueLocked(pp, b)
			} else {
				// Retry first, in order: the batch goes back to the front.
				pp.ready = append([]*prodBatch{b}, pp.ready...)
			}
			if now := time.Now(); e.Retriable() && !now.Before(pp.retryAt) {
				// One backoff step per failure of the partition, not per
				// batch: the batches in flight fail together when their
				// leader dies, and five steps at once would wait 1 s
				// before the first retry instead of 100 ms.
				pp.backoff = min(max(2*pp.backoff, p.cfg.RetryBackoff), p.cfg.RetryBackoffMax)
				pp.retryAt = now.Add(pp.backoff)
			}
			continue
		}
		if retry && !p.closed {
			err = p.deliveryTimedOut(b)
		} else {
			err = fmt.Errorf("%s-%d: %w", b.tp.topic, b.tp.partition, err)
		}
		p.finishLocked(b, -1, err)
	}
	// A transaction's end waits for every answer, retried batches too.
	p.idle.Broadcast()
	p.kick()
}

// deliveryTimedOut is the error of a batch whose delivery timeout passed:
// REQUEST_TIMED_OUT with the last error it met, so the cause (a full disk,
// too few in-sync replicas) is not hidden behind the timeout.
func (p *Producer) deliveryTimedOut(b *prodBatch) error {
	what := fmt.Sprintf("%s-%d: not delivered within %v", b.tp.topic, b.tp.partition, p.cfg.DeliveryTimeout)
	if b.lastErr == nil {
		return errs.New(errs.RequestTimedOut, "%s", what)
	}
	return timedOut(what, b.lastErr)
}

// prodConn pipelines requests to one node on a ProduceStream, opened on
// first use and again after it breaks. Each node has its own sending
// goroutine, so a node that stops reading (paused, cut off) blocks only the
// partitions it leads.
type prodConn struct {
	p    *Producer
	addr string

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []queuedReq
	cur    *prodStream
	closed bool
	// busy wakes watch when a request becomes pending on a stream with
	// none, or the connection closes: an idle connection's watch sleeps
	// instead of ticking (thousands of idle producers in one process
	// spent a tenth of their CPU on those ticks).
	busy chan struct{}
	// watchPasses counts watch's looks at the stream (for tests).
	watchPasses atomic.Int64
	// throttledUntil is when the node's last throttle ends (unix ns):
	// nothing is sent to it before (producer_throttle.go).
	throttledUntil atomic.Int64
}

type queuedReq struct {
	req   *storagev1.ProduceRequest
	group []*prodBatch
}

// prodStream is one ProduceStream with the requests in flight on it.
type prodStream struct {
	// stream is nil until open has opened it (set under prodConn.mu).
	stream  grpc.BidiStreamingClient[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]
	ctx     context.Context
	cancel  context.CancelFunc
	nextID  uint64
	pending map[uint64]inflightReq
	// sendMu orders SendMsg and CloseSend, which gRPC does not allow at
	// the same time.
	sendMu sync.Mutex
	// done is closed when the receiver has seen the stream end.
	done chan struct{}
}

// streamCloseWait bounds how long closing waits for a node to end an idle
// stream after the producer closed its side.
const streamCloseWait = time.Second

type inflightReq struct {
	group []*prodBatch
	sent  time.Time
}

func (p *Producer) conn(addr string) *prodConn {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	c, ok := p.conns[addr]
	if !ok {
		c = &prodConn{p: p, addr: addr, busy: make(chan struct{}, 1)}
		c.cond = sync.NewCond(&c.mu)
		p.conns[addr] = c
		go c.loop()
		go c.watch()
	}
	return c
}

// enqueue queues a request for the node; it never blocks.
func (c *prodConn) enqueue(req *storagev1.ProduceRequest, group []*prodBatch) {
	c.mu.Lock()
	c.queue = append(c.queue, queuedReq{req, group})
	c.cond.Signal()
	c.mu.Unlock()
}

// loop sends queued requests in order.
func (c *prodConn) loop() {
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		if c.closed {
			queue := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, q := range queue {
				c.p.complete(q.group, nil, ErrProducerClosed)
			}
			return
		}
		q := c.queue[0]
		c.queue = c.queue[1:]
		ps := c.cur
		if ps == nil {
			ps = c.newStreamLocked()
		}
		ps.nextID++
		id := ps.nextID
		// The batches go on the wire by reference (they stay unchanged in
		// their builders until the batch is done).
		enc, err := encodeProduceStream(id, q.req)
		if err != nil {
			c.mu.Unlock()
			c.p.complete(q.group, nil, errs.New(errs.InvalidRequest, "encoding the produce request: %v", err))
			continue
		}
		// Pending before the stream is open, so that watch sees the
		// request while the connection is being made: a dial to a node
		// that drops packets waits for gRPC's connect timeout (20 s)
		// unless watch abandons it when the partition's leader moves.
		ps.pending[id] = inflightReq{group: q.group, sent: time.Now()}
		if len(ps.pending) == 1 {
			c.wakeWatch()
		}
		opened := ps.stream != nil
		c.mu.Unlock()
		if !opened {
			if err := c.open(ps); err != nil {
				continue
			}
		}
		// Send may block on flow control while the node does not read;
		// only this node's requests wait.
		c.waitThrottle()
		ps.sendMu.Lock()
		err = ps.stream.SendMsg(enc)
		ps.sendMu.Unlock()
		if err != nil {
			// The receiver fails every request in flight on this stream,
			// this one included.
			c.abandon(ps, nil)
		}
	}
}

// newStreamLocked makes the connection's current stream, not yet open.
func (c *prodConn) newStreamLocked() *prodStream {
	sctx, cancel := context.WithCancel(context.Background())
	c.cur = &prodStream{ctx: sctx, cancel: cancel, pending: map[uint64]inflightReq{}, done: make(chan struct{})}
	return c.cur
}

// open opens ps's ProduceStream without holding c.mu (it waits for the
// connection) and starts its receiver. If it fails (or watch abandoned it
// meanwhile), every request pending on ps fails with the error.
func (c *prodConn) open(ps *prodStream) error {
	var stream grpc.BidiStreamingClient[storagev1.ProduceStreamRequest, storagev1.ProduceStreamResponse]
	conn, err := c.p.c.Conn(c.addr)
	if err == nil {
		stream, err = storagev1.NewStorageServiceClient(conn).ProduceStream(ps.ctx, grpc.ForceCodecV2(wire.PassThroughCodec()))
	}
	c.mu.Lock()
	if err != nil {
		c.endUnlocking(ps, err)
		close(ps.done)
		return err
	}
	ps.stream = stream
	c.mu.Unlock()
	go c.receive(ps)
	return nil
}

// wakeWatch wakes watch if it sleeps, or keeps the wake-up for its next
// sleep.
func (c *prodConn) wakeWatch() {
	select {
	case c.busy <- struct{}{}:
	default:
	}
}

// endUnlocking, called with c.mu held, ends ps: it stops being the
// connection's stream and every request pending on it fails with err. It
// unlocks c.mu before the callbacks run.
func (c *prodConn) endUnlocking(ps *prodStream, err error) {
	failed := ps.pending
	ps.pending = map[uint64]inflightReq{}
	if c.cur == ps {
		c.cur = nil
	}
	c.mu.Unlock()
	ps.cancel()
	for _, r := range failed {
		c.p.complete(r.group, nil, err)
	}
}

// abandon cancels a stream; its receiver (or open, if it was still being
// opened) then fails what was in flight. With queuedErr set, the requests
// queued behind it fail with that (retriable) error too: watch gives up on
// the node, and each of them would otherwise open a stream to it in turn
// and wait to be abandoned by itself.
func (c *prodConn) abandon(ps *prodStream, queuedErr error) {
	c.mu.Lock()
	if c.cur == ps {
		c.cur = nil
	}
	var queued []queuedReq
	if queuedErr != nil {
		queued = c.queue
		c.queue = nil
	}
	c.mu.Unlock()
	ps.cancel()
	for _, q := range queued {
		c.p.complete(q.group, nil, queuedErr)
	}
}

// watch abandons a stream whose oldest request has waited longer than the
// request timeout, or whose requests' partitions metadata says moved to
// another leader (the node may be paused or cut off, and will never
// answer).
func (c *prodConn) watch() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		c.watchPasses.Add(1)
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		ps := c.cur
		var oldest time.Time
		var batches []*prodBatch
		if ps != nil {
			for _, r := range ps.pending {
				if oldest.IsZero() || r.sent.Before(oldest) {
					oldest = r.sent
				}
				batches = append(batches, r.group...)
			}
		}
		c.mu.Unlock()
		if ps == nil || oldest.IsZero() {
			// Nothing waits for an answer: sleep until a request does.
			// A wake-up sent after the check above is kept in busy.
			tick.Stop()
			<-c.busy
			tick.Reset(250 * time.Millisecond)
			continue
		}
		// A wake-up sent while this pass had work anyway is stale: drop it,
		// so the sleep that follows the last answer is not cut short.
		select {
		case <-c.busy:
		default:
		}
		age := time.Since(oldest)
		if age > c.p.cfg.RequestTimeout {
			c.abandon(ps, errs.New(errs.RequestTimedOut, "%s did not answer a produce request within %v", c.addr, c.p.cfg.RequestTimeout))
			continue
		}
		if age < time.Second {
			continue
		}
		moved := false
		for _, b := range batches {
			c.p.md.refreshSoon(b.tp.topic)
			if l, ok := c.p.md.leader(b.tp.topic, b.tp.partition); ok && l.addr != c.addr {
				moved = true
			}
		}
		if moved {
			c.abandon(ps, errs.New(errs.NotLeaderOrFollower, "a partition sent to %s has moved to another leader", c.addr))
		}
	}
}

// receive matches responses to requests; when the stream breaks, every
// request in flight on it fails with the stream's (retriable) error.
func (c *prodConn) receive(ps *prodStream) {
	defer close(ps.done)
	for {
		resp, err := ps.stream.Recv()
		if err != nil {
			c.mu.Lock()
			c.endUnlocking(ps, err)
			return
		}
		c.mu.Lock()
		r, ok := ps.pending[resp.GetRequestId()]
		delete(ps.pending, resp.GetRequestId())
		c.mu.Unlock()
		if !ok {
			continue
		}
		if e := errs.FromProto(resp.GetError()); e != nil {
			c.p.complete(r.group, nil, e)
			continue
		}
		c.throttled(resp.GetResponse().GetThrottleTimeMs())
		c.p.complete(r.group, resp.GetResponse(), nil)
	}
}

// close ends the connection's stream. A stream with nothing in flight ends
// as a finished call: the producer closes its side and reads the node's
// final status, so the node records the call as OK, not Canceled (a
// producer that closes normally is not an error in the node's logs and
// metrics). A stream with requests in flight is canceled.
func (c *prodConn) close() {
	c.mu.Lock()
	c.closed = true
	c.wakeWatch()
	cur := c.cur
	c.cur = nil
	// The loop sends nothing once closed is set, so an empty pending set
	// means no request will be sent on this stream again.
	idle := cur != nil && len(cur.pending) == 0 && cur.stream != nil
	c.cond.Broadcast()
	c.mu.Unlock()
	if cur == nil {
		return
	}
	if idle {
		cur.sendMu.Lock()
		err := cur.stream.CloseSend()
		cur.sendMu.Unlock()
		if err == nil {
			t := time.NewTimer(streamCloseWait)
			select {
			case <-cur.done:
			case <-t.C:
			}
			t.Stop()
		}
	}
	cur.cancel()
}
