// Package check checks histories of a Kafka-style transactional workload
// for the anomalies Jepsen's Kafka queue workload looks for, adapted to
// Sluice's transactions and read_committed consumers.
//
// # Model
//
// Clients record two kinds of operation in a [History]:
//
//   - A [Txn] is one transaction of one producer: its sends (topic,
//     partition, key, value; every value unique per topic across the
//     history), optionally the consumer offsets it commits
//     (read-process-write), whether the client asked to commit or to abort,
//     and the outcome the client saw: [OK], [Fail] (certainly took no effect)
//     or [Info] (unknown, e.g. a timeout on EndTxn). A send whose produce was
//     acknowledged may carry its offset.
//   - A [Poll] is one poll of one consumer: its isolation level, the reads it
//     returned in order, positions set before it (assignment, seek,
//     rebalance) and, when known, its positions after it.
//
// A transaction is committed when it ended OK with a commit, aborted when it
// ended OK with an abort, failed, or asked to abort (a client that asked to
// abort must never see its values become visible, whatever the answer; this is
// what a late EndTxn committing the next transaction breaks), and
// indeterminate when it asked to commit and ended Info. An indeterminate
// transaction of which any read_committed reader saw a value is committed from
// then on; one nobody saw may have aborted.
//
// A consumer (one [Poll.Process] and isolation level) reads each partition in
// segments: a segment starts at a seek (or at its first read when no seek is
// known) and runs up to its last read or its reported position. A
// read_committed segment has read past every offset in that range, so every
// committed value there must be among its reads. A segment that starts at
// offset 0 and ends in a [Poll.Final] poll covers the whole partition, so it
// also judges values whose offsets nobody learned.
//
// # Anomalies
//
//   - [AbortedRead] (G1a): a read_committed read of a value of an aborted
//     transaction.
//   - [LostWrite]: a value of a committed transaction that a read_committed
//     segment read past without returning it, while the reader saw nothing else
//     of the transaction.
//   - [TornTxn]: a read_committed reader saw some values of a transaction and
//     read past others without returning them. For an indeterminate
//     transaction this is the all-or-nothing check.
//   - [Duplicate]: one value at two offsets (in one partition or across
//     partitions of a topic), from read_committed reads and acknowledged
//     offsets of transactions not known to have aborted.
//   - [InconsistentOffsets]: two reads or acknowledgements of one offset with
//     different values.
//   - [NonMonotonicPoll]: a consumer's offsets in a partition not increasing
//     between two reads without a seek in between.
//   - [NonMonotonicSend]: one producer's acknowledged offsets in a partition not
//     increasing in send order (idempotence keeps send order).
//   - [PrecommittedRead]: a read_committed poll that ended before the
//     transaction whose value it returned had asked to commit (or a read of
//     any isolation that ended before the writing transaction began).
//   - [GarbageRead]: a read of a value no recorded send wrote, in a topic with
//     recorded sends, or from a partition or with a key other than the send's.
//   - [OffsetRegression]: a consumer of a group was positioned, after a
//     transaction that committed the group's offset for that partition had
//     ended, below that offset (processing would repeat).
//   - [CopyMissing], [CopyDuplicate], [CopyUnexpected]: the exactly-once copy
//     check of read-process-write ([Copy]): every input value appears exactly
//     once in the read_committed reads of the output topic.
//
// Values of committed transactions never read by a read_committed reader are
// counted in [Result.Unseen] but are no anomaly by themselves: a final read
// from offset 0 turns each of them into a lost write or a torn transaction.
// G1c cycles are not checked.
//
// # Why no linearizability search
//
// Porcupine answers whether some order of concurrent operations explains a
// history. Here the log already exposes its order: every record has an
// offset, each offset holds one record forever, and a transaction's
// visibility is all-or-nothing. Each check above is therefore a direct
// comparison of sets and maps keyed by offset and value, exact and linear in
// the history's size, with no search that could explode on 100,000 records.
package check
