package consumer

import (
	"testing"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// A group restored from its snapshot, taken in the middle of a
// reconciliation, answers the members' next heartbeats exactly as the
// original does: same epochs, same assignments, same owners, so a
// coordinator failover fences nobody.
func TestSnapshotRestoreContinuesTheGroup(t *testing.T) {
	topics := fakeTopics{"a": 6, "b": 3}
	g := NewGroup(testGroup, Config{})
	c1, c2, c3 := newClient("m1", "a", "b"), newClient("m2", "a"), newClient("m3", "b")
	c3.instance = "i3"
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	beat(t, g, c1, topics, t0) // m1 told to revoke some of "a"
	join(t, g, c3, topics, t0)

	snap, err := DecodeSnapshot(g.Snapshot().Encode())
	require.NoError(t, err)
	r, err := Restore(testGroup, Config{}, snap, t0)
	require.NoError(t, err)
	require.Equal(t, g.Owners(), r.Owners())
	require.Equal(t, g.Epoch(), r.Epoch())
	require.True(t, proto.Equal(g.Describe(), r.Describe()), "describe differs:\n%v\n%v", g.Describe(), r.Describe())

	// Drive both with the same heartbeats until they converge.
	for range 6 {
		for _, c := range []*client{c1, c2, c3} {
			req := c.hbRequest()
			want, err1 := g.Heartbeat(proto.Clone(req).(*groupv1.ConsumerGroupHeartbeatRequest), topics, t0)
			got, err2 := r.Heartbeat(req, topics, t0)
			require.Equal(t, err1, err2)
			require.True(t, proto.Equal(want, got), "member %s:\noriginal %v\nrestored %v", c.id, want, got)
			c.take(want)
			c.apply()
		}
	}
	require.Equal(t, g.Owners(), r.Owners())
	checkOwners(t, r)
	// The static member is known by its instance id.
	require.Equal(t, "m3", r.static["i3"])
}

func TestSnapshotDecodeRefusesDamage(t *testing.T) {
	_, err := DecodeSnapshot([]byte(`{"v":2}`))
	require.ErrorContains(t, err, "version 2")
	_, err = DecodeSnapshot([]byte(`{`))
	require.Error(t, err)
	s := &Snapshot{Version: snapshotVersion, Members: []MemberSnapshot{
		{ID: "x", Assigned: map[string]map[int32]int32{"a": {0: 1}}},
		{ID: "y", Assigned: map[string]map[int32]int32{"a": {0: 1}}},
	}}
	_, err = Restore(testGroup, Config{}, s, t0)
	require.ErrorContains(t, err, "owned by both")
}

// FuzzSnapshot: whatever bytes the offsets topic holds, decoding and
// restoring either fails or gives a group whose owners are consistent.
func FuzzSnapshot(f *testing.F) {
	g := NewGroup(testGroup, Config{})
	c := newClient("m1", "a")
	join(f, g, c, fakeTopics{"a": 3}, t0)
	f.Add(g.Snapshot().Encode())
	f.Add([]byte(`{"v":1,"members":[{"id":"m","state":1,"pending":{"a":{"0":2}}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		r, err := Restore(testGroup, Config{}, s, t0)
		if err != nil {
			return
		}
		checkOwners(t, r)
	})
}
