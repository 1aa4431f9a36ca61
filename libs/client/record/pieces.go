package record

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// ResetPieces points the iterator at batches held in several pieces, read
// as if concatenated: the buffers a gRPC message arrived in (one per
// HTTP/2 frame, 16 KiB each, while a batch is up to 1 MiB). The pieces are
// not gathered into one buffer:
//
//   - a batch inside one piece is read in place, as Reset reads it;
//   - an uncompressed batch across pieces is checked in place (CRC-32C
//     over the pieces) and its records are read in place, except a record
//     that itself crosses pieces, which is copied into a buffer of its own;
//   - a compressed batch across pieces is gathered into a reused buffer
//     and decompressed from there (its records live in the decompression
//     buffer, as with Reset).
//
// The checks and errors are those of Reset over the concatenated bytes.
// Records of uncompressed batches point into the pieces or into the
// iterator's buffer of copied records, which the next ResetPieces reuses:
// they stay valid until then, as long as the pieces do. Records of
// compressed batches are valid until the next call to Next, NextBatch or
// Reset. The iterator keeps its own copy of the piece list; the pieces
// must not change while it reads them.
func (it *Iterator) ResetPieces(pieces [][]byte) {
	it.Reset(nil)
	it.arena = it.arena[:0]
	it.pieces = append(it.pieces[:0], pieces...)
	it.sp = newSpan(it.pieces)
	it.split = true
}

// more reports whether batches are left to enter after the current one.
func (it *Iterator) more() bool {
	if it.split {
		return it.sp.n > it.batchLeft
	}
	return len(it.buf) > 0
}

// trailing is the number of payload bytes of the current batch not read.
func (it *Iterator) trailing() int {
	if it.splitBatch {
		return it.batchLeft
	}
	return len(it.recs)
}

// enterPiece enters the next batch of the pieces.
func (it *Iterator) enterPiece() bool {
	it.sp.skip(it.batchLeft) // the unread rest of the current batch
	it.batchLeft, it.splitBatch = 0, false
	if head := it.sp.head(); len(head) >= LogOverhead {
		if size := BatchSize(head); size >= BatchHeaderSize && size <= len(head) {
			n, ok := it.enter(head) // the whole batch is in this piece
			if ok {
				it.sp.skip(n)
			}
			return ok
		}
	}
	var hb [BatchHeaderSize]byte
	k := it.sp.peek(hb[:])
	if k == BatchHeaderSize {
		size := BatchSize(hb[:])
		h, _ := ParseBatchHeader(hb[:])
		if size >= BatchHeaderSize && size <= it.sp.n && h.Attributes.Codec() == CodecNone {
			// CheckBatch's checks, with the CRC taken over the pieces; the
			// size checks before them hold (size <= it.sp.n, and a message
			// never reaches math.MaxInt32 bytes).
			err := checkHeader(&h, size, func() uint32 { return it.sp.crc(CRCStart, size-CRCStart) },
				ValidateOptions{Origin: FromReplica})
			if err != nil {
				it.err, it.errAt = err, h.BaseOffset
				return false
			}
			it.sp.skip(BatchHeaderSize)
			it.hdr = h
			it.recs = nil
			it.batchLeft = size - BatchHeaderSize
			it.splitBatch = true
			it.left = h.RecordCount
			it.lastDel = -1
			it.inBatch = true
			return true
		}
	}
	// A compressed batch, or one that does not check: read a copy. Only
	// bytes present are copied, never more than the batch claims.
	n := it.sp.n
	if k >= LogOverhead {
		switch size := BatchSize(hb[:]); {
		case size < BatchHeaderSize:
			n = k // the error is in the first LogOverhead bytes
		case size < n:
			n = size
		}
	}
	it.gather = it.sp.appendTo(it.gather[:0], n)
	size, ok := it.enter(it.gather)
	if !ok {
		return false
	}
	it.sp.skip(size)
	if it.hdr.Attributes.Codec() == CodecNone {
		// Not reached (an uncompressed batch that checks is read in
		// place), but records must never point into the reused buffer.
		it.recs = append([]byte(nil), it.recs...)
	}
	return true
}

// decodeSplit decodes the next record of an uncompressed batch read across
// pieces.
func (it *Iterator) decodeSplit() bool {
	// A varint is at most 10 bytes, and Varint's verdict on the first 10
	// is its verdict on the whole rest of the batch.
	var length int64
	var n int
	if head := it.sp.head(); len(head) >= min(binary.MaxVarintLen64, it.batchLeft) {
		length, n = binary.Varint(head[:min(len(head), it.batchLeft)])
	} else {
		var vb [binary.MaxVarintLen64]byte
		k := it.sp.peek(vb[:min(len(vb), it.batchLeft)])
		length, n = binary.Varint(vb[:k])
	}
	if n <= 0 || length < 0 || length > int64(it.batchLeft-n) {
		it.err = errs.New(errs.CorruptMessage, "batch at offset %d: bad record length", it.hdr.BaseOffset)
		return false
	}
	size := n + int(length)
	whole := it.sp.head()
	if len(whole) >= size {
		whole = whole[:size:size]
	} else {
		// The record crosses pieces: copy it into the arena, which only
		// grows until the next ResetPieces, so earlier records keep their
		// bytes.
		if cap(it.arena)-len(it.arena) < size {
			it.arena = make([]byte, 0, max(size, arenaSize))
		}
		start := len(it.arena)
		it.arena = it.sp.appendTo(it.arena, size)
		whole = it.arena[start:len(it.arena):len(it.arena)]
	}
	if !it.parseRecord(whole, length) {
		return false
	}
	it.sp.skip(size)
	it.batchLeft -= size
	return true
}

// arenaSize is the size of the buffer for records that cross pieces: with 16
// KiB pieces about one record in every 16 KiB crosses, so a 1 MiB fetch
// chunk of 1 KiB records copies about 64 KiB.
const arenaSize = 128 << 10

// span is a run of bytes in several pieces, consumed from the front.
type span struct {
	p [][]byte // p[0] is the current piece, possibly partly consumed
	n int      // bytes left
}

func newSpan(p [][]byte) span {
	s := span{p: p}
	for _, b := range p {
		s.n += len(b)
	}
	return s
}

// head returns the bytes left in the current piece (nil at the end).
func (s *span) head() []byte {
	for len(s.p) > 0 && len(s.p[0]) == 0 {
		s.p = s.p[1:]
	}
	if len(s.p) == 0 {
		return nil
	}
	return s.p[0]
}

// skip consumes k bytes; k must not exceed s.n.
func (s *span) skip(k int) {
	s.n -= k
	for k > 0 {
		if k < len(s.p[0]) {
			s.p[0] = s.p[0][k:]
			return
		}
		k -= len(s.p[0])
		s.p = s.p[1:]
	}
}

// peek copies the first bytes into dst without consuming them and returns
// how many it copied.
func (s *span) peek(dst []byte) int {
	n := 0
	for _, b := range s.p {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], b)
	}
	return n
}

// appendTo appends the first k bytes (k <= s.n) to dst without consuming
// them.
func (s *span) appendTo(dst []byte, k int) []byte {
	for _, b := range s.p {
		if k == 0 {
			break
		}
		b = b[:min(k, len(b))]
		dst = append(dst, b...)
		k -= len(b)
	}
	return dst
}

// crc returns the CRC-32C of the k bytes from off on (off+k <= s.n).
func (s *span) crc(off, k int) uint32 {
	var c uint32
	for _, b := range s.p {
		if k == 0 {
			break
		}
		if off >= len(b) {
			off -= len(b)
			continue
		}
		b = b[off:]
		off = 0
		b = b[:min(k, len(b))]
		c = crc32.Update(c, castagnoli, b)
		k -= len(b)
	}
	return c
}
