// Package planted switches known bugs on for negative controls: a test of
// the tester builds sluiced with the tag sluice_planted and names the bugs
// to plant in the environment variable SLUICE_PLANTED (comma-separated),
// then checks that the history checker reports them.
//
// Without the build tag, Enabled is the constant false and On always
// returns false, so every
//
//	if planted.On(planted.AckBeforeReplication) { ... }
//
// is removed by the compiler: release builds carry neither the code nor
// its cost. Code on a hot path reads the switch once into a package
// variable at init.
//
// The bugs, each a mistake a real system made:
//   - ack_before_replication: a leader answers an acks=all produce once it
//     has appended, before the high watermark passes the batch.
//   - truncate_to_hw: a follower that learns of a new leader truncates to
//     its own high watermark instead of asking the leader where their logs
//     diverge (the bug KIP-101 fixed; loses acknowledged records).
//   - no_dedup_window: a leader appends an idempotent producer's retried
//     batch again instead of answering with its original offsets.
//   - lso_off_by_one: a read_committed fetch returns one record past the
//     last stable offset (the first record of an open transaction).
//   - no_epoch_bump: EndTxn keeps the producer epoch, so a late EndTxn of an
//     ended transaction is taken for the producer's next one (the bug
//     KIP-890 fixed).
//   - stale_generation_accepted: the group coordinator takes OffsetCommit,
//     SyncGroup and heartbeats from an older generation (classic protocol)
//     or an older member epoch (consumer protocol).
//
// Never ship a build with the tag.
package planted

// The names of the bugs, as SLUICE_PLANTED spells them.
const (
	AckBeforeReplication    = "ack_before_replication"
	TruncateToHW            = "truncate_to_hw"
	NoDedupWindow           = "no_dedup_window"
	LSOOffByOne             = "lso_off_by_one"
	NoEpochBump             = "no_epoch_bump"
	StaleGenerationAccepted = "stale_generation_accepted"
)

// Names lists every bug this package knows, in the order above.
var Names = []string{AckBeforeReplication, TruncateToHW, NoDedupWindow, LSOOffByOne, NoEpochBump, StaleGenerationAccepted}

// EnvVar is the environment variable that names the bugs to plant.
const EnvVar = "SLUICE_PLANTED"
