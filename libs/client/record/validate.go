package record

import (
	"github.com/sluice-io/sluice/libs/client/errs"
)

// DefaultMaxBatchBytes is the default max.message.bytes: the largest batch,
// log overhead included, that a log accepts. It is Kafka's default: 1 MiB of
// batch plus the 12-byte log overhead.
const DefaultMaxBatchBytes = 1<<20 + LogOverhead

// minRecordSize is the smallest encoding of a record: length, attributes,
// timestamp delta, offset delta, key length, value length and header count,
// one byte each. It bounds how many records an uncompressed payload can hold.
const minRecordSize = 7

// Origin says who produced the batches being validated; the checks differ.
type Origin int8

const (
	// FromClient is a producer's batch: its records must be dense
	// (RecordCount == LastOffsetDelta+1, at least one record), and it must
	// not carry control or compaction bits, which only brokers set.
	FromClient Origin = iota
	// FromCoordinator is a batch written by a transaction or group
	// coordinator: like FromClient, but control batches (transaction
	// markers) are allowed.
	FromCoordinator
	// FromReplica is a batch copied from a leader's log: it keeps the
	// leader's offsets and epochs, may have fewer records than offsets
	// (compaction removes records but keeps the batch's last offset), and
	// consecutive batches must have increasing offsets and non-decreasing
	// leader epochs.
	FromReplica
)

// ValidateOptions tunes Validate.
type ValidateOptions struct {
	// MaxBatchBytes is the largest batch accepted, log overhead included
	// (max.message.bytes). Zero means DefaultMaxBatchBytes.
	MaxBatchBytes int
	// Origin selects the checks; see Origin.
	Origin Origin
	// DecompressLimit caps the decompressed size of one compressed client
	// batch while its records are checked; 0 means DefaultDecompressLimit,
	// the same cap the Iterator applies, so every batch accepted can be
	// read back.
	DecompressLimit int
}

// Summary describes a validated buffer of batches. Offsets are as stored in
// the buffer, which for a producer's batches means meaningless until the
// leader assigns them.
type Summary struct {
	// Batches is the number of batches.
	Batches int
	// Bytes is the buffer's size.
	Bytes int
	// Offsets is the number of offsets the batches occupy: the sum of
	// LastOffsetDelta+1 over the batches.
	Offsets int64
	// Records is the sum of the batches' record counts.
	Records int64
	// FirstOffset is the first batch's base offset, LastOffset the last
	// batch's last offset.
	FirstOffset, LastOffset int64
	// FirstEpoch and LastEpoch are the partition leader epochs of the first
	// and last batch.
	FirstEpoch, LastEpoch int32
	// MaxTimestamp is the largest MaxTimestamp of any batch, -1 if none has
	// one, and MaxTimestampBatch the index of the first batch that has it.
	MaxTimestamp      int64
	MaxTimestampBatch int
	// Compressed reports whether any batch is compressed.
	Compressed bool
	// Control reports whether any batch is a control batch.
	Control bool
}

// CheckBatch validates the batch at the start of b: size fields, magic,
// CRC-32C, codec, record count against the last offset delta, and the bits
// only brokers may set. For FromClient and FromCoordinator batches it also
// decodes every record, decompressing if needed (as Kafka's LogValidator
// does): each record whole, lengths within bounds, offset deltas 0..n-1,
// header counts and lengths valid, exactly RecordCount records and no bytes
// after them. FromReplica batches were checked by their leader and are read
// by header only. It returns the parsed header. Errors are *errs.Error with
// CorruptMessage, MessageTooLarge, InvalidRecord or
// UnsupportedCompressionType. b may hold more bytes after the batch.
func CheckBatch(b []byte, opts ValidateOptions) (BatchHeader, error) {
	maxBytes := opts.MaxBatchBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBatchBytes
	}
	if len(b) < LogOverhead {
		return BatchHeader{}, errs.New(errs.CorruptMessage, "batch truncated: %d bytes, need at least %d", len(b), LogOverhead)
	}
	size := BatchSize(b)
	if size < BatchHeaderSize {
		return BatchHeader{}, errs.New(errs.CorruptMessage, "batch length %d is below the header size %d", size-LogOverhead, BatchHeaderSize-LogOverhead)
	}
	// A length beyond the bytes present is a corrupt or truncated batch,
	// whatever its size: random bytes would otherwise read as a "batch of
	// 762212224 bytes" that is merely too large.
	if size > len(b) {
		return BatchHeader{}, errs.New(errs.CorruptMessage, "batch truncated: length says %d bytes, %d present", size, len(b))
	}
	if size > maxBytes {
		return BatchHeader{}, errs.New(errs.MessageTooLarge, "batch of %d bytes exceeds max.message.bytes %d", size, maxBytes)
	}
	h, _ := ParseBatchHeader(b)
	if h.Magic != Magic {
		return h, errs.New(errs.CorruptMessage, "batch magic %d, only %d is supported", h.Magic, Magic)
	}
	if crc := ComputeCRC(b[:size]); crc != h.CRC {
		return h, errs.New(errs.CorruptMessage, "batch at offset %d: CRC-32C %08x, header says %08x", h.BaseOffset, crc, h.CRC)
	}
	if c := h.Attributes.Codec(); c > CodecZstd {
		return h, errs.New(errs.UnsupportedCompressionType, "batch at offset %d: unknown compression codec %d", h.BaseOffset, c)
	}
	if h.RecordCount < 0 || h.LastOffsetDelta < 0 {
		return h, errs.New(errs.InvalidRecord, "batch at offset %d: negative record count %d or last offset delta %d",
			h.BaseOffset, h.RecordCount, h.LastOffsetDelta)
	}
	if h.BaseOffset < 0 && opts.Origin == FromReplica {
		return h, errs.New(errs.CorruptMessage, "batch has negative base offset %d", h.BaseOffset)
	}
	if h.BaseOffset > (1<<63-1)-int64(h.LastOffsetDelta) {
		return h, errs.New(errs.CorruptMessage, "batch offsets overflow: base %d, last delta %d", h.BaseOffset, h.LastOffsetDelta)
	}
	if int64(h.RecordCount) > int64(h.LastOffsetDelta)+1 {
		return h, errs.New(errs.InvalidRecord, "batch at offset %d: %d records in %d offsets",
			h.BaseOffset, h.RecordCount, int64(h.LastOffsetDelta)+1)
	}
	if h.Attributes.Codec() == CodecNone && int64(size-BatchHeaderSize) < int64(h.RecordCount)*minRecordSize {
		return h, errs.New(errs.InvalidRecord, "batch at offset %d: %d records cannot fit in %d bytes",
			h.BaseOffset, h.RecordCount, size-BatchHeaderSize)
	}
	if h.Attributes.Transactional() && h.ProducerID < 0 {
		return h, errs.New(errs.InvalidRecord, "transactional batch at offset %d has no producer id", h.BaseOffset)
	}
	if opts.Origin == FromReplica {
		return h, nil
	}
	// Kafka's LogValidator rule for v2 client batches: offsets are dense, so
	// the leader can assign them from the header alone.
	if h.RecordCount == 0 || int64(h.RecordCount) != int64(h.LastOffsetDelta)+1 {
		return h, errs.New(errs.InvalidRecord, "batch has %d records but last offset delta %d", h.RecordCount, h.LastOffsetDelta)
	}
	if h.Attributes.HasDeleteHorizon() {
		return h, errs.New(errs.InvalidRecord, "batch carries the compaction delete-horizon bit, which only a broker sets")
	}
	if h.Attributes.Control() && opts.Origin == FromClient {
		return h, errs.New(errs.InvalidRecord, "clients may not write control batches")
	}
	limit := opts.DecompressLimit
	if limit <= 0 {
		limit = DefaultDecompressLimit
	}
	if err := checkRecords(b, &h, limit); err != nil {
		return h, err
	}
	return h, nil
}

// Validate checks a buffer of concatenated batches with CheckBatch and
// returns a summary. It accepts all or nothing: any bad batch, an empty
// buffer or trailing bytes that are not a whole batch fail the whole buffer.
// For FromReplica it also checks that offsets increase from batch to batch
// and leader epochs never decrease. Validate does not allocate unless it
// fails (decompressors and read windows are pooled).
func Validate(buf []byte, opts ValidateOptions) (Summary, error) {
	s := Summary{Bytes: len(buf), MaxTimestamp: -1}
	if len(buf) == 0 {
		return s, errs.New(errs.InvalidRecord, "no record batches")
	}
	for pos := 0; pos < len(buf); {
		h, err := CheckBatch(buf[pos:], opts)
		if err != nil {
			return s, err
		}
		if err := s.Add(&h, opts.Origin); err != nil {
			return s, err
		}
		pos += h.Size()
	}
	return s, nil
}

// Add counts batch h, checked by CheckBatch, into the summary of the
// batches before it; for FromReplica it checks that offsets increase from
// batch to batch and leader epochs never decrease.
func (s *Summary) Add(h *BatchHeader, origin Origin) error {
	if s.Batches == 0 {
		s.FirstOffset = h.BaseOffset
		s.FirstEpoch = h.PartitionLeaderEpoch
	} else if origin == FromReplica {
		if h.BaseOffset <= s.LastOffset {
			return errs.New(errs.CorruptMessage, "batch base offset %d does not follow the previous batch's last offset %d",
				h.BaseOffset, s.LastOffset)
		}
		if h.PartitionLeaderEpoch < s.LastEpoch {
			return errs.New(errs.CorruptMessage, "batch at offset %d has leader epoch %d below the previous batch's %d",
				h.BaseOffset, h.PartitionLeaderEpoch, s.LastEpoch)
		}
	}
	s.LastOffset = h.LastOffset()
	s.LastEpoch = h.PartitionLeaderEpoch
	s.Offsets += int64(h.LastOffsetDelta) + 1
	s.Records += int64(h.RecordCount)
	if h.MaxTimestamp > s.MaxTimestamp {
		s.MaxTimestamp = h.MaxTimestamp
		s.MaxTimestampBatch = s.Batches
	}
	if h.Attributes.Codec() != CodecNone {
		s.Compressed = true
	}
	if h.Attributes.Control() {
		s.Control = true
	}
	s.Batches++
	return nil
}

// BatchIter iterates over the batches of a buffer that Validate accepted,
// without allocating:
//
//	for it := record.Batches(buf); it.Next(); {
//		h, b := it.Header(), it.Bytes()
//		...
//	}
type BatchIter struct {
	buf  []byte
	pos  int
	cur  []byte
	hdr  BatchHeader
	done bool
}

// Batches returns an iterator over the concatenated batches in buf. It stops
// at the first incomplete batch; use Validate first to reject such buffers.
func Batches(buf []byte) BatchIter { return BatchIter{buf: buf} }

// Next advances to the next batch and reports whether there is one.
func (it *BatchIter) Next() bool {
	if it.done {
		return false
	}
	rest := it.buf[it.pos:]
	if len(rest) < BatchHeaderSize {
		it.done = true
		return false
	}
	size := BatchSize(rest)
	if size < BatchHeaderSize || size > len(rest) {
		it.done = true
		return false
	}
	it.cur = rest[:size:size]
	it.hdr, _ = ParseBatchHeader(it.cur)
	it.pos += size
	return true
}

// Header returns the current batch's header.
func (it *BatchIter) Header() BatchHeader { return it.hdr }

// Bytes returns the current batch's bytes, aliasing the buffer.
func (it *BatchIter) Bytes() []byte { return it.cur }

// Position returns the byte position of the current batch in the buffer.
func (it *BatchIter) Position() int { return it.pos - len(it.cur) }

// AssignOffsets rewrites, in place, the base offset and partition leader
// epoch of every batch in a validated buffer so that the first batch starts
// at base, and returns the offset after the last batch. Neither field is
// covered by the CRC, so this is a few stores per batch.
func AssignOffsets(buf []byte, base int64, epoch int32) int64 {
	next := base
	for pos := 0; pos+BatchHeaderSize <= len(buf); {
		b := buf[pos:]
		SetBaseOffset(b, next)
		SetPartitionLeaderEpoch(b, epoch)
		next += int64(LastOffsetDelta(b)) + 1
		pos += BatchSize(b)
	}
	return next
}
