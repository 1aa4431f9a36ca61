package record

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Byte layout of a v2 record batch (Kafka's DefaultRecordBatch, KIP-98). The
// first two fields are the log overhead that every batch carries; the CRC
// covers everything from Attributes to the end of the batch, so BaseOffset,
// BatchLength and PartitionLeaderEpoch can be rewritten by a broker without
// recomputing it.
const (
	offBaseOffset           = 0
	offBatchLength          = 8
	offPartitionLeaderEpoch = 12
	offMagic                = 16
	offCRC                  = 17
	offAttributes           = 21
	offLastOffsetDelta      = 23
	offBaseTimestamp        = 27
	offMaxTimestamp         = 35
	offProducerID           = 43
	offProducerEpoch        = 51
	offBaseSequence         = 53
	offRecordCount          = 57

	// BatchHeaderSize is the size of a batch header, up to and including the
	// record count; the records follow it.
	BatchHeaderSize = 61
	// LogOverhead is the size of the base offset and batch length fields,
	// which the batch length does not count.
	LogOverhead = 12
	// CRCStart is where the CRC-32C coverage of a batch starts.
	CRCStart = offAttributes
	// Magic is the only batch format version Sluice reads and writes.
	Magic = 2
)

// Attribute bits of a v2 batch (KIP-98 added transactional and control;
// KIP-534 added the delete horizon).
const (
	codecMask        = 0x07
	timestampTypeBit = 0x08
	transactionalBit = 0x10
	controlBit       = 0x20
	deleteHorizonBit = 0x40
)

// Values of the producer fields in a batch written without idempotence.
const (
	noProducerID    = -1
	noProducerEpoch = -1
	noSequence      = -1
)

// NoPartitionLeaderEpoch is the partition leader epoch a producer writes: the
// leader stamps its own epoch on append.
const NoPartitionLeaderEpoch int32 = -1

// castagnoli is the CRC-32C table; hash/crc32 uses the SSE4.2 / ARMv8 CRC
// instructions for it where the CPU has them.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec is a batch compression codec, as stored in the low three attribute
// bits.
type Codec int8

// The codecs of Kafka's batch format.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// String returns the codec's name as Kafka's compression.type spells it.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return "unknown"
}

// ParseCodec parses a compression.type name ("none", "gzip", "snappy",
// "lz4", "zstd"; "uncompressed" is accepted for none).
func ParseCodec(s string) (Codec, bool) {
	switch s {
	case "none", "uncompressed", "":
		return CodecNone, true
	case "gzip":
		return CodecGzip, true
	case "snappy":
		return CodecSnappy, true
	case "lz4":
		return CodecLZ4, true
	case "zstd":
		return CodecZstd, true
	}
	return 0, false
}

// TimestampType says who set a batch's timestamps.
type TimestampType int8

const (
	// CreateTime means the producer set the timestamps.
	CreateTime TimestampType = 0
	// LogAppendTime means the leader set MaxTimestamp when it appended the
	// batch; record timestamps are to be read as MaxTimestamp.
	LogAppendTime TimestampType = 1
)

// String returns Kafka's name of the timestamp type.
func (t TimestampType) String() string {
	if t == LogAppendTime {
		return "LogAppendTime"
	}
	return "CreateTime"
}

// Attributes is the attributes field of a batch header.
type Attributes int16

// Codec returns the compression codec.
func (a Attributes) Codec() Codec { return Codec(a & codecMask) }

// TimestampType returns who set the batch's timestamps.
func (a Attributes) TimestampType() TimestampType {
	if a&timestampTypeBit != 0 {
		return LogAppendTime
	}
	return CreateTime
}

// Transactional reports whether the batch belongs to a transaction (KIP-98).
func (a Attributes) Transactional() bool { return a&transactionalBit != 0 }

// Control reports whether the batch holds control records (transaction
// markers) rather than user data.
func (a Attributes) Control() bool { return a&controlBit != 0 }

// HasDeleteHorizon reports whether the base timestamp holds the delete
// horizon set by compaction (KIP-534): tombstones and transaction markers in
// the batch may be removed once that time has passed.
func (a Attributes) HasDeleteHorizon() bool { return a&deleteHorizonBit != 0 }

// BatchHeader is a parsed batch header. It is a plain value: parsing one never
// allocates.
type BatchHeader struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           Attributes
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordCount          int32
}

// Size is the batch's size in bytes including the log overhead.
func (h *BatchHeader) Size() int { return int(h.BatchLength) + LogOverhead }

// LastOffset is the offset of the batch's last record. Compaction can remove
// records but keeps the batch's last offset, so it is always
// BaseOffset+LastOffsetDelta.
func (h *BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset that follows the batch.
func (h *BatchHeader) NextOffset() int64 { return h.LastOffset() + 1 }

// LastSequence is the sequence number of the batch's last record, or -1 for
// a batch without a producer id. Sequences wrap at math.MaxInt32.
func (h *BatchHeader) LastSequence() int32 {
	if h.BaseSequence < 0 {
		return noSequence
	}
	s := int64(h.BaseSequence) + int64(h.LastOffsetDelta)
	if s > 1<<31-1 {
		s -= 1 << 31
	}
	return int32(s)
}

// HasProducerID reports whether the batch was written by an idempotent or
// transactional producer.
func (h *BatchHeader) HasProducerID() bool { return h.ProducerID >= 0 }

// DeleteHorizon returns the compaction delete horizon (KIP-534) in Unix
// milliseconds, and whether the batch has one.
func (h *BatchHeader) DeleteHorizon() (int64, bool) {
	if h.Attributes.HasDeleteHorizon() {
		return h.BaseTimestamp, true
	}
	return 0, false
}

// ParseBatchHeader parses the header at the start of b. It checks only that b
// holds a whole header; use Validate or CheckBatch to check the batch.
func ParseBatchHeader(b []byte) (BatchHeader, bool) {
	if len(b) < BatchHeaderSize {
		return BatchHeader{}, false
	}
	_ = b[BatchHeaderSize-1]
	return BatchHeader{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		BatchLength:          int32(binary.BigEndian.Uint32(b[offBatchLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offPartitionLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           Attributes(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		RecordCount:          int32(binary.BigEndian.Uint32(b[offRecordCount:])),
	}, true
}

// PutBatchHeader writes h into the first BatchHeaderSize bytes of b. It does not
// compute the CRC; call UpdateCRC once the records are in place.
func PutBatchHeader(b []byte, h *BatchHeader) {
	_ = b[BatchHeaderSize-1]
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(h.BatchLength))
	binary.BigEndian.PutUint32(b[offPartitionLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[offMagic] = byte(h.Magic)
	binary.BigEndian.PutUint32(b[offCRC:], h.CRC)
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], uint64(h.BaseTimestamp))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(h.RecordCount))
}

// ComputeCRC returns the CRC-32C of a whole batch (from Attributes to the end).
func ComputeCRC(batch []byte) uint32 {
	return crc32.Checksum(batch[CRCStart:], castagnoli)
}

// UpdateCRC recomputes and stores the CRC of a whole batch.
func UpdateCRC(batch []byte) {
	binary.BigEndian.PutUint32(batch[offCRC:], ComputeCRC(batch))
}

// BaseOffset reads the base offset of the batch at the start of b.
func BaseOffset(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[offBaseOffset:])) }

// BatchSize reads the batch length field of the batch at the start of b and
// returns the whole batch's size (length plus log overhead). b must hold at
// least LogOverhead bytes.
func BatchSize(b []byte) int {
	return int(int32(binary.BigEndian.Uint32(b[offBatchLength:]))) + LogOverhead
}

// LastOffsetDelta reads the last offset delta of the batch at the start of b.
func LastOffsetDelta(b []byte) int32 {
	return int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:]))
}

// MaxTimestamp reads the max timestamp of the batch at the start of b.
func MaxTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])) }

// PartitionLeaderEpoch reads the partition leader epoch of the batch at the
// start of b.
func PartitionLeaderEpoch(b []byte) int32 {
	return int32(binary.BigEndian.Uint32(b[offPartitionLeaderEpoch:]))
}

// SetBaseOffset rewrites the base offset of the batch at the start of b in
// place. The CRC does not cover it.
func SetBaseOffset(b []byte, offset int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(offset))
}

// SetPartitionLeaderEpoch rewrites the partition leader epoch of the batch at
// the start of b in place. The CRC does not cover it (KIP-101 made it a
// broker-owned field for that reason).
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offPartitionLeaderEpoch:], uint32(epoch))
}

// SetLogAppendTime marks the whole batch at the start of b as carrying the
// log append time ts (Unix milliseconds) and recomputes its CRC, as a leader
// does for topics with message.timestamp.type=LogAppendTime. The attributes
// and max timestamp are covered by the CRC, so this costs one CRC pass.
func SetLogAppendTime(b []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(b[offAttributes:]) | timestampTypeBit
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	UpdateCRC(b[:BatchSize(b)])
}

// ToKmsg returns the header as franz-go's kmsg.RecordBatch with Records
// pointing at the batch's record bytes (still compressed if the batch is),
// for code that speaks the Kafka protocol through kmsg. batch must be the
// whole batch.
func (h *BatchHeader) ToKmsg(batch []byte) kmsg.RecordBatch {
	return kmsg.RecordBatch{
		FirstOffset:          h.BaseOffset,
		Length:               h.BatchLength,
		PartitionLeaderEpoch: h.PartitionLeaderEpoch,
		Magic:                h.Magic,
		CRC:                  int32(h.CRC),
		Attributes:           int16(h.Attributes),
		LastOffsetDelta:      h.LastOffsetDelta,
		FirstTimestamp:       h.BaseTimestamp,
		MaxTimestamp:         h.MaxTimestamp,
		ProducerID:           h.ProducerID,
		ProducerEpoch:        h.ProducerEpoch,
		FirstSequence:        h.BaseSequence,
		NumRecords:           h.RecordCount,
		Records:              batch[BatchHeaderSize:h.Size()],
	}
}
