// Package record is Sluice's record-batch format: Kafka's v2 RecordBatch
// byte layout (magic 2, CRC-32C over attributes..end, KIP-98), used end to
// end. A producer's batch is validated, stored, replicated and fetched as the
// same bytes, so a Kafka-protocol listener can serve them unchanged.
//
// The package has five parts:
//
//   - Header access without decoding records: ParseBatchHeader, CheckBatch
//     and Validate (CRC, sizes, magic, record count against last offset
//     delta, max.message.bytes), and in-place rewrites of the fields a leader
//     owns and the CRC does not cover (SetBaseOffset,
//     SetPartitionLeaderEpoch, AssignOffsets). Producer id, epoch and
//     sequence are exposed for idempotence.
//   - Builder, which encodes plain records (nullable key and value, headers,
//     timestamp) into a batch with any codec, reusing its buffers.
//   - Iterator, which decodes records, decompressing with a hard cap on the
//     decompressed size so a small hostile batch cannot exhaust memory.
//   - Rewriter, which re-encodes a batch keeping some of its records with
//     their offsets, for compaction.
//   - Compress and Decompress for gzip, snappy (xerial framing, as Kafka's
//     Java client writes it; raw blocks are read too), lz4 (frame format,
//     KIP-57) and zstd (KIP-110).
//
// Records are encoded and decoded with franz-go's kmsg.Record, and Header is
// kmsg.Header, so Sluice and kmsg share one definition of the wire format.
//
// Errors are *errs.Error values carrying CorruptMessage, MessageTooLarge,
// InvalidRecord or UnsupportedCompressionType, ready to return to a client.
package record
