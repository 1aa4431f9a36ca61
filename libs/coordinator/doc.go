// Package coordinator is the machinery the group and transaction
// coordinators share. Each owns the partitions of an internal compacted topic
// (__consumer_offsets, __transaction_state): a key maps onto a partition by
// Kafka's hash (PartitionFor), the topic is created through the controller on
// first use (TopicCreator), and the process that coordinates a partition
// (metadata.Image.CoordinatorOf) loads it by replaying the partition and
// writes it fenced by its coordinator epoch (Log, LocalLog, RemoteLog), so a
// deposed coordinator can never write after its successor.
package coordinator
