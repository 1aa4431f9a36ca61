package assign

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// subscriptionVersion is the ConsumerProtocolSubscription version written:
// v1 added OwnedPartitions (KIP-429), v2 the generation (KIP-792), v3 the
// rack (KIP-881). Java clients since 3.5 write v3 as well.
const subscriptionVersion = 3

// assignmentVersion is the ConsumerProtocolAssignment version written. No
// version after 0 changed its fields; Java clients write their highest, 3,
// and every reader accepts it.
const assignmentVersion = 3

// EncodeSubscription returns the JoinGroup protocol metadata of a member
// that joins with assignor a: a ConsumerMemberMetadata v3 with the sorted
// subscription, the generation, the rack ("" for none) and the user data
// Kafka's Java assignor of the same name writes, so Java and franz-go
// leaders read it:
//   - "sticky" (eager) sends no OwnedPartitions, since eager members revoke
//     everything before joining; the previous assignment and generation go
//     in the user data (StickyAssignor's schema v1), which is absent when
//     owned is nil (the member never had an assignment).
//   - "cooperative-sticky" sends owned as OwnedPartitions and the
//     generation as the user data (a big-endian int32, as
//     CooperativeStickyAssignor writes it for pre-v2 readers).
//   - "range" and "roundrobin" send neither.
func EncodeSubscription(a Assignor, topics []string, owned map[string][]int32, generation int32, rack string) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = subscriptionVersion
	meta.Topics = slices.Clone(topics)
	slices.Sort(meta.Topics)
	meta.Topics = slices.Compact(meta.Topics)
	meta.Generation = generation
	if rack != "" {
		meta.Rack = kmsg.StringPtr(rack)
	}
	switch a.Name() {
	case stickyName:
		if owned != nil {
			sticky := kmsg.NewStickyMemberMetadata()
			sticky.Generation = generation
			for _, t := range sortedTopics(owned) {
				cur := kmsg.NewStickyMemberMetadataCurrentAssignment()
				cur.Topic = t
				cur.Partitions = sortedPartitions(owned[t])
				sticky.CurrentAssignment = append(sticky.CurrentAssignment, cur)
			}
			meta.UserData = sticky.AppendTo(nil)
			if generation == -1 {
				// kmsg leaves an unknown generation out (schema v0);
				// Java always writes schema v1, -1 included.
				meta.UserData = binary.BigEndian.AppendUint32(meta.UserData, uint32(generation))
			}
		}
	case cooperativeStickyName:
		for _, t := range sortedTopics(owned) {
			op := kmsg.NewConsumerMemberMetadataOwnedPartition()
			op.Topic = t
			op.Partitions = sortedPartitions(owned[t])
			meta.OwnedPartitions = append(meta.OwnedPartitions, op)
		}
		meta.UserData = binary.BigEndian.AppendUint32(nil, uint32(generation))
	}
	return meta.AppendTo(nil)
}

// DecodeSubscription reads a member's JoinGroup protocol metadata, any
// version Kafka clients send (v0 to v3, and later versions as far as v3
// reaches, as Java does), into a Member. Owned and Generation come from,
// in order of preference:
//   - OwnedPartitions (v1+) and the generation field (v2+);
//   - the user data of "cooperative-sticky" (a 4-byte generation) when the
//     metadata has no generation field;
//   - the user data of "sticky" (previous assignment and, in its schema v1,
//     the generation) when the metadata names no owned partitions, as
//     Java's StickyAssignor reads it.
//
// User data in neither form is ignored, as Java's assignors do. Some clients
// claim v1 but send no OwnedPartitions (franz-go#493, Sarama); such
// metadata is read as v0.
func DecodeSubscription(memberID, instanceID string, metadata []byte) (Member, error) {
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(metadata); err != nil {
		if len(metadata) < 2 || binary.BigEndian.Uint16(metadata) != 1 {
			return Member{}, fmt.Errorf("decoding subscription of member %q: %w", memberID, err)
		}
		v0 := slices.Clone(metadata)
		v0[1] = 0
		if err := meta.ReadFrom(v0); err != nil {
			return Member{}, fmt.Errorf("decoding subscription of member %q as v0 after v1 failed: %w", memberID, err)
		}
	}
	m := Member{ID: memberID, InstanceID: instanceID, Generation: -1}
	if meta.Version >= 2 {
		m.Generation = meta.Generation
	}
	if meta.Rack != nil {
		m.Rack = *meta.Rack
	}
	if len(meta.Topics) > 0 {
		m.Topics = slices.Clone(meta.Topics)
		slices.Sort(m.Topics)
		m.Topics = slices.Compact(m.Topics)
	}
	for _, op := range meta.OwnedPartitions {
		m.Owned = addOwned(m.Owned, op.Topic, op.Partitions)
	}
	switch ud := meta.UserData; {
	case len(ud) == 4:
		if m.Generation == -1 {
			m.Generation = int32(binary.BigEndian.Uint32(ud))
		}
	case len(ud) > 4 && len(m.Owned) == 0:
		var sticky kmsg.StickyMemberMetadata
		if err := sticky.ReadFrom(ud); err != nil {
			break // Java drops a previous assignment it cannot read.
		}
		for _, cur := range sticky.CurrentAssignment {
			m.Owned = addOwned(m.Owned, cur.Topic, cur.Partitions)
		}
		if sticky.Generation != -1 {
			m.Generation = sticky.Generation
		}
	}
	return m, nil
}

// EncodeAssignment returns a SyncGroup member assignment: a
// ConsumerMemberAssignment with topics and partitions sorted (KAFKA-12898)
// and the given user data (nil for none).
func EncodeAssignment(assignment map[string][]int32, userData []byte) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	a.Version = assignmentVersion
	for _, t := range sortedTopics(assignment) {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = t
		at.Partitions = sortedPartitions(assignment[t])
		a.Topics = append(a.Topics, at)
	}
	a.UserData = userData
	return a.AppendTo(nil)
}

// DecodeAssignment reads a SyncGroup member assignment of any version into
// topic -> sorted partitions. An empty input is an empty assignment: the
// coordinator sends one to members the leader assigned nothing.
func DecodeAssignment(b []byte) (map[string][]int32, error) {
	out := make(map[string][]int32)
	if len(b) == 0 {
		return out, nil
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("decoding member assignment: %w", err)
	}
	for _, at := range a.Topics {
		out = addOwned(out, at.Topic, at.Partitions)
	}
	return out, nil
}

// addOwned adds partitions of topic t to m, keeping them sorted and unique,
// and returns m (allocated when nil).
func addOwned(m map[string][]int32, t string, ps []int32) map[string][]int32 {
	if len(ps) == 0 {
		return m
	}
	if m == nil {
		m = make(map[string][]int32)
	}
	merged := append(m[t], ps...)
	slices.Sort(merged)
	m[t] = slices.Compact(merged)
	return m
}

func sortedTopics[V any](m map[string]V) []string {
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	return topics
}

func sortedPartitions(ps []int32) []int32 {
	out := slices.Clone(ps)
	slices.Sort(out)
	return slices.Compact(out)
}
