// Package coordinator is the machinery the group and transaction
// coordinators share. Each owns the partitions of an internal compacted topic
// (__consumer_offsets, __transaction_state), one shard per partition:
//
//   - a key maps onto a partition by Kafka's hash (PartitionFor);
//   - the topic is created through the controller on first use
//     (TopicCreator);
//   - the process that coordinates a partition (metadata.Image.CoordinatorOf:
//     its leader when the leader runs the role, else a process of its own
//     chosen by rendezvous hashing) loads a shard for it (Wanted, Reconcile,
//     Run), and every other process answers NOT_COORDINATOR with a hint
//     (NotLoaded);
//   - a shard replays its partition completely before it serves, and writes
//     with acks=all, fenced (Log: LocalLog writes in the leader epoch it
//     loaded in; RemoteLog writes through the leader after FenceCoordinator,
//     so a deposed coordinator's writes are refused), applying a write to
//     memory only once acknowledged (Writer);
//   - a shard answers, reads included, only while the process's controller
//     session is certainly alive, and a coordinator of its own only in the
//     broker epoch it loaded in (SessionError): a process cut off from the
//     controller learns late that another took its partitions over.
package coordinator
