package assign

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestSubscriptionRoundTrip(t *testing.T) {
	owned := map[string][]int32{"b": {2, 0}, "a": {1}}
	for _, a := range []Assignor{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
		b := EncodeSubscription(a, []string{"b", "a"}, owned, 7, "rack-1")
		m, err := DecodeSubscription("m", "i", b)
		require.NoError(t, err, a.Name())
		want := Member{ID: "m", InstanceID: "i", Topics: []string{"a", "b"}, Generation: 7, Rack: "rack-1"}
		if a.Name() == "sticky" || a.Name() == "cooperative-sticky" {
			want.Owned = map[string][]int32{"a": {1}, "b": {0, 2}}
		}
		require.Equal(t, want, m, a.Name())
	}
}

func TestSubscriptionWireLayout(t *testing.T) {
	var meta kmsg.ConsumerMemberMetadata

	// cooperative-sticky: OwnedPartitions plus the generation as 4-byte
	// user data, as Java's CooperativeStickyAssignor writes it.
	require.NoError(t, meta.ReadFrom(EncodeSubscription(CooperativeSticky(), []string{"t"}, map[string][]int32{"t": {1, 0}}, 9, "")))
	require.Equal(t, int16(3), meta.Version)
	require.Equal(t, []byte{0, 0, 0, 9}, meta.UserData)
	require.Equal(t, int32(9), meta.Generation)
	require.Nil(t, meta.Rack)
	require.Len(t, meta.OwnedPartitions, 1)
	require.Equal(t, []int32{0, 1}, meta.OwnedPartitions[0].Partitions)

	// sticky: no OwnedPartitions (eager members revoked everything);
	// StickyAssignor's user data schema v1 carries them.
	require.NoError(t, meta.ReadFrom(EncodeSubscription(Sticky(), []string{"t"}, map[string][]int32{"t": {3}}, 9, "")))
	require.Empty(t, meta.OwnedPartitions)
	want := []byte{0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 9}
	require.Equal(t, want, meta.UserData)

	// Java writes schema v1 even for generation -1.
	require.NoError(t, meta.ReadFrom(EncodeSubscription(Sticky(), []string{"t"}, map[string][]int32{}, -1, "")))
	require.Equal(t, []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, meta.UserData)

	// A member that never had an assignment sends no sticky user data.
	require.NoError(t, meta.ReadFrom(EncodeSubscription(Sticky(), []string{"t"}, nil, -1, "")))
	require.Nil(t, meta.UserData)
}

func TestSubscriptionMatchesFranzGoBytes(t *testing.T) {
	topics := []string{"a", "b"}
	owned := map[string][]int32{"a": {0, 1}, "b": {4}}
	for _, tc := range []struct {
		ours  Assignor
		franz kgo.GroupBalancer
	}{
		{Range(), kgo.RangeBalancer()},
		{RoundRobin(), kgo.RoundRobinBalancer()},
		{Sticky(), kgo.StickyBalancer()},
	} {
		require.Equal(t, tc.franz.ProtocolName(), tc.ours.Name())
		require.Equal(t, tc.franz.IsCooperative(), tc.ours.Protocol() == Cooperative)
		require.Equal(t,
			tc.franz.JoinGroupMetadata(topics, owned, 12),
			EncodeSubscription(tc.ours, topics, owned, 12, ""), tc.ours.Name())
	}
}

func TestDecodeFranzGoSubscription(t *testing.T) {
	topics := []string{"a", "b"}
	owned := map[string][]int32{"a": {0, 1}, "b": {4}}
	for _, tc := range []struct {
		franz     kgo.GroupBalancer
		wantOwned bool
	}{
		{kgo.RangeBalancer(), false},
		{kgo.RoundRobinBalancer(), false},
		{kgo.StickyBalancer(), true},
		{kgo.CooperativeStickyBalancer(), true},
	} {
		m, err := DecodeSubscription("m", "", tc.franz.JoinGroupMetadata(topics, owned, 12))
		require.NoError(t, err, tc.franz.ProtocolName())
		want := Member{ID: "m", Topics: topics, Generation: 12}
		if tc.wantOwned {
			want.Owned = owned
		}
		require.Equal(t, want, m, tc.franz.ProtocolName())
	}
}

func TestDecodeOlderSubscriptions(t *testing.T) {
	encode := func(m kmsg.ConsumerMemberMetadata) []byte { return m.AppendTo(nil) }

	// v0 with sticky user data schema v0 (Kafka before 2.3): no generation.
	sticky := kmsg.NewStickyMemberMetadata()
	sticky.CurrentAssignment = []kmsg.StickyMemberMetadataCurrentAssignment{{Topic: "t", Partitions: []int32{2, 0}}}
	v0 := kmsg.NewConsumerMemberMetadata()
	v0.Topics = []string{"t"}
	v0.UserData = sticky.AppendTo(nil)
	m, err := DecodeSubscription("m", "", encode(v0))
	require.NoError(t, err)
	require.Equal(t, Member{ID: "m", Topics: []string{"t"}, Owned: map[string][]int32{"t": {0, 2}}, Generation: -1}, m)

	// v1 cooperative-sticky (Kafka 2.4 to 2.8): owned partitions, the
	// generation only in the user data.
	v1 := kmsg.NewConsumerMemberMetadata()
	v1.Version = 1
	v1.Topics = []string{"t"}
	v1.UserData = binary.BigEndian.AppendUint32(nil, 4)
	v1.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: []int32{1}}}
	m, err = DecodeSubscription("m", "", encode(v1))
	require.NoError(t, err)
	require.Equal(t, Member{ID: "m", Topics: []string{"t"}, Owned: map[string][]int32{"t": {1}}, Generation: 4}, m)

	// Claims v1 but is laid out as v0 (Sarama, franz-go#493).
	short := encode(v0)
	short[1] = 1
	m, err = DecodeSubscription("m", "", short)
	require.NoError(t, err)
	require.Equal(t, []string{"t"}, m.Topics)

	// A later version is read as far as v3 reaches, as Java does.
	v4 := EncodeSubscription(CooperativeSticky(), []string{"t"}, map[string][]int32{"t": {5}}, 3, "r")
	v4[1] = 4
	v4 = append(v4, 0, 0, 0, 42)
	m, err = DecodeSubscription("m", "", v4)
	require.NoError(t, err)
	require.Equal(t, Member{ID: "m", Topics: []string{"t"}, Owned: map[string][]int32{"t": {5}}, Generation: 3, Rack: "r"}, m)

	// Unreadable sticky user data is ignored, as Java ignores it.
	v0.UserData = []byte{0, 0, 0, 9, 1}
	m, err = DecodeSubscription("m", "", encode(v0))
	require.NoError(t, err)
	require.Nil(t, m.Owned)

	_, err = DecodeSubscription("m", "", []byte{0, 3, 0})
	require.ErrorContains(t, err, `member "m"`)
}

func TestAssignmentRoundTrip(t *testing.T) {
	in := map[string][]int32{"b": {3, 1}, "a": {0}}
	b := EncodeAssignment(in, []byte("ud"))
	out, err := DecodeAssignment(b)
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"a": {0}, "b": {1, 3}}, out)

	var ka kmsg.ConsumerMemberAssignment
	require.NoError(t, ka.ReadFrom(b))
	require.Equal(t, []byte("ud"), ka.UserData)
	require.Equal(t, "a", ka.Topics[0].Topic)

	// franz-go reads ours, and we read what franz-go's plans send.
	franz, err := kgo.RangeBalancer().ParseSyncAssignment(b)
	require.NoError(t, err)
	require.Equal(t, out, franz)

	members := []kmsg.JoinGroupResponseMember{{MemberID: "m", ProtocolMetadata: EncodeSubscription(Range(), []string{"a", "b"}, nil, 1, "")}}
	mb, _, err := kgo.RangeBalancer().MemberBalancer(members)
	require.NoError(t, err)
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"a": 1, "b": 2})
	require.NoError(t, err)
	sync := into.IntoSyncAssignment()
	require.Len(t, sync, 1)
	out, err = DecodeAssignment(sync[0].MemberAssignment)
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"a": {0}, "b": {0, 1}}, out)

	out, err = DecodeAssignment(nil)
	require.NoError(t, err)
	require.Empty(t, out)
	_, err = DecodeAssignment([]byte{0, 0, 0, 0, 0, 9})
	require.Error(t, err)
}
