package groupcoord

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// A follower that waited in SyncGroup for a slow leader keeps its session
// once the group is stable: its session runs from the assignment, not
// from its SyncGroup call (it sends no heartbeats while it waits, and was
// once expired right after it got its assignment).
func TestFollowerSessionRunsFromItsAssignment(t *testing.T) {
	c := heldCoordinator(t, time.Hour)
	c.cfg.MinSessionTimeout, c.cfg.MaxSessionTimeout = time.Second, time.Hour
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	c.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	advance := func(d time.Duration) time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(d)
		return clock
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const session = 6 * time.Second
	protocols := []*groupv1.JoinGroupProtocol{{Name: "range", Metadata: []byte{0}}}
	join := func(id string) *groupv1.JoinGroupResponse {
		resp, err := c.JoinGroup(ctx, &groupv1.JoinGroupRequest{GroupId: "g", MemberId: id, ProtocolType: "consumer",
			Protocols: protocols, SessionTimeoutMs: int32(session.Milliseconds()), RebalanceTimeoutMs: 60_000})
		require.NoError(t, err)
		return resp
	}
	newID := func() string {
		r := join("")
		require.Equal(t, errs.MemberIDRequired, errs.FromProto(r.GetError()).Code)
		return r.GetMemberId()
	}
	a := newID()
	first := join(a)
	require.Nil(t, first.GetError())
	require.Equal(t, a, first.GetLeader())

	// b joins; a rejoins, leads generation 2.
	b := newID()
	joined := make(chan *groupv1.JoinGroupResponse, 1)
	go func() { joined <- join(b) }()
	require.Eventually(t, func() bool {
		s := c.shards[0]
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.groups["g"].classic.state == statePreparingRebalance
	}, 10*time.Second, time.Millisecond)
	lead := join(a)
	require.Nil(t, lead.GetError())
	require.Nil(t, (<-joined).GetError())
	gen := lead.GetGenerationId()

	// b asks for its assignment at once; the leader sends it 5 s later.
	synced := make(chan *groupv1.SyncGroupResponse, 1)
	go func() {
		resp, err := c.SyncGroup(ctx, &groupv1.SyncGroupRequest{GroupId: "g", MemberId: b, GenerationId: gen,
			ProtocolType: "consumer", ProtocolName: "range"})
		require.NoError(t, err)
		synced <- resp
	}()
	require.Eventually(t, func() bool {
		s := c.shards[0]
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.groups["g"].classic.members[b].syncWait != nil
	}, 10*time.Second, time.Millisecond)
	advance(5 * time.Second)
	resp, err := c.SyncGroup(ctx, &groupv1.SyncGroupRequest{GroupId: "g", MemberId: a, GenerationId: gen,
		ProtocolType: "consumer", ProtocolName: "range", Assignments: []*groupv1.SyncGroupAssignment{
			{MemberId: a, Assignment: []byte("a")}, {MemberId: b, Assignment: []byte("b")}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetError())
	require.Equal(t, []byte("b"), (<-synced).GetAssignment())

	// 2 s after the assignment (7 s after b's SyncGroup), b's first
	// heartbeat is due; its session has not expired.
	now := advance(2 * time.Second)
	c.shards[0].tick(now)
	hb, err := c.Heartbeat(ctx, &groupv1.HeartbeatRequest{GroupId: "g", MemberId: b, GenerationId: gen})
	require.NoError(t, err)
	require.Nil(t, hb.GetError(), "the follower's session expired 2 s after it got its assignment")
}
