package storage

import (
	"hash/crc32"
	"slices"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// AppendAsFollowerPieces is AppendAsFollower for batches held in several
// pieces, read as if concatenated: the buffers a replicated chunk arrived
// in (one per HTTP/2 frame, 16 KiB each, while a batch is up to 1 MiB). The
// pieces are checked and written where they lie, in one vectored write,
// instead of first being gathered into one buffer: on a follower that
// gathering copied every replicated byte once more. The checks and errors
// are AppendAsFollower's over the concatenated bytes.
func (l *Log) AppendAsFollowerPieces(pieces [][]byte) (AppendResult, error) {
	if len(pieces) <= 1 {
		var b []byte
		if len(pieces) == 1 {
			b = pieces[0]
		}
		return l.AppendAsFollower(b)
	}
	data, sum, err := checkPieces(pieces)
	if err != nil {
		return AppendResult{}, err
	}
	if err := l.check(); err != nil {
		return AppendResult{}, err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return AppendResult{}, errClosed
	}
	return l.appendFollowerLocked(data, &sum)
}

// appendFollowerLocked appends checked replicated batches. appendMu must
// be held.
func (l *Log) appendFollowerLocked(data appendData, sum *record.Summary) (AppendResult, error) {
	if sum.FirstOffset < l.leo {
		return AppendResult{}, errs.New(errs.InvalidRecord, "replicated batch starts at offset %d, below the log end offset %d", sum.FirstOffset, l.leo)
	}
	if latest, ok := l.epochs.latest(); ok && sum.FirstEpoch < latest.Epoch {
		return AppendResult{}, errs.New(errs.InvalidRecord, "replicated batch has leader epoch %d, older than the log's %d", sum.FirstEpoch, latest.Epoch)
	}
	res := AppendResult{FirstOffset: sum.FirstOffset, LastOffset: sum.LastOffset, LogAppendTime: -1, MaxTimestamp: sum.MaxTimestamp}
	return l.appendLocked(data, sum, res, -1)
}

// appendData is what an append writes: the batches in one buffer (buf), or
// in several pieces with each batch's header parsed (pieces, heads).
type appendData struct {
	buf    []byte
	pieces [][]byte
	heads  []pieceBatch
	n      int
}

// pieceBatch is one batch of a pieces append: its header, and for a
// control batch (whose record the producer state reads) its bytes
// gathered; other batches are never read whole.
type pieceBatch struct {
	h       record.BatchHeader
	control []byte
}

func (d *appendData) size() int {
	if d.pieces == nil {
		return len(d.buf)
	}
	return d.n
}

// writeAt writes the batches at off, all or nothing as WriteAt does.
func (d *appendData) writeAt(f vfs.File, off int64) error {
	if d.pieces == nil {
		_, err := f.WriteAt(d.buf, off)
		return err
	}
	return vfs.WriteVecAt(f, d.pieces, off)
}

// each calls fn with every batch's header and, where the batch is whole in
// memory or is a control batch, its bytes (nil otherwise).
func (d *appendData) each(fn func(h record.BatchHeader, b []byte)) {
	if d.pieces == nil {
		for it := record.Batches(d.buf); it.Next(); {
			fn(it.Header(), it.Bytes())
		}
		return
	}
	for i := range d.heads {
		fn(d.heads[i].h, d.heads[i].control)
	}
}

// pieceCRC is the CRC-32C table (hash/crc32 uses the CPU's instructions).
var pieceCRC = crc32.MakeTable(crc32.Castagnoli)

// checkPieces checks replicated batches held in pieces, with the checks of
// record.Validate for record.FromReplica over the concatenated bytes. A
// batch inside one piece is checked by record.CheckBatch in place; one
// across pieces has its header copied out (61 bytes), is checked by
// record.CheckBatch on the header as a batch of its own (CheckBatch reads
// no records of a replica's batch), and its CRC-32C is taken over the
// pieces.
func checkPieces(pieces [][]byte) (appendData, record.Summary, error) {
	d := appendData{pieces: pieces}
	for _, p := range pieces {
		d.n += len(p)
	}
	sum := record.Summary{Bytes: d.n, MaxTimestamp: -1}
	if d.n == 0 {
		return d, sum, errs.New(errs.InvalidRecord, "no record batches")
	}
	var hb [record.BatchHeaderSize]byte
	sp := pieceSpan{p: slices.Clone(pieces), n: d.n} // the span trims its own copy
	for sp.n > 0 {
		var (
			h   record.BatchHeader
			err error
		)
		size := 0
		if head := sp.head(); len(head) >= record.LogOverhead && record.BatchSize(head) <= len(head) {
			// Whole in this piece.
			h, err = record.CheckBatch(head, replicaChecks)
			size = record.BatchSize(head)
		} else {
			k := sp.peek(hb[:])
			if k < record.LogOverhead {
				_, err = record.CheckBatch(hb[:k], replicaChecks) // reports the truncation
				return d, sum, err
			}
			size = record.BatchSize(hb[:])
			if size < record.BatchHeaderSize || size > sp.n || k < record.BatchHeaderSize {
				// CheckBatch on what is present reports the bad length.
				_, err = record.CheckBatch(hb[:k], replicaChecks)
				if err == nil {
					err = errs.New(errs.CorruptMessage, "batch truncated: length says %d bytes, %d present", size, sp.n)
				}
				return d, sum, err
			}
			h, err = checkSplitHeader(hb, size, sp.crc(record.CRCStart, size-record.CRCStart))
		}
		if err != nil {
			return d, sum, err
		}
		if err := sum.Add(&h, record.FromReplica); err != nil {
			return d, sum, err
		}
		pb := pieceBatch{h: h}
		if h.Attributes.Control() {
			pb.control = sp.appendTo(nil, size)
		}
		d.heads = append(d.heads, pb)
		sp.skip(size)
	}
	return d, sum, nil
}

// checkSplitHeader checks the header of a batch of size bytes that lies
// across pieces and whose CRC-32C (from record.CRCStart on) is crc. It
// runs record.CheckBatch on the header alone, presented as a batch with no
// records whose CRC is the one computed, so the rules stay CheckBatch's;
// the count checks that depend on the real size are made here.
func checkSplitHeader(hb [record.BatchHeaderSize]byte, size int, crc uint32) (record.BatchHeader, error) {
	h, _ := record.ParseBatchHeader(hb[:])
	if h.Magic != record.Magic {
		return h, errs.New(errs.CorruptMessage, "batch magic %d, only %d is supported", h.Magic, record.Magic)
	}
	if crc != h.CRC {
		return h, errs.New(errs.CorruptMessage, "batch at offset %d: CRC-32C %08x, header says %08x", h.BaseOffset, crc, h.CRC)
	}
	if h.Attributes.Codec() == record.CodecNone && int64(size-record.BatchHeaderSize) < int64(h.RecordCount)*minRecordBytes {
		return h, errs.New(errs.InvalidRecord, "batch at offset %d: %d records cannot fit in %d bytes",
			h.BaseOffset, h.RecordCount, size-record.BatchHeaderSize)
	}
	// The header alone as a batch: length 49, no records, its CRC made to
	// match, so CheckBatch makes every other check on it.
	alone := hb
	putBatchLength(alone[:], record.BatchHeaderSize-record.LogOverhead)
	putRecordCount(alone[:], 0)
	record.UpdateCRC(alone[:])
	if _, err := record.CheckBatch(alone[:], record.ValidateOptions{MaxBatchBytes: replicaChecks.MaxBatchBytes, Origin: record.FromReplica}); err != nil {
		return h, err
	}
	if int64(h.RecordCount) > int64(h.LastOffsetDelta)+1 || h.RecordCount < 0 {
		return h, errs.New(errs.InvalidRecord, "batch at offset %d: %d records in %d offsets",
			h.BaseOffset, h.RecordCount, int64(h.LastOffsetDelta)+1)
	}
	if size > replicaChecks.MaxBatchBytes {
		return h, errs.New(errs.MessageTooLarge, "batch of %d bytes exceeds max.message.bytes %d", size, replicaChecks.MaxBatchBytes)
	}
	return h, nil
}

// minRecordBytes is the smallest encoding of a record (record.CheckBatch's
// bound on how many records an uncompressed payload can hold).
const minRecordBytes = 7

// Offsets of the header fields checkSplitHeader rewrites (Kafka v2
// RecordBatch layout).
const (
	offBatchLength = 8
	offRecordCount = 57
)

func putBatchLength(b []byte, n int) {
	b[offBatchLength], b[offBatchLength+1], b[offBatchLength+2], b[offBatchLength+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

func putRecordCount(b []byte, n int) {
	b[offRecordCount], b[offRecordCount+1], b[offRecordCount+2], b[offRecordCount+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

// pieceSpan is a run of bytes in several pieces, consumed from the front.
type pieceSpan struct {
	p [][]byte // p[0] is the current piece, possibly partly consumed
	n int      // bytes left
}

// head returns the bytes left in the current piece (nil at the end).
func (s *pieceSpan) head() []byte {
	for len(s.p) > 0 && len(s.p[0]) == 0 {
		s.p = s.p[1:]
	}
	if len(s.p) == 0 {
		return nil
	}
	return s.p[0]
}

// skip consumes k bytes (k <= s.n).
func (s *pieceSpan) skip(k int) {
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
func (s *pieceSpan) peek(dst []byte) int {
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
func (s *pieceSpan) appendTo(dst []byte, k int) []byte {
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
func (s *pieceSpan) crc(off, k int) uint32 {
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
		c = crc32.Update(c, pieceCRC, b)
		k -= len(b)
	}
	return c
}
