package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func listing(id, state string) *groupv1.GroupListing {
	return &groupv1.GroupListing{GroupId: id, State: state, Type: "classic", ProtocolType: "consumer"}
}

// Groups from every coordinator come back once each, sorted by id; a group
// caught moving is shown with its owner's state.
func TestMergeGroupListings(t *testing.T) {
	got := mergeGroupListings(
		[]*groupv1.GroupListing{listing("b", "Stable"), listing("moving", "Dead")},
		nil,
		[]*groupv1.GroupListing{listing("a", "Empty"), listing("moving", "Empty"), listing("b", "Stable")},
	)
	var ids, states []string
	for _, g := range got {
		ids = append(ids, g.GetGroupId())
		states = append(states, g.GetState())
	}
	require.Equal(t, []string{"a", "b", "moving"}, ids)
	require.Equal(t, []string{"Empty", "Stable", "Empty"}, states)
}

func TestSharedResultError(t *testing.T) {
	notCoord := errs.New(errs.NotCoordinator, "moved").Proto()
	unknown := errs.New(errs.UnknownTopicOrPartition, "no t-9").Proto()
	mk := func(list ...*groupv1.OffsetCommitResult) []*groupv1.OffsetCommitResult { return list }
	// withErr builds a result: code 0 succeeded, 1 NOT_COORDINATOR, 2
	// UNKNOWN_TOPIC_OR_PARTITION.
	withErr := func(p int32, code int) *groupv1.OffsetCommitResult {
		out := &groupv1.OffsetCommitResult{Topic: "t", Partition: p}
		switch code {
		case 1:
			out.Error = notCoord
		case 2:
			out.Error = unknown
		}
		return out
	}
	require.Nil(t, sharedResultError(nil))
	require.Nil(t, sharedResultError(mk(withErr(0, 0), withErr(1, 0))), "all succeeded")
	require.Equal(t, notCoord, sharedResultError(mk(withErr(0, 1), withErr(1, 1))), "a group-level error in every result")
	require.Nil(t, sharedResultError(mk(withErr(0, 1), withErr(1, 0))), "one partition failed")
	require.Nil(t, sharedResultError(mk(withErr(0, 1), withErr(1, 2))), "different errors are per partition")
	require.Equal(t, unknown, sharedResultError(mk(withErr(0, 2))))

	err := resultErrors(mk(withErr(1, 2), withErr(0, 0), withErr(2, 1)))
	require.EqualError(t, err, "t-1: UNKNOWN_TOPIC_OR_PARTITION: no t-9\nt-2: NOT_COORDINATOR: moved")
}

// A lag report lists committed and assigned partitions alike, in order,
// with the owner; lag is unknown where either offset is.
func TestLagRows(t *testing.T) {
	committed := map[TopicPartition]*groupv1.OffsetFetchPartition{
		{"b", 0}: {Topic: "b", Partition: 0, Offset: 10},
		{"a", 1}: {Topic: "a", Partition: 1, Offset: 5},
		{"a", 2}: {Topic: "a", Partition: 2, Offset: -1},
		{"c", 0}: {Topic: "c", Partition: 0, Offset: 7},
	}
	desc := &groupv1.GroupDescription{Members: []*groupv1.GroupMember{{
		MemberId: "m1", ClientId: "cli", ClientHost: "/10.0.0.1",
		Assignment: &groupv1.Assignment{TopicPartitions: []*groupv1.TopicPartitions{{Topic: "a", Partitions: []int32{0, 1}}}},
	}}}
	rows := lagRows(committed, assignmentOwners(desc))
	fillLag(rows, map[TopicPartition]int64{{"a", 0}: 3, {"a", 1}: 9, {"a", 2}: 4, {"b", 0}: 10, {"c", 0}: 2})
	require.Equal(t, []PartitionLag{
		{Topic: "a", Partition: 0, Committed: -1, LogEnd: 3, Lag: -1, MemberID: "m1", ClientID: "cli", Host: "/10.0.0.1"},
		{Topic: "a", Partition: 1, Committed: 5, LogEnd: 9, Lag: 4, MemberID: "m1", ClientID: "cli", Host: "/10.0.0.1"},
		{Topic: "a", Partition: 2, Committed: -1, LogEnd: 4, Lag: -1},
		{Topic: "b", Partition: 0, Committed: 10, LogEnd: 10, Lag: 0},
		{Topic: "c", Partition: 0, Committed: 7, LogEnd: 2, Lag: -5},
	}, rows)

	rows = lagRows(map[TopicPartition]*groupv1.OffsetFetchPartition{{"a", 0}: {Offset: 1}}, nil)
	fillLag(rows, nil)
	require.Equal(t, []PartitionLag{{Topic: "a", Partition: 0, Committed: 1, LogEnd: -1, Lag: -1}}, rows)
}

// ListGroups asks every coordinator, waits for one still loading, and
// merges the answers.
func TestListGroupsAsksEveryCoordinator(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: 5 * time.Second})
	var loading atomic.Int32
	fc.nodes[0].list = func(req *groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
		if len(req.GetStatesFilter()) != 1 || req.GetStatesFilter()[0] != "Empty" {
			return nil, errs.New(errs.InvalidRequest, "got states filter %v", req.GetStatesFilter())
		}
		return &groupv1.ListGroupsResponse{Groups: []*groupv1.GroupListing{listing("z", "Empty")}}, nil
	}
	fc.nodes[1].list = func(*groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
		if loading.Add(1) == 1 {
			return nil, errs.New(errs.CoordinatorLoadInProgress, "replaying __consumer_offsets-1")
		}
		return &groupv1.ListGroupsResponse{Groups: []*groupv1.GroupListing{listing("a", "Empty")}}, nil
	}
	got, err := c.ListGroups(context.Background(), []string{"Empty"}, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].GetGroupId())
	require.Equal(t, "z", got[1].GetGroupId())
	require.EqualValues(t, 2, loading.Load())
}

// ListGroups returns what the nodes that answered listed, with the error
// of the one that did not.
func TestListGroupsReportsFailedNode(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: 5 * time.Second})
	fc.nodes[0].list = func(*groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
		return &groupv1.ListGroupsResponse{Groups: []*groupv1.GroupListing{listing("g", "Stable")}}, nil
	}
	fc.nodes[1].list = func(*groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
		return nil, errs.New(errs.GroupAuthorizationFailed, "not allowed")
	}
	got, err := c.ListGroups(context.Background(), nil, nil)
	require.Len(t, got, 1)
	require.Equal(t, errs.GroupAuthorizationFailed, errs.CodeOf(err))
	require.ErrorContains(t, err, fakeAddr(2))
}

// An admin commit goes with generation -1 and no member; a group-level
// refusal in every partition result comes back once, as the server said it.
func TestCommitOffsetsAsAdmin(t *testing.T) {
	fc, c := startGroupCluster(t, 1, Config{RequestTimeout: 5 * time.Second})
	var got *groupv1.OffsetCommitRequest
	fc.nodes[0].commit = func(req *groupv1.OffsetCommitRequest) (*groupv1.OffsetCommitResponse, error) {
		got = req
		resp := &groupv1.OffsetCommitResponse{}
		for _, p := range req.GetPartitions() {
			r := &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
			if req.GetGroupId() == "busy" {
				r.Error = errs.New(errs.UnknownMemberID, `group "busy" has active members; commits need a member id`).Proto()
			}
			resp.Results = append(resp.Results, r)
		}
		return resp, nil
	}
	require.NoError(t, c.CommitOffsets(context.Background(), "idle", map[TopicPartition]int64{{"t", 1}: 7, {"t", 0}: 3}))
	require.EqualValues(t, -1, got.GetGenerationIdOrMemberEpoch())
	require.Empty(t, got.GetMemberId())
	require.Len(t, got.GetPartitions(), 2)
	require.EqualValues(t, 0, got.GetPartitions()[0].GetPartition(), "sent in partition order")
	require.EqualValues(t, 3, got.GetPartitions()[0].GetOffset())

	err := c.CommitOffsets(context.Background(), "busy", map[TopicPartition]int64{{"t", 1}: 7, {"t", 0}: 3})
	require.EqualError(t, err, `UNKNOWN_MEMBER_ID: group "busy" has active members; commits need a member id`)
}
