package groupcoord

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records in the offsets topic use Kafka's own layouts (the key's first two
// bytes are its version): versions 0 and 1 are an offset commit
// (OffsetCommitKey), version 2 is a classic group's metadata
// (GroupMetadataKey). A nil value is a tombstone: the offset or the group was
// deleted, and compaction later drops the key.
const (
	offsetKeyVersion = 1
	groupKeyVersion  = 2
	// offsetValueVersion 3 carries the leader epoch (KIP-320) and no expire
	// timestamp; groupValueVersion 3 carries static instance ids (KIP-345).
	offsetValueVersion = 3
	groupValueVersion  = 3
)

// consumerGroupKeyVersion keys the state of a consumer-protocol group: a
// key laid out as GroupMetadataKey (version, group id) with a version far
// from the ones Kafka uses (Kafka's own consumer-group records, versions 3
// to 16, have layouts kmsg does not define), and a JSON value
// (consumer.Snapshot). Kafka tools skip key versions they do not know.
const consumerGroupKeyVersion = 1000

// keyKind says what a record of the offsets topic holds.
type keyKind int

const (
	kindUnknown keyKind = iota
	kindOffset
	kindGroup
	kindConsumerGroup
)

// recordKey is a decoded key of the offsets topic.
type recordKey struct {
	kind      keyKind
	group     string
	topic     string
	partition int32
}

func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

func consumerGroupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: consumerGroupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

// parseKey decodes a key. Key versions it does not know (those Kafka's newer
// coordinator writes for other group types) are reported as kindUnknown so a
// replay skips them instead of failing the whole partition.
func parseKey(b []byte) (recordKey, error) {
	if len(b) < 2 {
		return recordKey{}, fmt.Errorf("offsets topic key of %d bytes is too short", len(b))
	}
	switch v := int16(binary.BigEndian.Uint16(b)); v {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(b); err != nil {
			return recordKey{}, fmt.Errorf("decoding offset commit key: %w", err)
		}
		return recordKey{kind: kindOffset, group: k.Group, topic: k.Topic, partition: k.Partition}, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(b); err != nil {
			return recordKey{}, fmt.Errorf("decoding group metadata key: %w", err)
		}
		return recordKey{kind: kindGroup, group: k.Group}, nil
	case consumerGroupKeyVersion:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(b); err != nil {
			return recordKey{}, fmt.Errorf("decoding consumer group key: %w", err)
		}
		return recordKey{kind: kindConsumerGroup, group: k.Group}, nil
	default:
		return recordKey{kind: kindUnknown}, nil
	}
}

// committedOffset is one committed position, as held in memory and in an
// OffsetCommitValue.
type committedOffset struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitMs    int64
	// logOffset is the offsets-topic offset of the record that set it; a
	// write applies only over an older one, since acknowledgements of
	// concurrent writes can complete out of log order.
	logOffset int64
}

func offsetValue(c committedOffset) []byte {
	v := kmsg.OffsetCommitValue{Version: offsetValueVersion, Offset: c.offset, LeaderEpoch: c.leaderEpoch,
		Metadata: c.metadata, CommitTimestamp: c.commitMs}
	return v.AppendTo(nil)
}

func parseOffsetValue(b []byte) (committedOffset, error) {
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(b); err != nil {
		return committedOffset{}, fmt.Errorf("decoding offset commit value: %w", err)
	}
	epoch := v.LeaderEpoch
	if v.Version < 3 {
		epoch = -1
	}
	return committedOffset{offset: v.Offset, leaderEpoch: epoch, metadata: v.Metadata, commitMs: v.CommitTimestamp}, nil
}

func groupValue(v *kmsg.GroupMetadataValue) []byte {
	v.Version = groupValueVersion
	return v.AppendTo(nil)
}

func parseGroupValue(b []byte) (*kmsg.GroupMetadataValue, error) {
	v := new(kmsg.GroupMetadataValue)
	if err := v.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("decoding group metadata value: %w", err)
	}
	return v, nil
}
