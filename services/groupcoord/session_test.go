package groupcoord

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// A coordinator of its own that was cut off from the controller keeps its
// shard in memory until its metadata catches up. Meanwhile the controller
// expired its session and another process took the partition over and
// committed a transaction's offsets there. The cut-off node must not answer
// OffsetFetch from its stale memory (the committed offset would go back),
// neither while its session may have expired nor, once it registered
// again, from the shard it loaded in its previous broker epoch.
func TestStaleCoordinatorDoesNotServeOffsetsAfterItsSessionLapsed(t *testing.T) {
	h := newTxnHarness(t)
	epoch, live := int64(8), true
	h.c.session = func() (int64, bool) { return epoch, live }
	h.shard().brokerEpoch = 8

	require.Equal(t, []errs.Code{0}, h.commit(txnReq(7, 1, "g", map[int32]int64{2: 116})))
	require.Zero(t, h.marker(7, 1, true))
	off, code := h.fetch("g", 2, true)
	require.Zero(t, code)
	require.Equal(t, int64(116), off)

	// Another coordinator replays the partition and commits 428 in a
	// transaction; the cut-off node's shard still holds 116.
	stale := h.shard()
	other := newShard(h.c, 0, h.log)
	other.load()
	require.True(t, other.isLoaded())
	t.Cleanup(other.cancel)
	other.brokerEpoch = 8
	h.c.shards[0] = other
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(7, 2, "g", map[int32]int64{2: 428})))
	require.Zero(t, h.marker(7, 2, true))
	h.c.shards[0] = stale
	stale.mu.Lock()
	require.Equal(t, int64(116), stale.groups["g"].offsets[topicPartition{"t", 2}].offset, "the cut-off shard's memory is stale")
	stale.mu.Unlock()

	fetch := func() *groupv1.OffsetFetchResponse {
		t.Helper()
		resp, err := h.c.OffsetFetch(h.ctx, &groupv1.OffsetFetchRequest{GroupId: "g", RequireStable: true, MemberEpoch: -1,
			Partitions: []*commonv1.TopicPartition{{Topic: "t", Partition: 2}}})
		require.NoError(t, err)
		return resp
	}

	live = false
	resp := fetch()
	require.Equal(t, errs.NotCoordinator, codeOf(resp.GetError()), "a node whose session may have expired answered %v", resp)
	require.Contains(t, resp.GetError().GetMessage(), "session")
	describe, err := h.c.DescribeGroups(h.ctx, &groupv1.DescribeGroupsRequest{GroupIds: []string{"g"}})
	require.NoError(t, err)
	require.Len(t, describe.GetGroups(), 1)
	require.Equal(t, errs.NotCoordinator, codeOf(describe.GetGroups()[0].GetError()))

	// Registered again: the session is live in a new epoch, but the shard
	// was loaded in the old one.
	epoch, live = 9, true
	resp = fetch()
	require.Equal(t, errs.NotCoordinator, codeOf(resp.GetError()), "a shard of an earlier broker epoch answered %v", resp)

	// Once it reloads in the new epoch it answers what was committed.
	h.reload()
	h.shard().brokerEpoch = 9
	resp = fetch()
	require.Nil(t, resp.GetError())
	require.Len(t, resp.GetPartitions(), 1)
	require.Nil(t, resp.GetPartitions()[0].GetError())
	require.Equal(t, int64(428), resp.GetPartitions()[0].GetOffset())
}
