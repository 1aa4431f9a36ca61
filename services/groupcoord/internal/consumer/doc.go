// Package consumer is the server-side state machine of Kafka's consumer
// group protocol (KIP-848, ConsumerGroupHeartbeat) for the group-coordinator
// role.
//
// A Group holds one group's members, its group epoch, the target assignment
// computed by a server assignor (assign.go: "uniform" and "range") and each
// member's current assignment. Members move toward their target one
// heartbeat at a time (incremental reconciliation): a partition leaving a
// member is first revoked, and the member stays in its epoch until it
// reports that it no longer owns it; only then is the partition handed to
// its new owner. A member whose target only grows never loses a partition
// and never waits.
//
// The package does no I/O, starts no goroutines and takes no locks: the
// caller serialises calls per group, persists what it must, and drives time
// through the now arguments, Expire and NextDeadline.
//
// Kafka's group coordinator (GroupMetadataManager, CurrentAssignmentBuilder,
// ConsumerGroup) is the reference for the semantics; KIP-1251 assignment
// epochs decide which commits with an older member epoch pass.
package consumer
