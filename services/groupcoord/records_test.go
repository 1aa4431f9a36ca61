package groupcoord

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/log"
)

func testShard() *shard {
	c := &GroupCoordinator{now: time.Now, logger: log.Discard(), shards: map[int32]*shard{}}
	return newShard(c, 0, nil)
}

func TestOffsetRecordsRoundTripInKafkasLayout(t *testing.T) {
	key := offsetKey("g", "orders", 7)
	// Kafka's OffsetCommitKey v1: int16 version, string group, string
	// topic, int32 partition.
	require.Equal(t, []byte{0, 1, 0, 1, 'g', 0, 6, 'o', 'r', 'd', 'e', 'r', 's', 0, 0, 0, 7}, key)
	k, err := parseKey(key)
	require.NoError(t, err)
	require.Equal(t, recordKey{kind: kindOffset, group: "g", topic: "orders", partition: 7}, k)

	c, err := parseOffsetValue(offsetValue(committedOffset{offset: 42, leaderEpoch: 3, metadata: "m", commitMs: 1000}))
	require.NoError(t, err)
	require.Equal(t, committedOffset{offset: 42, leaderEpoch: 3, metadata: "m", commitMs: 1000}, c)

	// A value Kafka 2.0 wrote (v1, with an expire timestamp and no leader
	// epoch) reads too.
	old := kmsg.OffsetCommitValue{Version: 1, Offset: 9, Metadata: "x", CommitTimestamp: 5, ExpireTimestamp: 6}
	c, err = parseOffsetValue(old.AppendTo(nil))
	require.NoError(t, err)
	require.Equal(t, int64(9), c.offset)
	require.Equal(t, int32(-1), c.leaderEpoch)

	gk, err := parseKey(groupKey("g"))
	require.NoError(t, err)
	require.Equal(t, recordKey{kind: kindGroup, group: "g"}, gk)

	// Key versions of Kafka's newer group types are skipped, not fatal.
	unknown, err := parseKey([]byte{0, 3, 0, 1, 'g'})
	require.NoError(t, err)
	require.Equal(t, kindUnknown, unknown.kind)
	_, err = parseKey([]byte{1})
	require.Error(t, err)
}

// Acknowledgements of concurrent writes can complete out of log order; the
// record with the higher log offset must win whatever the order they are
// applied in.
func TestApplyKeepsTheLaterLogOffset(t *testing.T) {
	s := testShard()
	key := offsetKey("g", "t", 0)
	newer := offsetValue(committedOffset{offset: 20, leaderEpoch: -1})
	older := offsetValue(committedOffset{offset: 10, leaderEpoch: -1})
	require.NoError(t, s.applyRecordLocked(key, newer, 101))
	require.NoError(t, s.applyRecordLocked(key, older, 100))
	require.Equal(t, int64(20), s.groups["g"].offsets[topicPartition{"t", 0}].offset)

	// A tombstone below the current record does not delete it; one above
	// does, and the group with nothing left is forgotten.
	require.NoError(t, s.applyRecordLocked(key, nil, 99))
	require.Contains(t, s.groups, "g")
	require.NoError(t, s.applyRecordLocked(key, nil, 102))
	require.NotContains(t, s.groups, "g")
}

func TestReplayRestoresAStableClassicGroup(t *testing.T) {
	s := testShard()
	v := kmsg.NewGroupMetadataValue()
	v.ProtocolType, v.Generation = "consumer", 4
	v.Protocol, v.Leader = kmsg.StringPtr("range"), kmsg.StringPtr("m1")
	m := kmsg.NewGroupMetadataValueMember()
	m.MemberID, m.InstanceID, m.SessionTimeoutMillis, m.RebalanceTimeoutMillis = "m1", kmsg.StringPtr("i1"), 10000, 60000
	m.Subscription, m.Assignment = []byte{1}, []byte{2}
	v.Members = append(v.Members, m)
	require.NoError(t, s.applyRecordLocked(groupKey("g"), groupValue(&v), 5))
	c := s.groups["g"].classic
	require.Equal(t, stateStable, c.state)
	require.Equal(t, int32(4), c.generation)
	require.Equal(t, "m1", c.leader)
	require.Equal(t, "m1", c.static["i1"])
	require.Equal(t, []byte{2}, c.members["m1"].assignment)
	require.Equal(t, 10*time.Second, c.members["m1"].sessionTimeout)
}

// FuzzOffsetsTopicRecords feeds arbitrary keys and values (what a damaged
// or foreign log could hold) through replay's decoding: it may refuse a
// record, never panic.
func FuzzOffsetsTopicRecords(f *testing.F) {
	f.Add(offsetKey("g", "t", 1), offsetValue(committedOffset{offset: 1}))
	v := kmsg.NewGroupMetadataValue()
	v.ProtocolType = "consumer"
	f.Add(groupKey("g"), groupValue(&v))
	f.Add([]byte{0, 2}, []byte{0, 3, 0})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		s := testShard()
		_ = s.applyRecordLocked(key, value, 1)
	})
}
