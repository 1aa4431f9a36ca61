// Package check checks histories of a Kafka-style streaming workload for the
// anomalies Jepsen's Kafka queue workload looks for, adapted to Sluice's
// transactions, read_committed consumers and consumer groups. `sluice verify`
// records the history against a running cluster; Check judges it.
//
// # Model
//
// Clients record these operations in a [History] (with a [Recorder] when
// they run concurrently). Times are on one clock shared by every recorder
// (UnixNano on one host); 0 means unknown.
//
//   - A [Txn] is one transaction of one producer: its sends (topic,
//     partition, key, value; every value unique per topic across the
//     history), optionally the consumer offsets it commits
//     (read-process-write), whether the client asked to commit or to abort,
//     and the outcome the client saw: [OK], [Fail] (certainly took no effect)
//     or [Info] (unknown, e.g. a timeout on EndTxn). A send whose produce was
//     acknowledged may carry its offset.
//     Record a send of a plain or idempotent producer as a Txn of one send
//     with Commit set, the produce's outcome and [Txn.Idempotent];
//     transactional producers set [Txn.TransactionalID], and the producer id
//     and epoch when known ([Txn.Epoch] -1 is unknown, and producer id and
//     epoch both 0 is taken for unset).
//   - A [Poll] is one poll of one consumer: its isolation level, the reads it
//     returned in order, positions set before it (assignment, seek,
//     rebalance) and, when known, its positions after it. A
//     read-process-write copier records its polls and its transactions under
//     one [Poll.Process] number: that is how Check knows which transaction
//     processed which poll.
//   - An [Init] is an InitProducerId call of a transactional producer and the
//     producer id and epoch it returned.
//   - A [Generation] is one group member's assignment from the moment the
//     member got it to its revocation (End 0: still owned at the end).
//   - A [GroupCommit] is a group's committed offset of a partition: an offset
//     commit the coordinator acknowledged ([CommitAcked]) or an OffsetFetch
//     answer ([CommitFetched]), with the times the request was sent and
//     answered.
//   - A [Fault] is an injected fault, carried for the report; Check ignores it.
//
// [History.Write] stores a history as one JSON object with snake_case field
// names (outcomes and isolation levels as strings: "ok", "fail", "info",
// "read_committed", "read_uncommitted"); [ReadHistory] reads it back, so a
// saved run can be checked again.
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
//
//   - [LostWrite]: a value of a committed transaction that a read_committed
//     segment read past without returning it, while the reader saw nothing else
//     of the transaction.
//
//   - [TornTxn]: a read_committed reader saw some values of a transaction and
//     read past others without returning them. For an indeterminate
//     transaction this is the all-or-nothing check.
//
//   - [Duplicate]: one value at two offsets (in one partition or across
//     partitions of a topic), from read_committed reads and acknowledged
//     offsets of transactions not known to have aborted, when the value came
//     from an idempotent or transactional producer (or from no recorded
//     send). A plain producer's retries may append a batch twice: those are
//     [PlainDuplicate] warnings.
//
//   - [InconsistentOffsets]: two reads or acknowledgements of one offset with
//     different values.
//
//   - [NonMonotonicPoll]: a consumer's offsets in a partition not increasing
//     between two reads without a seek in between.
//
//   - [NonMonotonicSend]: one producer's acknowledged offsets in a partition not
//     increasing in send order (idempotence keeps send order).
//
//   - [PrecommittedRead]: a read_committed poll that ended before the
//     transaction whose value it returned had asked to commit (or a read of
//     any isolation that ended before the writing transaction began).
//
//   - [GarbageRead]: a read of a value no recorded send wrote, in a topic with
//     recorded sends, or from a partition or with a key other than the send's.
//
//   - [OffsetRegression]: a consumer of a group was positioned, after a
//     transaction that committed the group's offset for that partition had
//     ended, below that offset (processing would repeat).
//
//   - [CopyMissing], [CopyDuplicate], [CopyUnexpected]: the exactly-once copy
//     check of read-process-write ([Copy]): every input value appears exactly
//     once in the read_committed reads of the output topic.
//
//   - [G1c]: a cycle of dependencies among transactions known to have
//     committed (committed, or indeterminate and seen by a read_committed
//     reader) that holds at least one wr edge. T1 -ww-> T2 when, in one
//     partition, a value of T1 lies at a lower offset than a value of T2
//     (offsets from acknowledgements or read_committed reads); only
//     consecutive pairs of different transactions are edges, which keeps
//     every path of the full relation. T1 -wr-> T2 when a read_committed poll
//     of T2's process returned a value of T1 and T2 is the first transaction
//     that process began (by [Txn.Start]) after the poll ended: the
//     transaction that processed what the poll returned, so the poll
//     certainly came before T2 committed. A poll that ends after a
//     transaction began feeds the process's next transaction: Kafka lets a
//     transaction's early writes precede records its process reads later in
//     it, which would be a legitimate cycle. Cycles of ww edges alone (G0)
//     are not reported either: concurrent transactions interleave their
//     writes in a partition, which Kafka's transactions allow. Strongly
//     connected components come from Tarjan's algorithm; each component with
//     a wr edge inside is one anomaly naming one shortest cycle through that
//     edge ([Anomaly.Cycle]).
//
//   - [DoubleOwnership]: two members of a group owned one partition at once.
//     Classic protocol: two [Generation]s of different members with the same
//     generation number whose windows overlap. Consumer protocol (member
//     epochs are per member): windows of different members that overlap for
//     longer than [Options.OwnershipSlack]; off when the slack is 0.
//
//   - [CommitRegression]: an OffsetFetch returned a committed offset lower
//     than that of the last commit acknowledged before the fetch was sent
//     (acknowledged group commits, and the offsets of committed
//     transactions), when no commit of the lower offset was acknowledged
//     after that commit was sent, no unanswered commit of it was sent before
//     the fetch was answered, and no reset in [Options.Resets] lies between.
//     Kafka lets a later commit lower the offset: only the last acknowledged
//     commit counts.
//
//   - [ZombieAck]: a transaction acknowledged as committed whose EndTxn was
//     sent ([Txn.CommitStart]) after an InitProducerId of the same
//     transactional id had returned a higher epoch: the new producer fenced
//     it, so the commit must have been refused.
//
// Two kinds are warnings, listed in [Result.Warnings] and ignored by
// [Result.Valid]:
//
//   - [Unseen]: a value of a committed transaction that no read_committed
//     reader returned and no read_committed segment read past: nothing judged
//     it. A final read from offset 0 turns each into a lost write, a torn
//     transaction or nothing. [Options.FailUnseen] makes them anomalies.
//   - [PlainDuplicate]: a duplicate of a plain (neither idempotent nor
//     transactional) producer's value.
//
// [Result.Unread] counts values of committed transactions no read_committed
// reader returned, whether judged or not. [Result] keeps at most
// [Options.MaxExamples] anomalies per kind and counts all of them in
// [Result.AnomalyCounts]; [Result.Summary] is the report for people and the
// Result's JSON the one for programs.
//
// # Why no linearizability search
//
// Porcupine answers whether some order of concurrent operations explains a
// history. Here the log already exposes its order: every record has an
// offset, each offset holds one record forever, and a transaction's
// visibility is all-or-nothing. Each check above is therefore a direct
// comparison of sets and maps keyed by offset and value, exact and linear in
// the history's size, with no search that could explode on 100,000 records.
// The dependency graph of G1c has one node per committed transaction and at
// most one ww edge per record and one wr edge per read; Tarjan's algorithm
// is linear in it. Sorting makes the whole check O(n log n): a synthetic
// history of 500,000 sends (BenchmarkCheck) checks in seconds.
package check
