package record

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Record decoding for validation. A CRC proves only that the bytes arrived as
// the producer sent them, not that they decode: any client can compute one.
// Kafka's LogValidator therefore decodes every record of a client batch,
// compressed or not, before the append, and so do we for FromClient and
// FromCoordinator batches. A batch that no consumer or cleaner could read
// is refused with CORRUPT_MESSAGE instead of poisoning the partition.
//
// Uncompressed payloads are parsed in place: varints are read from the
// batch's own bytes and keys, values and headers are skipped by length, so
// the cost is one pass over the record headers with no allocation.
// Compressed payloads are decompressed as a stream through a pooled 64 KiB
// window and parsed the same way, so memory stays bounded however large the
// batch decompresses; the decompressed size is capped by DecompressLimit.

// recordError is the InvalidRecord error of record i of a batch. A batch
// whose header and CRC check out but whose records do not decode was built
// wrong, not damaged on the way: sending the same bytes again cannot
// succeed, so the code is Kafka's INVALID_RECORD (not retriable, KIP-467),
// while CORRUPT_MESSAGE (retriable) stays for CRC and framing failures.
func recordError(h *BatchHeader, i int32, what string, args ...any) error {
	return errs.New(errs.InvalidRecord, "batch at offset %d, record %d of %d: "+what,
		append([]any{h.BaseOffset, i, h.RecordCount}, args...)...)
}

// varint decodes the zigzag varint at b[i:] and returns it with its
// length in bytes, 0 if b holds no valid varint there. Varints of one and
// two bytes (values within ±8 KiB: attributes-sized fields, lengths of small
// records, offset deltas below 8192) take the inlined path.
func varint(b []byte, i int) (v int64, n int) {
	if v, n = varintFast(b, i); n == 0 {
		v, n = varintSlow(b, i)
	}
	return v, n
}

func varintFast(b []byte, i int) (v int64, n int) {
	if uint(i) < uint(len(b)) {
		c0 := b[i]
		if c0 < 0x80 {
			return int64(c0>>1) ^ -int64(c0&1), 1
		}
		if i+1 < len(b) && b[i+1] < 0x80 {
			u := int64(c0&0x7f) | int64(b[i+1])<<7
			return (u >> 1) ^ -(u & 1), 2
		}
	}
	return 0, 0
}

func varintSlow(b []byte, i int) (int64, int) {
	if i >= len(b) || i < 0 {
		return 0, 0
	}
	v, n := binary.Varint(b[i:])
	if n <= 0 {
		return 0, 0
	}
	return v, n
}

// checkRecordsInPlace validates the uncompressed records p of the client
// batch h: exactly h.RecordCount records that fill p, each of them whole and
// consistent, with offset deltas 0, 1, ..., RecordCount-1. It is the hot
// path of produce validation: one pass over the record headers, keys and
// values skipped by length, varints decoded inline.
func checkRecordsInPlace(p []byte, h *BatchHeader) error {
	pos := 0
	for i := int32(0); i < h.RecordCount; i++ {
		length, n := varintFast(p, pos)
		if n == 0 {
			length, n = varintSlow(p, pos)
		}
		if n == 0 {
			return recordError(h, i, "no record length where %d bytes are left", len(p)-pos)
		}
		pos += n
		if length <= 0 || length > int64(len(p)-pos) {
			return recordError(h, i, "length %d, but %d bytes are left", length, len(p)-pos)
		}
		end := pos + int(length)
		if err := checkRecord(p[:end], pos, h, i); err != nil {
			return err
		}
		pos = end
	}
	if pos != len(p) {
		return errs.New(errs.InvalidRecord, "batch at offset %d: %d bytes after its %d records", h.BaseOffset, len(p)-pos, h.RecordCount)
	}
	return nil
}

// checkRecord checks the record whose body (after its length varint) is
// r[start:], in the layout of Kafka's DefaultRecord: attributes, timestamp
// delta, offset delta (which must be i), key, value, headers; every length
// within the record and nothing left over.
func checkRecord(r []byte, start int, h *BatchHeader, i int32) error {
	end := len(r)
	j := start + 1 // attributes: any value is valid
	_, n := varintFast(r, j)
	if n == 0 {
		_, n = varintSlow(r, j)
	}
	if n == 0 {
		return recordError(h, i, "bad timestamp delta")
	}
	j += n
	delta, n := varintFast(r, j)
	if n == 0 {
		delta, n = varintSlow(r, j)
	}
	if n == 0 {
		return recordError(h, i, "bad offset delta")
	}
	if delta != int64(i) {
		return recordError(h, i, "offset delta %d, want %d (a client batch numbers its records from 0)", delta, i)
	}
	j += n
	// Key, then value: a varint length (-1 for null), then the bytes.
	for field := 0; field < 2; field++ {
		k, n := varintFast(r, j)
		if n == 0 {
			k, n = varintSlow(r, j)
		}
		j += n
		if n == 0 || k < -1 || k > int64(end-j) {
			return recordError(h, i, "%s length %d, but %d bytes of the record are left", [2]string{"key", "value"}[field], k, end-j)
		}
		if k > 0 {
			j += int(k)
		}
	}
	count, n := varintFast(r, j)
	if n == 0 {
		count, n = varintSlow(r, j)
	}
	if n == 0 {
		return recordError(h, i, "bad header count")
	}
	j += n
	if count != 0 {
		var err error
		if j, err = checkHeaders(r, j, count, h, i); err != nil {
			return err
		}
	}
	if j != end {
		return recordError(h, i, "%d bytes after its last field", end-j)
	}
	return nil
}

// checkHeaders checks count headers at r[j:] and returns the index after
// them.
func checkHeaders(r []byte, j int, count int64, h *BatchHeader, i int32) (int, error) {
	// Each header takes at least two bytes (two length varints).
	if count < 0 || count > int64(len(r)-j)/2 {
		return j, recordError(h, i, "header count %d, but %d bytes of the record are left", count, len(r)-j)
	}
	for k := int64(0); k < count; k++ {
		n, m := varint(r, j)
		j += m
		if m == 0 || n < 0 || n > int64(len(r)-j) {
			return j, recordError(h, i, "header %d: bad key length", k)
		}
		j += int(n)
		n, m = varint(r, j)
		j += m
		if m == 0 || n < -1 || n > int64(len(r)-j) {
			return j, recordError(h, i, "header %d: bad value length", k)
		}
		if n > 0 {
			j += int(n)
		}
	}
	return j, nil
}

// streamWindow is the read window of compressed-record validation: records
// are checked as they come out of the decompressor, so a batch of any
// decompressed size costs this much memory plus the decompressor's own.
const streamWindow = 64 << 10

// recordStream parses records out of a decompressed stream.
type recordStream struct {
	lim limitReader
	br  *bufio.Reader
	h   BatchHeader
	i   int32
	// left is what remains of the current record; reads beyond it fail.
	left int64
}

// limitReader fails with errDecompressLimit once more than n bytes are read.
type limitReader struct {
	r io.Reader
	n int64
}

var errDecompressLimit = errors.New("decompressed size limit reached")

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Only fail if the stream really has more.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errDecompressLimit
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var recordStreams = sync.Pool{New: func() any {
	s := &recordStream{}
	s.br = bufio.NewReaderSize(&s.lim, streamWindow)
	return s
}}

// err turns a read failure into the batch's error: a decompressor fault or
// a stream that ends early is CorruptMessage, the size cap MessageTooLarge.
func (s *recordStream) err(c Codec, limit int, err error, what string) error {
	switch {
	case errors.Is(err, errDecompressLimit):
		return errs.New(errs.MessageTooLarge, "batch at offset %d: %s records decompress to more than the limit of %d bytes",
			s.h.BaseOffset, c, limit)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return recordError(&s.h, s.i, "the decompressed records end inside the %s", what)
	}
	return recordError(&s.h, s.i, "decompressing %s: %v", c, err)
}

func (s *recordStream) varint() (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if s.left <= 0 {
			return 0, io.ErrUnexpectedEOF
		}
		b, err := s.br.ReadByte()
		if err != nil {
			return 0, err
		}
		s.left--
		if shift == 63 && b > 1 {
			return 0, errBadVarint
		}
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
		if shift == 63 {
			return 0, errBadVarint
		}
	}
}

var errBadVarint = errors.New("malformed varint")

func (s *recordStream) skip(n int64) error {
	if n > s.left {
		return io.ErrUnexpectedEOF
	}
	s.left -= n
	for n > 0 {
		k := int(min(n, math.MaxInt32))
		d, err := s.br.Discard(k)
		n -= int64(d)
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRecordsStream validates the records of a compressed client batch
// as r yields them; see checkRecordsInPlace for the rules.
func checkRecordsStream(r io.Reader, h *BatchHeader, c Codec, limit int) error {
	s := recordStreams.Get().(*recordStream)
	s.lim = limitReader{r: r, n: int64(limit)}
	s.br.Reset(&s.lim)
	s.h = *h
	defer func() {
		s.lim.r = nil
		s.br.Reset(nil)
		recordStreams.Put(s)
	}()
	for s.i = 0; s.i < h.RecordCount; s.i++ {
		// A record that fits the window is checked in place there, as an
		// uncompressed one is; a larger one field by field as it streams.
		if ok, err := s.inWindow(c, limit); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		s.left = math.MaxInt64
		length, err := s.varint()
		if err != nil {
			return s.fieldErr(c, limit, err, "record length")
		}
		if length < 1 {
			return recordError(h, s.i, "length %d", length)
		}
		s.left = length
		if err := s.recordBody(c, limit); err != nil {
			return err
		}
		if s.left != 0 {
			return recordError(h, s.i, "%d bytes after its last field", s.left)
		}
	}
	if _, err := s.br.ReadByte(); err == nil {
		return errs.New(errs.InvalidRecord, "batch at offset %d: bytes after its %d records", h.BaseOffset, h.RecordCount)
	} else if !errors.Is(err, io.EOF) {
		return s.fieldErr(c, limit, err, "end of the records")
	}
	return nil
}

// inWindow checks the next record in place if it fits the read window and
// reports whether it did; err is the record's error, if any.
func (s *recordStream) inWindow(c Codec, limit int) (bool, error) {
	head, err := s.br.Peek(binary.MaxVarintLen64)
	length, n := varintFast(head, 0)
	if n == 0 {
		length, n = varintSlow(head, 0)
	}
	if n == 0 {
		if len(head) == binary.MaxVarintLen64 {
			return false, recordError(&s.h, s.i, "bad record length")
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, s.err(c, limit, err, "record length")
		}
		return false, nil // too few bytes left for a varint: the slow path says why
	}
	if length <= 0 {
		return false, recordError(&s.h, s.i, "length %d", length)
	}
	if int64(n)+length > int64(s.br.Size()) {
		return false, nil
	}
	rec, err := s.br.Peek(n + int(length))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return false, s.err(c, limit, err, "record")
	}
	if err := checkRecord(rec, n, &s.h, s.i); err != nil {
		return false, err
	}
	_, _ = s.br.Discard(len(rec)) // peeked, so present
	return true, nil
}

func (s *recordStream) fieldErr(c Codec, limit int, err error, what string) error {
	if errors.Is(err, errBadVarint) {
		return recordError(&s.h, s.i, "bad %s", what)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) && s.left <= 0 {
		return recordError(&s.h, s.i, "the %s overruns the record's length", what)
	}
	return s.err(c, limit, err, what)
}

func (s *recordStream) recordBody(c Codec, limit int) error {
	h, i := &s.h, s.i
	if err := s.skip(1); err != nil { // attributes
		return s.fieldErr(c, limit, err, "attributes")
	}
	if _, err := s.varint(); err != nil {
		return s.fieldErr(c, limit, err, "timestamp delta")
	}
	delta, err := s.varint()
	if err != nil {
		return s.fieldErr(c, limit, err, "offset delta")
	}
	if delta != int64(i) {
		return recordError(h, i, "offset delta %d, want %d (a client batch numbers its records from 0)", delta, i)
	}
	for _, field := range [2]string{"key", "value"} {
		n, err := s.varint()
		if err != nil {
			return s.fieldErr(c, limit, err, field+" length")
		}
		if n < -1 || n > s.left {
			return recordError(h, i, "%s length %d, but %d bytes of the record are left", field, n, s.left)
		}
		if err := s.skip(max(n, 0)); err != nil {
			return s.fieldErr(c, limit, err, field)
		}
	}
	count, err := s.varint()
	if err != nil {
		return s.fieldErr(c, limit, err, "header count")
	}
	if count < 0 || count > s.left/2 {
		return recordError(h, i, "header count %d, but %d bytes of the record are left", count, s.left)
	}
	for j := int64(0); j < count; j++ {
		n, err := s.varint()
		if err != nil || n < 0 || n > s.left {
			return recordError(h, i, "header %d: bad key length", j)
		}
		if err := s.skip(n); err != nil {
			return s.fieldErr(c, limit, err, "header key")
		}
		if n, err = s.varint(); err != nil || n < -1 || n > s.left {
			return recordError(h, i, "header %d: bad value length", j)
		}
		if err := s.skip(max(n, 0)); err != nil {
			return s.fieldErr(c, limit, err, "header value")
		}
	}
	return nil
}

// snappyScratch holds decoded snappy payloads for validation: snappy has no
// streaming reader for xerial framing, so its records are decoded whole (at
// most the decompression limit) and checked in place.
var snappyScratch = sync.Pool{New: func() any { return new([]byte) }}

// checkRecords validates the records of the client batch b with header h,
// decompressing with at most limit bytes of output.
func checkRecords(b []byte, h *BatchHeader, limit int) error {
	payload := b[BatchHeaderSize:h.Size()]
	c := h.Attributes.Codec()
	switch c {
	case CodecNone:
		return checkRecordsInPlace(payload, h)
	case CodecSnappy:
		buf := snappyScratch.Get().(*[]byte)
		defer func() {
			if cap(*buf) <= 8<<20 { // do not keep a bomb's worth of memory
				snappyScratch.Put(buf)
			}
		}()
		out, err := Decompress((*buf)[:0], payload, c, limit)
		*buf = out[:0]
		if errs.Is(err, errs.MessageTooLarge) {
			return errs.New(errs.MessageTooLarge, "batch at offset %d: snappy records decompress to more than the limit of %d bytes",
				h.BaseOffset, limit)
		}
		if err != nil {
			return withBatchOffset(h, err)
		}
		return checkRecordsInPlace(out, h)
	case CodecGzip:
		d := gzipReaders.Get().(*gzipDec)
		defer gzipReaders.Put(d)
		d.br.Reset(payload)
		defer d.br.Reset(nil)
		if err := d.r.Reset(&d.br); err != nil {
			return errs.New(errs.InvalidRecord, "batch at offset %d: decompressing gzip: %v", h.BaseOffset, err)
		}
		return checkRecordsStream(&d.r, h, c, limit)
	case CodecLZ4:
		d := lz4Readers.Get().(*lz4Dec)
		defer lz4Readers.Put(d)
		d.br.Reset(payload)
		defer d.br.Reset(nil)
		d.r.Reset(&d.br)
		return checkRecordsStream(d.r, h, c, limit)
	case CodecZstd:
		d := zstdReaders.Get().(*zstdDec)
		defer zstdReaders.Put(d)
		d.br.Reset(payload)
		defer d.br.Reset(nil)
		if err := d.r.Reset(&d.br); err != nil {
			return errs.New(errs.InvalidRecord, "batch at offset %d: decompressing zstd: %v", h.BaseOffset, err)
		}
		return checkRecordsStream(d.r, h, c, limit)
	}
	return errs.New(errs.UnsupportedCompressionType, "batch at offset %d: unknown compression codec %d", h.BaseOffset, c)
}

// withBatchOffset prefixes a decompression error with the batch's offset,
// keeping its code.
func withBatchOffset(h *BatchHeader, err error) error {
	e := errs.From(err)
	return errs.New(e.Code, "batch at offset %d: %s", h.BaseOffset, e.Message)
}
