// Package replica manages the partition replicas a storage node hosts: one
// storage.Log per replica, opened, closed and deleted as cluster metadata
// assigns and removes replicas, and the leader and follower state of each.
//
// As leader, a partition appends producers' batches, tracks each follower's
// log end offset (reported on the follower fetch stream), advances the high
// watermark to the smallest log end offset of the in-sync replicas (only
// while at least min.insync.replicas are in sync, KIP-966), completes
// acks=all produces once the high watermark covers them, and proposes ISR
// changes to the controller: a follower that has caught up joins, one that
// has not caught up for replica.lag.time.max.ms leaves. As follower, it
// appends what the replication role fetches, keeping the leader's offsets and
// epochs, and truncates where its log diverges from the leader's (KIP-101,
// KIP-279), never to its own high watermark.
//
// The storage-node role owns the Manager and serves produce and fetch from
// it, and ReplicationService through Server (follower fetches from other
// nodes, ReplicaAppend from replication workers, DescribeReplicas): the API
// of the logs belongs to the role that owns them. The replication role runs
// the fetchers of this node's followers (services/replication). Every rule
// of leader and follower state is here, whichever process runs it.
package replica
