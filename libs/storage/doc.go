// Package storage is the on-disk log of a partition replica: the heart of a
// storage node, deciding Sluice's speed and durability.
//
// A Log is a directory of segments, each a <20-digit base offset>.log file
// of record batches in the Kafka v2 format (package record), with a sparse
// offset index (.index) and time index (.timeindex) beside it:
//
//	00000000000000000000.log  .index  .timeindex
//	00000000000001048576.log  .index  .timeindex   <- active segment
//	leader-epoch-checkpoint       epoch -> start offset (KIP-101)
//	recovery-point-checkpoint     offset, segment and position known durable
//	log-start-offset-checkpoint   first offset after retention / DeleteRecords
//	cleaner-offset-checkpoint     how far compaction has cleaned
//	.clean-shutdown               present only between Close and Open
//
// Writes are sequential appends to the active segment. A leader append
// (AppendAsLeader) validates batches by their headers and CRCs, assigns
// offsets and stamps its leader epoch in place, without decoding records; a
// follower append (AppendAsFollower) keeps the leader's offsets and epochs.
// Durability follows the topic config: flush.messages, flush.ms and
// sluice.fsync.before.ack, which makes AppendSync wait for a group commit
// where one fdatasync covers every append waiting at that moment. A failed
// fsync takes the log offline for good.
//
// Reads (Read) go offset -> sparse index -> file position and return chunks
// of whole batches that are slices of the segment's memory map, bounded by a
// caller-supplied offset (high watermark or last stable offset): the fetch
// path streams them from the page cache with no decode and no copy and
// releases them when sent. OffsetForTimestamp serves ListOffsets by time.
//
// Recovery after a crash scans only from the recovery point, verifies each
// batch's CRC, truncates a torn or corrupt tail and rebuilds the indexes of
// what it scanned; a clean shutdown skips the scan. Retention deletes whole
// segments (retention.ms, retention.bytes) and advances the log start;
// DeleteRecordsBefore moves the log start explicitly; TruncateTo and
// TruncateFullyAndStartAt serve replication. Compact cleans logs with
// cleanup.policy=compact in the background, never touching the active
// segment, keeping the latest record per key and removing tombstones after
// delete.retention.ms (KIP-534), and swaps the result in crash-safely.
//
// Every disk access goes through vfs.FS, so tests inject faults with
// vfs.FaultFS, and every notion of time through Clock.
package storage
