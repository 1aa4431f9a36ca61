package record

import (
	"encoding/binary"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Iterator decodes the records of a buffer of concatenated batches,
// decompressing where needed. It serves the plain-records fetch path (for
// clients that do not decode batches themselves) and compaction. Every batch
// is checked (CRC and header) before its records are read, and
// decompression is bounded by DecompressLimit.
//
// The zero Iterator is ready for Reset. Reuse one Iterator: its
// decompression buffer and header slice are kept, so steady-state iteration
// does not allocate.
//
//	var it record.Iterator
//	it.Reset(buf)
//	for it.Next() {
//		r := it.Record()
//		...
//	}
//	if err := it.Err(); err != nil { ... }
type Iterator struct {
	// DecompressLimit caps the decompressed size of one batch's records;
	// 0 means DefaultDecompressLimit.
	DecompressLimit int

	buf     []byte // batches not yet entered
	hdr     BatchHeader
	inBatch bool
	recs    []byte // remaining record bytes of the current batch
	left    int32  // records left in the current batch
	lastDel int64  // offset delta of the previous record in the batch
	scratch []byte // decompression output, reused
	kr      kmsg.Record
	rec     Record
	err     error
	errAt   int64 // base offset of the batch that failed, -1 if unknown
}

// Reset points the iterator at a new buffer of batches and clears any error.
func (it *Iterator) Reset(buf []byte) {
	it.buf = buf
	it.inBatch = false
	it.recs = nil
	it.left = 0
	it.err = nil
}

// Next advances to the next record and reports whether there is one. It
// returns false at the end of the buffer or on the first error (see Err).
func (it *Iterator) Next() bool {
	for {
		if it.err != nil {
			return false
		}
		if it.inBatch && it.left > 0 {
			return it.decodeRecord()
		}
		if it.inBatch && len(it.recs) != 0 {
			it.err = errs.New(errs.CorruptMessage, "batch at offset %d has %d bytes after its last record", it.hdr.BaseOffset, len(it.recs))
			it.errAt = it.hdr.BaseOffset
			return false
		}
		it.inBatch = false
		if len(it.buf) == 0 {
			return false
		}
		if !it.enterBatch() {
			return false
		}
	}
}

// NextBatch skips the rest of the current batch, enters the next one and
// reports whether there is one. Use Batch to see its header; Next then
// yields its records.
func (it *Iterator) NextBatch() bool {
	if it.err != nil || len(it.buf) == 0 {
		it.inBatch = false
		return false
	}
	return it.enterBatch()
}

func (it *Iterator) enterBatch() bool {
	h, err := CheckBatch(it.buf, ValidateOptions{MaxBatchBytes: math.MaxInt32, Origin: FromReplica})
	if err != nil {
		it.err, it.errAt = err, -1
		if len(it.buf) >= LogOverhead {
			it.errAt = BaseOffset(it.buf)
		}
		return false
	}
	batch := it.buf[:h.Size()]
	it.buf = it.buf[h.Size():]
	it.hdr = h
	payload := batch[BatchHeaderSize:]
	if c := h.Attributes.Codec(); c != CodecNone {
		it.scratch, err = Decompress(it.scratch[:0], payload, c, it.DecompressLimit)
		if err != nil {
			it.err, it.errAt = err, h.BaseOffset
			return false
		}
		payload = it.scratch
	}
	it.recs = payload
	it.left = h.RecordCount
	it.lastDel = -1
	it.inBatch = true
	return true
}

func (it *Iterator) decodeRecord() bool {
	if !it.decodeOne() {
		it.errAt = it.hdr.BaseOffset
		return false
	}
	return true
}

func (it *Iterator) decodeOne() bool {
	length, n := binary.Varint(it.recs)
	if n <= 0 || length < 0 || length > int64(len(it.recs)-n) {
		it.err = errs.New(errs.CorruptMessage, "batch at offset %d: bad record length", it.hdr.BaseOffset)
		return false
	}
	whole := it.recs[:n+int(length)]
	kr := &it.kr
	if err := kr.UnsafeReadFrom(whole); err != nil {
		it.err = errs.New(errs.CorruptMessage, "batch at offset %d: record: %w", it.hdr.BaseOffset, err)
		return false
	}
	// kmsg reads the fields but does not check that they fill the declared
	// length; a record that ends early means the batch is corrupt.
	if recordBodySize(kr.TimestampDelta64, kr.OffsetDelta, kr.Key, kr.Value, kr.Headers) != int(length) {
		it.err = errs.New(errs.CorruptMessage, "batch at offset %d: record fields do not fill its length %d", it.hdr.BaseOffset, length)
		return false
	}
	delta := int64(kr.OffsetDelta)
	if delta <= it.lastDel || delta > int64(it.hdr.LastOffsetDelta) {
		it.err = errs.New(errs.CorruptMessage, "batch at offset %d: record offset delta %d out of order", it.hdr.BaseOffset, delta)
		return false
	}
	it.lastDel = delta
	it.recs = it.recs[len(whole):]
	it.left--
	r := &it.rec
	r.Offset = it.hdr.BaseOffset + delta
	if it.hdr.Attributes.TimestampType() == LogAppendTime {
		r.Timestamp = it.hdr.MaxTimestamp
	} else {
		r.Timestamp = it.hdr.BaseTimestamp + kr.TimestampDelta64
	}
	r.Key, r.Value, r.Headers = kr.Key, kr.Value, kr.Headers
	return true
}

// Left returns how many records of the current batch follow the current
// one.
func (it *Iterator) Left() int { return int(it.left) }

// Record returns the current record. Its slices alias the buffer or the
// iterator's decompression buffer: they are valid until the next call to
// Next, NextBatch or Reset. Copy what must outlive that.
func (it *Iterator) Record() *Record { return &it.rec }

// Batch returns the header of the batch holding the current record.
func (it *Iterator) Batch() *BatchHeader { return &it.hdr }

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// ErrOffset returns the base offset of the batch that Err is about, or -1
// if Err is nil or the batch's header could not be read. Records before
// that offset were decoded; a reader can deliver them and then report the
// error with the offset where it stops.
func (it *Iterator) ErrOffset() int64 {
	if it.err == nil {
		return -1
	}
	return it.errAt
}
