package record

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Header is a record header: a string key and a nullable value. It is
// franz-go's kmsg.Header, so records move between Sluice and kmsg without
// copying.
type Header = kmsg.Header

// Record is one record as a producer sends it and a consumer reads it. A nil
// Key or Value is null (a nil Value is a tombstone in a compacted topic); an
// empty non-nil slice is an empty key or value.
type Record struct {
	// Offset is the record's offset. Iterator sets it; Builder ignores it
	// (the leader assigns offsets).
	Offset int64
	// Timestamp is the record's timestamp in Unix milliseconds.
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Builder turns records into one v2 batch. It is built for reuse: the record
// buffer, the compression output and the kmsg record it encodes with are kept
// across Reset, so a producer that reuses one Builder per partition encodes
// batch after batch without allocating.
//
// A Builder is not safe for concurrent use.
type Builder struct {
	codec         Codec
	producerID    int64
	producerEpoch int16
	baseSequence  int32
	attrs         Attributes

	n        int32 // records appended
	baseTS   int64
	maxTS    int64
	raw      []byte // BatchHeaderSize bytes of room, then the encoded records
	out      []byte // header + compressed records
	kr       kmsg.Record
	maxBytes int
}

// NewBuilder returns a Builder that compresses with codec c and writes
// batches without a producer id (not idempotent).
func NewBuilder(c Codec) *Builder {
	b := &Builder{codec: c, producerID: noProducerID, producerEpoch: noProducerEpoch, baseSequence: noSequence}
	b.raw = make([]byte, BatchHeaderSize, 16<<10)
	return b
}

// SetCodec changes the compression codec for the next Build.
func (b *Builder) SetCodec(c Codec) { b.codec = c }

// SetProducer sets the idempotent producer fields of the batch (KIP-98): the
// producer id and epoch and the sequence number of the first record.
func (b *Builder) SetProducer(id int64, epoch int16, baseSequence int32) {
	b.producerID, b.producerEpoch, b.baseSequence = id, epoch, baseSequence
}

// SetTransactional marks the batch as part of a transaction.
func (b *Builder) SetTransactional(on bool) { b.setBit(transactionalBit, on) }

// SetControl marks the batch as a control batch. Only coordinators write
// control batches; see AppendEndTxnMarker.
func (b *Builder) SetControl(on bool) { b.setBit(controlBit, on) }

func (b *Builder) setBit(bit Attributes, on bool) {
	if on {
		b.attrs |= bit
	} else {
		b.attrs &^= bit
	}
}

// SetMaxBytes makes Append refuse a record that would grow the uncompressed
// batch beyond n bytes (0, the default, means no limit). Producers use it to
// keep batches under max.message.bytes.
func (b *Builder) SetMaxBytes(n int) { b.maxBytes = n }

// Reset drops the appended records and keeps the codec and producer
// settings, so the Builder can make the next batch.
func (b *Builder) Reset() {
	b.n = 0
	b.raw = b.raw[:BatchHeaderSize]
}

// Grow makes room for n more bytes of records, so that appending them does
// not copy the batch again and again as it grows (a producer that knows its
// last batch's size calls it before the first record of the next).
func (b *Builder) Grow(n int) { b.raw = slices.Grow(b.raw, n) }

// Len returns the number of records appended since the last Reset.
func (b *Builder) Len() int { return int(b.n) }

// Size returns the size the batch would have uncompressed, header included.
// A producer compares it with its batch size limit before appending more.
func (b *Builder) Size() int { return len(b.raw) }

// Append adds a record to the batch. The record's bytes are copied, so the
// caller may reuse them once Append returns. It fails with MessageTooLarge
// if SetMaxBytes is set and the record would not fit (the batch is left as
// it was), and with InvalidRecord once a batch holds math.MaxInt32 records.
func (b *Builder) Append(r *Record) error {
	if b.n == 1<<31-1 {
		return errs.New(errs.InvalidRecord, "a batch holds at most %d records", b.n)
	}
	if b.n == 0 {
		b.baseTS, b.maxTS = r.Timestamp, r.Timestamp
	}
	tsDelta := r.Timestamp - b.baseTS
	body := recordBodySize(tsDelta, b.n, r.Key, r.Value, r.Headers)
	if body > 1<<31-1 {
		return errs.New(errs.MessageTooLarge, "record of %d bytes is too large", body)
	}
	size := varintLen(int64(body)) + body
	if b.maxBytes > 0 && len(b.raw)+size > b.maxBytes && b.n > 0 {
		return errs.New(errs.MessageTooLarge, "record of %d bytes does not fit in the batch limit of %d", size, b.maxBytes)
	}
	kr := &b.kr
	kr.Length = int32(body)
	kr.Attributes = 0
	kr.TimestampDelta64 = tsDelta
	kr.TimestampDelta = int32(tsDelta)
	kr.OffsetDelta = b.n
	kr.Key = r.Key
	kr.Value = r.Value
	kr.Headers = r.Headers
	b.raw = kr.AppendTo(b.raw)
	kr.Key, kr.Value, kr.Headers = nil, nil, nil // do not pin the caller's bytes
	if r.Timestamp > b.maxTS {
		b.maxTS = r.Timestamp
	}
	b.n++
	return nil
}

// AppendKV is Append for a record without headers.
func (b *Builder) AppendKV(timestamp int64, key, value []byte) error {
	r := Record{Timestamp: timestamp, Key: key, Value: value}
	return b.Append(&r)
}

// Build finishes the batch and returns its bytes: base offset 0, partition
// leader epoch -1 (the leader sets both), CRC computed. The slice is owned by
// the Builder and valid until the next Reset, Append or Build. Building an
// empty batch fails with InvalidRecord.
func (b *Builder) Build() ([]byte, error) {
	return b.build(true)
}

// BuildUnsealed is Build without the CRC: for a batch whose header fields
// the producer writes later (the sequence of an idempotent producer is
// given when the batch is first sent), so the CRC is computed once, then,
// instead of twice over 64 KiB batches. The batch must go through
// UpdateCRC before it is sent.
func (b *Builder) BuildUnsealed() ([]byte, error) {
	return b.build(false)
}

func (b *Builder) build(crc bool) ([]byte, error) {
	if b.n == 0 {
		return nil, errs.New(errs.InvalidRecord, "a batch needs at least one record")
	}
	batch := b.raw
	if b.codec != CodecNone {
		b.out = append(b.out[:0], b.raw[:BatchHeaderSize]...)
		var err error
		b.out, err = Compress(b.out, b.raw[BatchHeaderSize:], b.codec)
		if err != nil {
			return nil, err
		}
		batch = b.out
	}
	if len(batch)-LogOverhead > 1<<31-1 {
		return nil, errs.New(errs.MessageTooLarge, "batch of %d bytes is too large", len(batch))
	}
	h := BatchHeader{
		BaseOffset:           0,
		BatchLength:          int32(len(batch) - LogOverhead),
		PartitionLeaderEpoch: NoPartitionLeaderEpoch,
		Magic:                Magic,
		Attributes:           b.attrs | Attributes(b.codec),
		LastOffsetDelta:      b.n - 1,
		BaseTimestamp:        b.baseTS,
		MaxTimestamp:         b.maxTS,
		ProducerID:           b.producerID,
		ProducerEpoch:        b.producerEpoch,
		BaseSequence:         b.baseSequence,
		RecordCount:          b.n,
	}
	PutBatchHeader(batch, &h)
	if crc {
		UpdateCRC(batch)
	}
	return batch, nil
}

// recordBodySize is the encoded size of a record after its length varint.
func recordBodySize(tsDelta int64, offsetDelta int32, key, value []byte, headers []Header) int {
	n := 1 + varintLen(tsDelta) + varintLen(int64(offsetDelta)) + bytesLen(key) + bytesLen(value) +
		varintLen(int64(len(headers)))
	for i := range headers {
		n += varintLen(int64(len(headers[i].Key))) + len(headers[i].Key) + bytesLen(headers[i].Value)
	}
	return n
}

// bytesLen is the size of a nullable byte field: a varint length (-1 for
// null) and the bytes.
func bytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the size of v as a zig-zag varint.
func varintLen(v int64) int {
	u := uint64(v)<<1 ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

// ControlType is the type of a control record (transaction marker).
type ControlType int16

const (
	// ControlAbort marks the end of an aborted transaction.
	ControlAbort ControlType = 0
	// ControlCommit marks the end of a committed transaction.
	ControlCommit ControlType = 1
)

// AppendEndTxnMarker appends a control batch holding one end-transaction
// marker (KIP-98) to dst: key (version 0, type), value (version 0,
// coordinator epoch). The coordinator writes it to end a transaction on a
// partition.
func AppendEndTxnMarker(dst []byte, producerID int64, producerEpoch int16, t ControlType, coordinatorEpoch int32, timestamp int64) []byte {
	var key [4]byte
	binary.BigEndian.PutUint16(key[0:], 0)
	binary.BigEndian.PutUint16(key[2:], uint16(t))
	var value [6]byte
	binary.BigEndian.PutUint16(value[0:], 0)
	binary.BigEndian.PutUint32(value[2:], uint32(coordinatorEpoch))
	b := Builder{codec: CodecNone, producerID: producerID, producerEpoch: producerEpoch, baseSequence: noSequence,
		attrs: transactionalBit | controlBit, raw: make([]byte, BatchHeaderSize, 128)}
	r := Record{Timestamp: timestamp, Key: key[:], Value: value[:]}
	_ = b.Append(&r) // cannot fail: one small record
	batch, _ := b.Build()
	return append(dst, batch...)
}

// ParseControlKey decodes the key of a control record: its type. It fails
// for keys shorter than four bytes; unknown versions are read the same way,
// as Kafka does.
func ParseControlKey(key []byte) (ControlType, error) {
	if len(key) < 4 {
		return 0, errs.New(errs.CorruptMessage, "control record key of %d bytes", len(key))
	}
	return ControlType(binary.BigEndian.Uint16(key[2:])), nil
}

// Rewriter re-encodes a batch keeping a subset of its records with their
// offsets, and the batch's offsets range, leader epoch, producer fields and
// codec. Compaction uses it: the batch keeps its last offset even when its
// last records are removed, so offsets are never reused and a producer's
// sequence state survives (Kafka does the same). A Rewriter reuses its
// buffers across batches.
type Rewriter struct {
	hdr   BatchHeader
	raw   []byte
	out   []byte
	kr    kmsg.Record
	n     int32
	maxTS int64
	last  int64
}

// Reset starts a new batch modelled on h. Record timestamps are encoded
// relative to baseTimestamp; with deleteHorizon set, baseTimestamp is the
// compaction delete horizon and the batch is marked as carrying one
// (KIP-534).
func (w *Rewriter) Reset(h BatchHeader, baseTimestamp int64, deleteHorizon bool) {
	w.hdr = h
	w.hdr.BaseTimestamp = baseTimestamp
	w.hdr.Attributes &^= deleteHorizonBit
	if deleteHorizon {
		w.hdr.Attributes |= deleteHorizonBit
	}
	if cap(w.raw) < BatchHeaderSize {
		w.raw = make([]byte, BatchHeaderSize, 16<<10)
	}
	w.raw = w.raw[:BatchHeaderSize]
	w.n = 0
	w.maxTS = -1
	w.last = h.BaseOffset - 1
}

// Add appends a record; r.Offset must lie in the batch's offset range and
// increase from record to record.
func (w *Rewriter) Add(r *Record) error {
	if r.Offset <= w.last || r.Offset > w.hdr.LastOffset() {
		return errs.New(errs.InvalidRecord, "record offset %d outside the batch [%d, %d] or out of order",
			r.Offset, w.hdr.BaseOffset, w.hdr.LastOffset())
	}
	w.last = r.Offset
	tsDelta := r.Timestamp - w.hdr.BaseTimestamp
	delta := int32(r.Offset - w.hdr.BaseOffset)
	kr := &w.kr
	kr.Length = int32(recordBodySize(tsDelta, delta, r.Key, r.Value, r.Headers))
	kr.Attributes = 0
	kr.TimestampDelta64 = tsDelta
	kr.TimestampDelta = int32(tsDelta)
	kr.OffsetDelta = delta
	kr.Key, kr.Value, kr.Headers = r.Key, r.Value, r.Headers
	w.raw = kr.AppendTo(w.raw)
	kr.Key, kr.Value, kr.Headers = nil, nil, nil
	w.maxTS = max(w.maxTS, r.Timestamp)
	w.n++
	return nil
}

// Len returns the number of records added.
func (w *Rewriter) Len() int { return int(w.n) }

// Build finishes the batch. The slice is owned by the Rewriter and valid
// until the next Reset. A batch with no records is valid: it keeps its
// offsets and producer fields.
func (w *Rewriter) Build() ([]byte, error) {
	batch := w.raw
	codec := w.hdr.Attributes.Codec()
	if codec != CodecNone {
		w.out = append(w.out[:0], w.raw[:BatchHeaderSize]...)
		var err error
		if w.out, err = Compress(w.out, w.raw[BatchHeaderSize:], codec); err != nil {
			return nil, err
		}
		batch = w.out
	}
	h := w.hdr
	h.BatchLength = int32(len(batch) - LogOverhead)
	h.RecordCount = w.n
	h.Magic = Magic
	if h.Attributes.TimestampType() != LogAppendTime && w.n > 0 {
		h.MaxTimestamp = w.maxTS
	}
	PutBatchHeader(batch, &h)
	UpdateCRC(batch)
	return batch, nil
}
