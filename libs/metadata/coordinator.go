package metadata

import (
	"encoding/binary"
	"hash/fnv"
	"slices"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
)

// CoordinatorOf returns the node that coordinates a partition of an
// internal topic (__consumer_offsets for groups), whose coordinators run
// the role named coordRole, and whether that node is the partition's
// leader (then it writes its log in-process). Every node computes the same
// answer from the same image, so the storage nodes that check coordinator
// writes and the coordinators themselves agree without another record in
// the metadata quorum.
//
// The leader coordinates when its process runs coordRole (Kafka's
// placement: no hop between coordinator and log). Otherwise the partition
// goes to one of the live processes that run coordRole, by rendezvous
// hashing of (topic, partition, node id): each node's share is even, and
// when one dies or joins only the partitions it held or takes move. It
// returns nil when no live process runs coordRole, or the partition has no
// leader and no other coordinator process exists.
func (img *Image) CoordinatorOf(topic string, partition int32, coordRole string) (b *commonv1.Broker, atLeader bool) {
	ps, ok := img.Partition(topic, partition)
	if ok && ps.GetLeaderId() >= 0 {
		if l := img.Brokers[ps.GetLeaderId()]; l != nil && img.Alive(l.GetId()) && slices.Contains(l.GetRoles(), coordRole) {
			return l, true
		}
	}
	if !ok {
		return nil, false
	}
	var best *commonv1.Broker
	var bestScore uint64
	for _, id := range img.BrokerIDs() {
		c := img.Brokers[id]
		if !img.Alive(id) || !slices.Contains(c.GetRoles(), coordRole) || slices.Contains(c.GetRoles(), "storage-node") {
			// Processes that also store data coordinate only what they
			// lead; the others share what leaders cannot take.
			continue
		}
		if s := rendezvous(topic, partition, id); best == nil || s > bestScore {
			best, bestScore = c, s
		}
	}
	return best, false
}

func rendezvous(topic string, partition, node int32) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(topic)) // hash.Hash writes never fail
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], uint32(partition))
	binary.BigEndian.PutUint32(b[4:], uint32(node))
	_, _ = h.Write(b[:])
	// FNV-1a's low bits mix poorly for short inputs; finish with a
	// 64-bit mixer (splitmix64's) so shares are even.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Internal topics and the roles that coordinate (and alone write) them.
const (
	OffsetsTopic          = "__consumer_offsets"
	TransactionStateTopic = "__transaction_state"
)

// CoordinatorRole returns the role whose coordinators write an internal
// topic, or "" for any other topic.
func CoordinatorRole(topic string) string {
	switch topic {
	case OffsetsTopic:
		return "group-coordinator"
	case TransactionStateTopic:
		return "transaction-coordinator"
	}
	return ""
}

// AnyOf returns a live process that runs coordRole, or nil if none does.
// Every caller with the same image gets the same one (the highest
// rendezvous score of its node id), and when it dies only its callers move.
func (img *Image) AnyOf(coordRole string) *commonv1.Broker {
	var best *commonv1.Broker
	var bestScore uint64
	for _, id := range img.BrokerIDs() {
		b := img.Brokers[id]
		if !img.Alive(id) || !slices.Contains(b.GetRoles(), coordRole) {
			continue
		}
		if s := rendezvous(coordRole, -1, id); best == nil || s > bestScore {
			best, bestScore = b, s
		}
	}
	return best
}
