package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// These tests call the group coordinator's gRPC API directly, as a client
// in another language would, against real processes: typed errors for bad
// input that change nothing, the classic protocol's semantics on the wire,
// and persistence and fencing across coordinator failures.

const (
	// gapiOffsetsPartitions is offsets.topic.num.partitions (the default).
	gapiOffsetsPartitions = 50
	// gapiCallTimeout bounds one call that should answer at once.
	gapiCallTimeout = 10 * time.Second
)

// gapiEnv is a running cluster and an SDK client on it.
type gapiEnv struct {
	t   *testing.T
	ctx context.Context
	c   *devcluster.Cluster
	cl  *client.Client
}

func gapiStart(t *testing.T, storageNodes int, extra ...string) *gapiEnv {
	t.Helper()
	args := append([]string{"--group.initial-rebalance-delay=0s"}, extra...)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: storageNodes, ExtraArgs: args})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return &gapiEnv{t: t, ctx: ctx, c: c, cl: cluster.Client(t, c)}
}

// at returns a client of the group-coordinator service at addr.
func (e *gapiEnv) at(addr string) groupv1.GroupCoordinatorServiceClient {
	e.t.Helper()
	conn, err := e.cl.Conn(addr)
	require.NoError(e.t, err)
	return groupv1.NewGroupCoordinatorServiceClient(conn)
}

func (e *gapiEnv) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, gapiCallTimeout)
}

func (e *gapiEnv) process(nodeID int32) *devcluster.Process {
	e.t.Helper()
	for _, p := range e.c.StorageNodes() {
		if p.NodeID == nodeID {
			return p
		}
	}
	e.t.Fatalf("no storage node has id %d", nodeID)
	return nil
}

// coordinator polls FindCoordinator on the running storage nodes other than
// node avoid until one names a coordinator for group other than avoid, and
// then waits until that coordinator has loaded the group's partition.
func (e *gapiEnv) coordinator(group string, avoid int32) *devcluster.Process {
	e.t.Helper()
	var found *devcluster.Process
	var last string
	require.Eventually(e.t, func() bool {
		for _, p := range e.c.StorageNodes() {
			if p.NodeID == avoid || !p.Running() || p.Paused() {
				continue
			}
			ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
			resp, err := e.at(p.Addr).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{
				KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{group}})
			cancel()
			if err != nil {
				last = err.Error()
				continue
			}
			co := resp.GetCoordinators()[0]
			if co.GetError() != nil {
				last = errs.FromProto(co.GetError()).Error()
				continue
			}
			if co.GetNodeId() == avoid {
				last = fmt.Sprintf("node %d still named", avoid)
				continue
			}
			cand := e.process(co.GetNodeId())
			require.Equal(e.t, cand.Addr, co.GetAddress(), "FindCoordinator names the node's gRPC address")
			ctx, cancel = context.WithTimeout(e.ctx, 3*time.Second)
			fr, err := e.at(cand.Addr).OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: group})
			cancel()
			if err != nil || fr.GetError() != nil {
				last = fmt.Sprintf("node %d not serving yet: %v %v", co.GetNodeId(), err, errs.FromProto(fr.GetError()))
				continue
			}
			found = cand
			return true
		}
		return false
	}, 90*time.Second, 100*time.Millisecond, "no coordinator for %q: %s", group, last)
	return found
}

// gapiErr converts a per-item error and checks its code and that its
// message names what went wrong.
func gapiErr(t *testing.T, pe *edpb.Error, code errs.Code, mentions ...string) *errs.Error {
	t.Helper()
	require.NotNil(t, pe, "want %s, got success", errs.Name(code))
	e := errs.FromProto(pe)
	require.Equal(t, errs.Name(code), errs.Name(e.Code), "message: %s", e.Message)
	require.NotEmpty(t, e.Message)
	for _, m := range mentions {
		require.Contains(t, e.Message, m)
	}
	return e
}

// gapiNoErr fails on a per-item error, showing it.
func gapiNoErr(t *testing.T, pe *edpb.Error, what string) {
	t.Helper()
	if pe != nil {
		t.Fatalf("%s: %v", what, errs.FromProto(pe))
	}
}

// gapiSubscription is a classic consumer's metadata; userData tells the
// protocols' metadata apart.
func gapiSubscription(userData string, topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics, m.UserData = topics, []byte(userData)
	return m.AppendTo(nil)
}

func gapiAssignment(topic string, partitions ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = topic, partitions
	a.Topics = append(a.Topics, at)
	return a.AppendTo(nil)
}

// gapiMember is one classic member driven call by call.
type gapiMember struct {
	gc        groupv1.GroupCoordinatorServiceClient
	group     string
	id        string
	instance  string
	gen       int32
	sessionMs int32
	protocols []*groupv1.JoinGroupProtocol
}

func gapiNewMember(gc groupv1.GroupCoordinatorServiceClient, group string, sessionMs int32, protocols ...string) *gapiMember {
	m := &gapiMember{gc: gc, group: group, sessionMs: sessionMs}
	for _, p := range protocols {
		m.protocols = append(m.protocols, &groupv1.JoinGroupProtocol{Name: p, Metadata: gapiSubscription(p, "orders")})
	}
	return m
}

func (m *gapiMember) joinRequest() *groupv1.JoinGroupRequest {
	return &groupv1.JoinGroupRequest{GroupId: m.group, SessionTimeoutMs: m.sessionMs, RebalanceTimeoutMs: 30000,
		MemberId: m.id, GroupInstanceId: m.instance, ProtocolType: "consumer", Protocols: m.protocols}
}

type gapiJoined struct {
	resp *groupv1.JoinGroupResponse
	err  error
}

// firstJoin is KIP-394's first step: an unknown member is handed a member
// id and asked to join again with it.
func (m *gapiMember) firstJoin(t *testing.T, ctx context.Context) {
	t.Helper()
	req := m.joinRequest()
	req.MemberId = ""
	resp, err := m.gc.JoinGroup(ctx, req)
	require.NoError(t, err)
	gapiErr(t, resp.GetError(), errs.MemberIDRequired, resp.GetMemberId())
	require.NotEmpty(t, resp.GetMemberId())
	m.id = resp.GetMemberId()
}

// joinAsync sends JoinGroup, which waits for the join phase to end.
func (m *gapiMember) joinAsync(ctx context.Context) <-chan gapiJoined {
	ch := make(chan gapiJoined, 1)
	req := m.joinRequest()
	go func() {
		resp, err := m.gc.JoinGroup(ctx, req)
		ch <- gapiJoined{resp, err}
	}()
	return ch
}

// joined takes a JoinGroup answer, which must be a success.
func (m *gapiMember) joined(t *testing.T, ch <-chan gapiJoined) *groupv1.JoinGroupResponse {
	t.Helper()
	var r gapiJoined
	select {
	case r = <-ch:
	case <-time.After(40 * time.Second):
		t.Fatalf("member %s: JoinGroup did not answer", m.id)
	}
	require.NoError(t, r.err)
	gapiNoErr(t, r.resp.GetError(), "JoinGroup of "+m.id)
	m.id, m.gen = r.resp.GetMemberId(), r.resp.GetGenerationId()
	return r.resp
}

func (m *gapiMember) heartbeat(ctx context.Context) (*edpb.Error, error) {
	resp, err := m.gc.Heartbeat(ctx, &groupv1.HeartbeatRequest{GroupId: m.group, GenerationId: m.gen, MemberId: m.id, GroupInstanceId: m.instance})
	return resp.GetError(), err
}

// awaitRebalance polls Heartbeat until the coordinator answers
// REBALANCE_IN_PROGRESS.
func (m *gapiMember) awaitRebalance(t *testing.T, ctx context.Context) {
	t.Helper()
	require.Eventually(t, func() bool {
		pe, err := m.heartbeat(ctx)
		require.NoError(t, err)
		if pe == nil {
			return false
		}
		gapiErr(t, pe, errs.RebalanceInProgress, m.group)
		return true
	}, 20*time.Second, 50*time.Millisecond, "member %s never heard of the rebalance", m.id)
}

func (m *gapiMember) syncAsync(ctx context.Context, assignments map[string][]byte) <-chan *groupv1.SyncGroupResponse {
	req := &groupv1.SyncGroupRequest{GroupId: m.group, GenerationId: m.gen, MemberId: m.id, GroupInstanceId: m.instance, ProtocolType: "consumer"}
	for _, id := range gapiSortedKeys(assignments) {
		req.Assignments = append(req.Assignments, &groupv1.SyncGroupAssignment{MemberId: id, Assignment: assignments[id]})
	}
	ch := make(chan *groupv1.SyncGroupResponse, 1)
	go func() {
		resp, err := m.gc.SyncGroup(ctx, req)
		if err != nil {
			resp = &groupv1.SyncGroupResponse{Error: errs.From(err).Proto()}
		}
		ch <- resp
	}()
	return ch
}

func gapiSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// gapiFormGroup brings members into one stable generation the way Kafka's
// clients do: each new member joins, the earlier ones learn of the
// rebalance from their heartbeat and rejoin; then everyone syncs and the
// leader hands member i partition i of "orders". It returns the leader's
// JoinGroup answer.
func gapiFormGroup(t *testing.T, ctx context.Context, members ...*gapiMember) *groupv1.JoinGroupResponse {
	t.Helper()
	chans := make([]<-chan gapiJoined, len(members))
	resps := make([]*groupv1.JoinGroupResponse, len(members))
	for i, m := range members {
		if m.instance == "" {
			m.firstJoin(t, ctx)
		}
		chans[i] = m.joinAsync(ctx)
		for j := range i {
			members[j].awaitRebalance(t, ctx)
			chans[j] = members[j].joinAsync(ctx)
		}
		for j := range i + 1 {
			resps[j] = members[j].joined(t, chans[j])
		}
	}
	var leader *groupv1.JoinGroupResponse
	for i, m := range members {
		if resps[i].GetLeader() == m.id {
			leader = resps[i]
		}
	}
	require.NotNil(t, leader, "one member leads")
	gen := members[0].gen
	assign := map[string][]byte{}
	for i, m := range members {
		require.Equal(t, gen, m.gen, "every member is in the same generation")
		assign[m.id] = gapiAssignment("orders", int32(i))
	}
	syncs := make([]<-chan *groupv1.SyncGroupResponse, len(members))
	for i, m := range members {
		var a map[string][]byte
		if m.id == leader.GetLeader() {
			a = assign
		}
		syncs[i] = m.syncAsync(ctx, a)
	}
	for i, m := range members {
		resp := <-syncs[i]
		gapiNoErr(t, resp.GetError(), "SyncGroup of "+m.id)
		require.Equal(t, assign[m.id], resp.GetAssignment(), "member %s gets what the leader assigned it", m.id)
	}
	return leader
}

// gapiDescribe describes one group at its coordinator.
func gapiDescribe(t *testing.T, ctx context.Context, gc groupv1.GroupCoordinatorServiceClient, group string) *groupv1.GroupDescription {
	t.Helper()
	resp, err := gc.DescribeGroups(ctx, &groupv1.DescribeGroupsRequest{GroupIds: []string{group}})
	require.NoError(t, err)
	require.Len(t, resp.GetGroups(), 1)
	d := resp.GetGroups()[0]
	gapiNoErr(t, d.GetError(), "DescribeGroups "+group)
	return d
}

func gapiMemberIDs(d *groupv1.GroupDescription) []string {
	var ids []string
	for _, m := range d.GetMembers() {
		ids = append(ids, m.GetMemberId())
	}
	slices.Sort(ids)
	return ids
}

// gapiOffsets fetches every committed offset of group as "topic-p" →
// offset.
func gapiOffsets(t *testing.T, ctx context.Context, gc groupv1.GroupCoordinatorServiceClient, group string) map[string]int64 {
	t.Helper()
	resp, err := gc.OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: group})
	require.NoError(t, err)
	gapiNoErr(t, resp.GetError(), "OffsetFetch "+group)
	out := map[string]int64{}
	for _, p := range resp.GetPartitions() {
		gapiNoErr(t, p.GetError(), "OffsetFetch partition")
		out[fmt.Sprintf("%s-%d", p.GetTopic(), p.GetPartition())] = p.GetOffset()
	}
	return out
}

func gapiCommit(group string, gen int32, member string, parts ...*groupv1.OffsetCommitPartition) *groupv1.OffsetCommitRequest {
	return &groupv1.OffsetCommitRequest{GroupId: group, GenerationIdOrMemberEpoch: gen, MemberId: member, Partitions: parts}
}

func gapiPart(topic string, partition int32, offset int64) *groupv1.OffsetCommitPartition {
	return &groupv1.OffsetCommitPartition{Topic: topic, Partition: partition, Offset: offset}
}

// gapiPartitionFor is Kafka's placement of a group on the offsets topic:
// abs(Java String.hashCode) mod n, with Utils.abs mapping MinInt32 to 0.
func gapiPartitionFor(group string, n int32) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % n
}

func TestGroupAPIPartitionForMatchesJava(t *testing.T) {
	// Java: "".hashCode() == 0; "Aa" and "BB" both hash to 2112;
	// "polygenelubricants".hashCode() == Integer.MIN_VALUE, which Kafka's
	// Utils.abs maps to 0.
	require.EqualValues(t, 0, gapiPartitionFor("", 50))
	require.EqualValues(t, 12, gapiPartitionFor("Aa", 50))
	require.EqualValues(t, 12, gapiPartitionFor("BB", 50))
	require.EqualValues(t, 0, gapiPartitionFor("polygenelubricants", 50))
}

// TestGroupAPIBadInput sends malformed, stale and misdirected calls. Each
// gets Kafka's error code with a message that says what to do, and none
// changes the group or its offsets.
func TestGroupAPIBadInput(t *testing.T) {
	e := gapiStart(t, 3, "--group.max-size=2", "--group.min-session-timeout=1s")
	t.Logf("cluster up")
	_, err := e.cl.CreateTopic(e.ctx, "orders", 2, 1, nil)
	require.NoError(t, err)
	_, err = e.cl.CreateTopic(e.ctx, "other", 1, 1, nil)
	require.NoError(t, err)

	// A stable classic group with one member that committed orders-0=5.
	co := e.coordinator("classic-1", -1)
	gc := e.at(co.Addr)
	a := gapiNewMember(gc, "classic-1", 10000, "range")
	gapiFormGroup(t, e.ctx, a)
	ctx, cancel := e.call()
	defer cancel()
	cr, err := gc.OffsetCommit(ctx, gapiCommit("classic-1", a.gen, a.id, gapiPart("orders", 0, 5)))
	require.NoError(t, err)
	gapiNoErr(t, cr.GetResults()[0].GetError(), "member commit")
	// unchanged checks that classic-1 is as it was.
	unchanged := func(t *testing.T) {
		t.Helper()
		ctx, cancel := e.call()
		defer cancel()
		d := gapiDescribe(t, ctx, gc, "classic-1")
		require.Equal(t, "Stable", d.GetState())
		require.Equal(t, a.gen, d.GetEpoch())
		require.Equal(t, []string{a.id}, gapiMemberIDs(d))
		require.Equal(t, map[string]int64{"orders-0": 5}, gapiOffsets(t, ctx, gc, "classic-1"))
		pe, err := a.heartbeat(ctx)
		require.NoError(t, err)
		gapiNoErr(t, pe, "the member's own heartbeat")
	}
	unchanged(t)

	t.Run("group id empty or too long", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		for _, tc := range []struct{ id, mention string }{{"", "empty"}, {strings.Repeat("g", 300), "300 bytes"}} {
			for _, p := range e.c.StorageNodes() {
				g := e.at(p.Addr)
				fc, err := g.FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{Keys: []string{tc.id}})
				require.NoError(t, err)
				gapiErr(t, fc.GetCoordinators()[0].GetError(), errs.InvalidGroupID, "group", tc.mention)
				jr, err := g.JoinGroup(ctx, &groupv1.JoinGroupRequest{GroupId: tc.id, SessionTimeoutMs: 10000,
					ProtocolType: "consumer", Protocols: a.protocols})
				require.NoError(t, err)
				gapiErr(t, jr.GetError(), errs.InvalidGroupID, tc.mention)
				hb, err := g.Heartbeat(ctx, &groupv1.HeartbeatRequest{GroupId: tc.id, MemberId: a.id, GenerationId: a.gen})
				require.NoError(t, err)
				gapiErr(t, hb.GetError(), errs.InvalidGroupID, tc.mention)
				oc, err := g.OffsetCommit(ctx, gapiCommit(tc.id, -1, "", gapiPart("orders", 0, 1)))
				require.NoError(t, err)
				gapiErr(t, oc.GetResults()[0].GetError(), errs.InvalidGroupID, tc.mention)
				of, err := g.OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: tc.id})
				require.NoError(t, err)
				gapiErr(t, of.GetError(), errs.InvalidGroupID, tc.mention)
				dg, err := g.DescribeGroups(ctx, &groupv1.DescribeGroupsRequest{GroupIds: []string{tc.id}})
				require.NoError(t, err)
				gapiErr(t, dg.GetGroups()[0].GetError(), errs.InvalidGroupID, tc.mention)
				lg, err := g.ListGroups(ctx, &groupv1.ListGroupsRequest{})
				require.NoError(t, err)
				for _, l := range lg.GetGroups() {
					require.NotEqual(t, tc.id, l.GetGroupId(), "a refused id never becomes a group")
				}
			}
		}
		unchanged(t)
	})

	t.Run("unknown member and stale generation", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		for _, tc := range []struct {
			member string
			gen    int32
			code   errs.Code
		}{{"nobody", a.gen, errs.UnknownMemberID}, {a.id, a.gen - 1, errs.IllegalGeneration}, {a.id, a.gen + 1, errs.IllegalGeneration}} {
			hb, err := gc.Heartbeat(ctx, &groupv1.HeartbeatRequest{GroupId: "classic-1", MemberId: tc.member, GenerationId: tc.gen})
			require.NoError(t, err)
			gapiErr(t, hb.GetError(), tc.code, "classic-1", "join again")
			sr, err := gc.SyncGroup(ctx, &groupv1.SyncGroupRequest{GroupId: "classic-1", MemberId: tc.member, GenerationId: tc.gen,
				Assignments: []*groupv1.SyncGroupAssignment{{MemberId: a.id, Assignment: gapiAssignment("orders", 1)}}})
			require.NoError(t, err)
			gapiErr(t, sr.GetError(), tc.code, "classic-1", "join again")
			oc, err := gc.OffsetCommit(ctx, gapiCommit("classic-1", tc.gen, tc.member, gapiPart("orders", 0, 99), gapiPart("orders", 1, 99)))
			require.NoError(t, err)
			for _, r := range oc.GetResults() {
				gapiErr(t, r.GetError(), tc.code, "classic-1")
			}
		}
		unchanged(t)
	})

	t.Run("session timeout outside bounds", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		for _, ms := range []int32{500, int32((31 * time.Minute).Milliseconds())} {
			m := gapiNewMember(gc, "classic-1", ms, "range")
			jr, err := gc.JoinGroup(ctx, m.joinRequest())
			require.NoError(t, err)
			gapiErr(t, jr.GetError(), errs.InvalidSessionTimeout, fmt.Sprintf("%d ms", ms), "[1000, 1800000] ms")
			// The member of the group is asked to change nothing either.
			a2 := *a
			a2.sessionMs = ms
			jr, err = gc.JoinGroup(ctx, a2.joinRequest())
			require.NoError(t, err)
			gapiErr(t, jr.GetError(), errs.InvalidSessionTimeout)
		}
		unchanged(t)
	})

	t.Run("group max size", func(t *testing.T) {
		gc := e.at(e.coordinator("classic-2", -1).Addr)
		b := gapiNewMember(gc, "classic-2", 10000, "range")
		c := gapiNewMember(gc, "classic-2", 10000, "range")
		gapiFormGroup(t, e.ctx, b, c)
		ctx, cancel := e.call()
		defer cancel()
		before := gapiDescribe(t, ctx, gc, "classic-2")
		third := gapiNewMember(gc, "classic-2", 10000, "range")
		jr, err := gc.JoinGroup(ctx, third.joinRequest())
		require.NoError(t, err)
		gapiErr(t, jr.GetError(), errs.GroupMaxSizeReached, "group.max.size=2")
		// A static member is counted too.
		third.instance = "static-3"
		jr, err = gc.JoinGroup(ctx, third.joinRequest())
		require.NoError(t, err)
		gapiErr(t, jr.GetError(), errs.GroupMaxSizeReached, "group.max.size=2")
		after := gapiDescribe(t, ctx, gc, "classic-2")
		require.Equal(t, "Stable", after.GetState())
		require.Equal(t, before.GetEpoch(), after.GetEpoch(), "no rebalance")
		require.Equal(t, gapiMemberIDs(before), gapiMemberIDs(after))
		for _, m := range []*gapiMember{b, c} {
			pe, err := m.heartbeat(ctx)
			require.NoError(t, err)
			gapiNoErr(t, pe, "heartbeat after the refused join")
		}
	})

	t.Run("offset commit partitions", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		gco := e.at(e.coordinator("offsets-1", -1).Addr)
		oc, err := gco.OffsetCommit(ctx, gapiCommit("offsets-1", -1, "",
			gapiPart("orders", 0, 10), gapiPart("orders", 2, 11), gapiPart("no-such-topic", 0, 12), gapiPart("orders", -1, 13)))
		require.NoError(t, err)
		require.Len(t, oc.GetResults(), 4)
		gapiNoErr(t, oc.GetResults()[0].GetError(), "valid partition in the same request")
		gapiErr(t, oc.GetResults()[1].GetError(), errs.UnknownTopicOrPartition, `"orders"`, "partition 2")
		gapiErr(t, oc.GetResults()[2].GetError(), errs.UnknownTopicOrPartition, `"no-such-topic"`)
		gapiErr(t, oc.GetResults()[3].GetError(), errs.UnknownTopicOrPartition, `"orders"`)
		oc, err = gco.OffsetCommit(ctx, gapiCommit("offsets-1", -1, "", gapiPart("orders", 1, -3)))
		require.NoError(t, err)
		gapiErr(t, oc.GetResults()[0].GetError(), errs.InvalidRequest, "-3", "negative")
		big := gapiPart("orders", 1, 20)
		big.Metadata = strings.Repeat("m", 4097)
		oc, err = gco.OffsetCommit(ctx, gapiCommit("offsets-1", -1, "", big))
		require.NoError(t, err)
		gapiErr(t, oc.GetResults()[0].GetError(), errs.OffsetMetadataTooLarge, "4097 bytes", "offset.metadata.max.bytes=4096")
		require.Equal(t, map[string]int64{"orders-0": 10}, gapiOffsets(t, ctx, gco, "offsets-1"),
			"only the valid partition was committed")
		// The limit itself is allowed.
		big.Metadata = strings.Repeat("m", 4096)
		oc, err = gco.OffsetCommit(ctx, gapiCommit("offsets-1", -1, "", big))
		require.NoError(t, err)
		gapiNoErr(t, oc.GetResults()[0].GetError(), "4096 bytes of metadata")
		require.Equal(t, map[string]int64{"orders-0": 10, "orders-1": 20}, gapiOffsets(t, ctx, gco, "offsets-1"))
		// An empty commit is malformed: a gRPC status.
		_, err = gco.OffsetCommit(ctx, gapiCommit("offsets-1", -1, ""))
		require.Equal(t, errs.Name(errs.InvalidRequest), errs.Name(errs.CodeOf(err)), "%v", err)
		require.Contains(t, errs.From(err).Message, "partitions")
	})

	t.Run("consumer protocol", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		gcc := e.at(e.coordinator("consumer-1", -1).Addr)
		hb := func(req *groupv1.ConsumerGroupHeartbeatRequest) *groupv1.ConsumerGroupHeartbeatResponse {
			req.GroupId = "consumer-1"
			if req.GetMemberEpoch() == 0 {
				req.RebalanceTimeoutMs = 30000
			}
			resp, err := gcc.ConsumerGroupHeartbeat(ctx, req)
			require.NoError(t, err)
			return resp
		}
		// X subscribes to a topic that does not exist: it owns nothing.
		x := hb(&groupv1.ConsumerGroupHeartbeatRequest{SubscribedTopicNames: []string{"absent"}})
		gapiNoErr(t, x.GetError(), "join of X")
		y := hb(&groupv1.ConsumerGroupHeartbeatRequest{SubscribedTopicNames: []string{"orders"}})
		gapiNoErr(t, y.GetError(), "join of Y")
		firstEpoch := x.GetMemberEpoch()
		require.Eventually(t, func() bool {
			r := hb(&groupv1.ConsumerGroupHeartbeatRequest{MemberId: x.GetMemberId(), MemberEpoch: x.GetMemberEpoch()})
			gapiNoErr(t, r.GetError(), "heartbeat of X")
			x.MemberEpoch = r.GetMemberEpoch()
			return x.GetMemberEpoch() > firstEpoch
		}, 10*time.Second, 50*time.Millisecond, "X moves to the epoch Y's join started")
		before := gapiDescribe(t, ctx, gcc, "consumer-1")
		require.Len(t, before.GetMembers(), 2)

		oc, err := gcc.OffsetCommit(ctx, gapiCommit("consumer-1", firstEpoch, x.GetMemberId(), gapiPart("orders", 0, 7)))
		require.NoError(t, err)
		gapiErr(t, oc.GetResults()[0].GetError(), errs.StaleMemberEpoch, "heartbeat")
		r := hb(&groupv1.ConsumerGroupHeartbeatRequest{MemberId: x.GetMemberId(), MemberEpoch: x.GetMemberEpoch() + 5})
		gapiErr(t, r.GetError(), errs.FencedMemberEpoch, "rejoin with member epoch 0")
		r = hb(&groupv1.ConsumerGroupHeartbeatRequest{SubscribedTopicNames: []string{"orders"}, ServerAssignor: "nonesuch"})
		gapiErr(t, r.GetError(), errs.UnsupportedAssignor, `"nonesuch"`, "uniform")
		jr, err := gcc.JoinGroup(ctx, gapiNewMember(gcc, "consumer-1", 10000, "range").joinRequest())
		require.NoError(t, err)
		gapiErr(t, jr.GetError(), errs.InconsistentGroupProtocol, "consumer protocol")

		after := gapiDescribe(t, ctx, gcc, "consumer-1")
		require.Equal(t, "consumer", after.GetType())
		require.Equal(t, before.GetEpoch(), after.GetEpoch(), "no refused call bumped the group epoch")
		require.Equal(t, gapiMemberIDs(before), gapiMemberIDs(after))
		require.Empty(t, gapiOffsets(t, ctx, gcc, "consumer-1"))
		r = hb(&groupv1.ConsumerGroupHeartbeatRequest{MemberId: x.GetMemberId(), MemberEpoch: x.GetMemberEpoch()})
		gapiNoErr(t, r.GetError(), "X's heartbeat with its own epoch after the fenced one")

	})

	t.Run("consumer protocol commit with an older epoch", func(t *testing.T) {
		// KIP-1251: a member that committed with the epoch it had before a
		// heartbeat bumped it may commit the partitions it has owned since
		// that epoch; any other partition is STALE_MEMBER_EPOCH.
		ctx, cancel := e.call()
		defer cancel()
		gcc := e.at(e.coordinator("consumer-2", -1).Addr)
		type cmember struct {
			id    string
			epoch int32
			owned []*groupv1.TopicPartitions
		}
		hb := func(m *cmember, topics ...string) {
			t.Helper()
			req := &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "consumer-2", MemberId: m.id, MemberEpoch: m.epoch,
				SubscribedTopicNames: topics, OwnedPartitions: m.owned}
			if m.epoch == 0 {
				req.RebalanceTimeoutMs, req.OwnedPartitions = 30000, nil
			}
			resp, err := gcc.ConsumerGroupHeartbeat(ctx, req)
			require.NoError(t, err)
			gapiNoErr(t, resp.GetError(), "ConsumerGroupHeartbeat")
			m.id, m.epoch = resp.GetMemberId(), resp.GetMemberEpoch()
			if resp.Assignment != nil {
				m.owned = resp.GetAssignment().GetTopicPartitions()
			}
		}
		y := &cmember{}
		hb(y, "orders")
		require.Eventually(t, func() bool {
			hb(y)
			return len(y.owned) == 1 && len(y.owned[0].GetPartitions()) == 2
		}, 10*time.Second, 50*time.Millisecond, "Y, alone, owns both partitions of orders")
		owningEpoch := y.epoch
		z := &cmember{}
		hb(z, "absent")
		require.Eventually(t, func() bool {
			hb(y)
			return y.epoch > owningEpoch
		}, 10*time.Second, 50*time.Millisecond, "Y moves to the epoch Z's join started")
		oc, err := gcc.OffsetCommit(ctx, gapiCommit("consumer-2", owningEpoch, y.id, gapiPart("orders", 0, 11), gapiPart("other", 0, 12)))
		require.NoError(t, err)
		gapiNoErr(t, oc.GetResults()[0].GetError(), "a partition Y has owned since the epoch it commits with")
		gapiErr(t, oc.GetResults()[1].GetError(), errs.StaleMemberEpoch, "other-0", "heartbeat")
		require.Equal(t, map[string]int64{"orders-0": 11}, gapiOffsets(t, ctx, gcc, "consumer-2"))
		oc, err = gcc.OffsetCommit(ctx, gapiCommit("consumer-2", y.epoch+1, y.id, gapiPart("orders", 0, 13)))
		require.NoError(t, err)
		gapiErr(t, oc.GetResults()[0].GetError(), errs.FencedMemberEpoch, "rejoin")
		require.Equal(t, map[string]int64{"orders-0": 11}, gapiOffsets(t, ctx, gcc, "consumer-2"))
	})

	t.Run("refused first join leaves no group", func(t *testing.T) {
		// As in Kafka, where a heartbeat is validated before any group is
		// looked up or created.
		ctx, cancel := e.call()
		defer cancel()
		gcn := e.at(e.coordinator("consumer-new", -1).Addr)
		resp, err := gcn.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "consumer-new", RebalanceTimeoutMs: 30000,
			SubscribedTopicNames: []string{"orders"}, ServerAssignor: "nonesuch"})
		require.NoError(t, err)
		gapiErr(t, resp.GetError(), errs.UnsupportedAssignor, `"nonesuch"`)
		lg, err := gcn.ListGroups(ctx, &groupv1.ListGroupsRequest{})
		require.NoError(t, err)
		for _, l := range lg.GetGroups() {
			require.NotEqual(t, "consumer-new", l.GetGroupId(), "ListGroups lists a group no member ever joined: %v", l)
		}
		d := gapiDescribe(t, ctx, gcn, "consumer-new")
		require.Equal(t, "Dead", d.GetState(), "a join refused for its assignor must not create the group (got type %s)", d.GetType())
	})

	t.Run("delete groups and offsets", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		dr, err := gc.DeleteGroups(ctx, &groupv1.DeleteGroupsRequest{GroupIds: []string{"classic-1"}})
		require.NoError(t, err)
		gapiErr(t, dr.GetResults()[0].GetError(), errs.NonEmptyGroup, `"classic-1"`, "active members")
		gnw := e.at(e.coordinator("never-was", -1).Addr)
		dr, err = gnw.DeleteGroups(ctx, &groupv1.DeleteGroupsRequest{GroupIds: []string{"never-was"}})
		require.NoError(t, err)
		gapiErr(t, dr.GetResults()[0].GetError(), errs.GroupIDNotFound, `"never-was"`)
		od, err := gc.OffsetDelete(ctx, &groupv1.OffsetDeleteRequest{GroupId: "classic-1",
			Partitions: []*commonv1.TopicPartition{{Topic: "orders", Partition: 0}}})
		require.NoError(t, err)
		gapiNoErr(t, od.GetError(), "OffsetDelete group-level")
		gapiErr(t, od.GetResults()[0].GetError(), errs.GroupSubscribedToTopic, `"orders"`)
		unchanged(t)
		require.Equal(t, "Dead", gapiDescribe(t, ctx, gnw, "never-was").GetState())
	})

	t.Run("wrong node", func(t *testing.T) {
		ctx, cancel := e.call()
		defer cancel()
		var other *devcluster.Process
		for _, p := range e.c.StorageNodes() {
			if p.NodeID != co.NodeID {
				other = p
				break
			}
		}
		wrong := e.at(other.Addr)
		hint := func(pe *edpb.Error) {
			t.Helper()
			ee := gapiErr(t, pe, errs.NotCoordinator, "classic-1", co.Addr)
			require.NotNil(t, ee.Coordinator, "NOT_COORDINATOR carries a hint")
			require.Equal(t, co.NodeID, ee.Coordinator.GetNodeId())
			require.Equal(t, co.Addr, ee.Coordinator.GetAddress())
			require.Equal(t, "classic-1", ee.Coordinator.GetKey())
		}
		hb, err := wrong.Heartbeat(ctx, &groupv1.HeartbeatRequest{GroupId: "classic-1", MemberId: a.id, GenerationId: a.gen})
		require.NoError(t, err)
		hint(hb.GetError())
		oc, err := wrong.OffsetCommit(ctx, gapiCommit("classic-1", a.gen, a.id, gapiPart("orders", 0, 77)))
		require.NoError(t, err)
		hint(oc.GetResults()[0].GetError())
		jr, err := wrong.JoinGroup(ctx, a.joinRequest())
		require.NoError(t, err)
		hint(jr.GetError())
		of, err := wrong.OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: "classic-1"})
		require.NoError(t, err)
		hint(of.GetError())
		unchanged(t)
	})
}

// TestGroupAPIClassicProtocol checks Kafka's classic group protocol on the
// wire: KIP-394 joins, generations, the leader's view of the members,
// SyncGroup, REBALANCE_IN_PROGRESS, protocol selection, static members
// (KIP-345) and session expiry.
func TestGroupAPIClassicProtocol(t *testing.T) {
	e := gapiStart(t, 1, "--group.min-session-timeout=1s")
	_, err := e.cl.CreateTopic(e.ctx, "orders", 3, 1, nil)
	require.NoError(t, err)
	gc := e.at(e.coordinator("rebalance", -1).Addr)

	t.Run("join rebalance sync and protocol selection", func(t *testing.T) {
		ctx := e.ctx
		require.Equal(t, "Dead", gapiDescribe(t, ctx, gc, "rebalance").GetState())
		a := gapiNewMember(gc, "rebalance", 10000, "sticky", "range", "roundrobin")
		a.firstJoin(t, ctx)
		d := gapiDescribe(t, ctx, gc, "rebalance")
		require.Empty(t, d.GetMembers(), "a member id handed out is not a member yet")
		// Only handed-out ids are accepted (KIP-394).
		made := *a
		made.id = "made-up"
		jr, err := gc.JoinGroup(ctx, made.joinRequest())
		require.NoError(t, err)
		gapiErr(t, jr.GetError(), errs.UnknownMemberID, "made-up", "empty member id")

		ra := a.joined(t, a.joinAsync(ctx))
		require.EqualValues(t, 1, ra.GetGenerationId())
		require.Equal(t, a.id, ra.GetLeader())
		require.Equal(t, "sticky", ra.GetProtocolName(), "alone, A gets its first choice")
		require.Equal(t, "consumer", ra.GetProtocolType())
		require.Len(t, ra.GetMembers(), 1)
		sr := <-a.syncAsync(ctx, map[string][]byte{a.id: gapiAssignment("orders", 0, 1, 2)})
		gapiNoErr(t, sr.GetError(), "SyncGroup of A")
		require.Equal(t, gapiAssignment("orders", 0, 1, 2), sr.GetAssignment())
		require.Equal(t, "sticky", sr.GetProtocolName())
		d = gapiDescribe(t, ctx, gc, "rebalance")
		require.Equal(t, "Stable", d.GetState())
		require.EqualValues(t, 1, d.GetEpoch())

		// B joins: A hears REBALANCE_IN_PROGRESS, rejoins, generation 2.
		b := gapiNewMember(gc, "rebalance", 10000, "range", "roundrobin")
		b.firstJoin(t, ctx)
		chB := b.joinAsync(ctx)
		a.awaitRebalance(t, ctx)
		require.Equal(t, "PreparingRebalance", gapiDescribe(t, ctx, gc, "rebalance").GetState())
		chA := a.joinAsync(ctx)
		ra, rb := a.joined(t, chA), b.joined(t, chB)
		require.EqualValues(t, 2, ra.GetGenerationId())
		require.EqualValues(t, 2, rb.GetGenerationId())
		require.Equal(t, ra.GetLeader(), rb.GetLeader())
		require.Equal(t, "range", ra.GetProtocolName(), "sticky is not supported by B: range is the common protocol both prefer")
		require.Equal(t, "range", rb.GetProtocolName())
		leader, follower, lresp, fresp := a, b, ra, rb
		if ra.GetLeader() == b.id {
			leader, follower, lresp, fresp = b, a, rb, ra
		}
		require.Empty(t, fresp.GetMembers(), "only the leader gets the members")
		got := map[string][]byte{}
		for _, m := range lresp.GetMembers() {
			got[m.GetMemberId()] = m.GetMetadata()
		}
		require.Equal(t, map[string][]byte{a.id: gapiSubscription("range", "orders"), b.id: gapiSubscription("range", "orders")}, got,
			"the leader gets every member's metadata for the chosen protocol")
		assign := map[string][]byte{a.id: gapiAssignment("orders", 0, 1), b.id: gapiAssignment("orders", 2)}
		chF := follower.syncAsync(ctx, nil)
		chL := leader.syncAsync(ctx, assign)
		for _, x := range []struct {
			m  *gapiMember
			ch <-chan *groupv1.SyncGroupResponse
		}{{follower, chF}, {leader, chL}} {
			r := <-x.ch
			gapiNoErr(t, r.GetError(), "SyncGroup")
			require.Equal(t, assign[x.m.id], r.GetAssignment(), "SyncGroup hands out the leader's assignment")
		}
		for _, m := range []*gapiMember{a, b} {
			pe, err := m.heartbeat(ctx)
			require.NoError(t, err)
			gapiNoErr(t, pe, "heartbeat in generation 2")
		}

		// A member sharing no protocol, or with another protocol type, is
		// refused and starts no rebalance.
		noCommon := gapiNewMember(gc, "rebalance", 10000, "cooperative-sticky").joinRequest()
		otherType := gapiNewMember(gc, "rebalance", 10000, "range").joinRequest()
		otherType.ProtocolType = "connect"
		for _, req := range []*groupv1.JoinGroupRequest{noCommon, otherType} {
			jr, err := gc.JoinGroup(ctx, req)
			require.NoError(t, err)
			gapiErr(t, jr.GetError(), errs.InconsistentGroupProtocol, "rebalance")
		}
		d = gapiDescribe(t, ctx, gc, "rebalance")
		require.Equal(t, "Stable", d.GetState())
		require.EqualValues(t, 2, d.GetEpoch())

		// C joins preferring roundrobin: two votes to one keep range.
		c := gapiNewMember(gc, "rebalance", 10000, "roundrobin", "range")
		c.firstJoin(t, ctx)
		chC := c.joinAsync(ctx)
		a.awaitRebalance(t, ctx)
		b.awaitRebalance(t, ctx)
		chA, chB = a.joinAsync(ctx), b.joinAsync(ctx)
		for _, x := range []struct {
			m  *gapiMember
			ch <-chan gapiJoined
		}{{a, chA}, {b, chB}, {c, chC}} {
			r := x.m.joined(t, x.ch)
			require.EqualValues(t, 3, r.GetGenerationId())
			require.Equal(t, "range", r.GetProtocolName())
		}
		d = gapiDescribe(t, ctx, gc, "rebalance")
		require.Equal(t, "CompletingRebalance", d.GetState())
		require.Equal(t, "range", d.GetProtocol())
		require.Len(t, d.GetMembers(), 3)
	})

	t.Run("static member restart", func(t *testing.T) {
		ctx := e.ctx
		s1 := gapiNewMember(gc, "static", 10000, "range")
		s1.instance = "instance-1"
		s2 := gapiNewMember(gc, "static", 10000, "range")
		s2.instance = "instance-2"
		gapiFormGroup(t, ctx, s1, s2)
		before := gapiDescribe(t, ctx, gc, "static")
		require.Equal(t, "Stable", before.GetState())
		for _, m := range before.GetMembers() {
			require.NotEmpty(t, m.GetGroupInstanceId())
		}
		// s1 restarts: same instance id, no member id.
		restarted := *s1
		restarted.id = ""
		jctx, cancel := e.call()
		defer cancel()
		jr, err := gc.JoinGroup(jctx, restarted.joinRequest())
		require.NoError(t, err)
		gapiNoErr(t, jr.GetError(), "static rejoin")
		require.NotEmpty(t, jr.GetMemberId())
		require.NotEqual(t, s1.id, jr.GetMemberId(), "a restarted static member gets a new member id")
		require.Equal(t, s1.gen, jr.GetGenerationId(), "no rebalance: the generation is unchanged")
		require.Equal(t, "range", jr.GetProtocolName())
		restarted.id, restarted.gen = jr.GetMemberId(), jr.GetGenerationId()

		after := gapiDescribe(t, ctx, gc, "static")
		require.Equal(t, "Stable", after.GetState())
		require.Equal(t, before.GetEpoch(), after.GetEpoch())
		want := []string{restarted.id, s2.id}
		slices.Sort(want)
		require.Equal(t, want, gapiMemberIDs(after))
		// The old member id is fenced on every call.
		pe, err := s1.heartbeat(ctx)
		require.NoError(t, err)
		gapiErr(t, pe, errs.FencedInstanceID, "instance-1")
		sr, err := gc.SyncGroup(ctx, &groupv1.SyncGroupRequest{GroupId: "static", GenerationId: s1.gen, MemberId: s1.id, GroupInstanceId: s1.instance})
		require.NoError(t, err)
		gapiErr(t, sr.GetError(), errs.FencedInstanceID, "instance-1")
		commit := gapiCommit("static", s1.gen, s1.id, gapiPart("orders", 0, 3))
		commit.GroupInstanceId = s1.instance
		oc, err := gc.OffsetCommit(ctx, commit)
		require.NoError(t, err)
		gapiErr(t, oc.GetResults()[0].GetError(), errs.FencedInstanceID, "instance-1")
		require.Empty(t, gapiOffsets(t, ctx, gc, "static"))
		// The new id carries on with the old one's assignment, and the
		// other member sees no rebalance.
		sr, err = gc.SyncGroup(ctx, &groupv1.SyncGroupRequest{GroupId: "static", GenerationId: restarted.gen, MemberId: restarted.id, GroupInstanceId: restarted.instance})
		require.NoError(t, err)
		gapiNoErr(t, sr.GetError(), "SyncGroup of the restarted member")
		require.Equal(t, gapiAssignment("orders", 0), sr.GetAssignment())
		for _, m := range []*gapiMember{&restarted, s2} {
			pe, err := m.heartbeat(ctx)
			require.NoError(t, err)
			gapiNoErr(t, pe, "heartbeat after the static restart")
		}
		commit = gapiCommit("static", restarted.gen, restarted.id, gapiPart("orders", 0, 3))
		commit.GroupInstanceId = restarted.instance
		oc, err = gc.OffsetCommit(ctx, commit)
		require.NoError(t, err)
		gapiNoErr(t, oc.GetResults()[0].GetError(), "commit of the restarted member")
	})

	t.Run("session expiry", func(t *testing.T) {
		ctx := e.ctx
		silent := gapiNewMember(gc, "expiry", 2000, "range")
		alive := gapiNewMember(gc, "expiry", 10000, "range")
		gapiFormGroup(t, ctx, silent, alive)
		lastContact := time.Now()
		gen := alive.gen
		// alive heartbeats; silent says nothing. Its session ends, the
		// group rebalances without it.
		require.Eventually(t, func() bool {
			pe, err := alive.heartbeat(ctx)
			require.NoError(t, err)
			if pe == nil {
				return false
			}
			gapiErr(t, pe, errs.RebalanceInProgress)
			return true
		}, 15*time.Second, 200*time.Millisecond, "the silent member's session never expired")
		expiredAfter := time.Since(lastContact)
		require.GreaterOrEqual(t, expiredAfter, 1500*time.Millisecond, "not before the 2 s session")
		r := alive.joined(t, alive.joinAsync(ctx))
		require.Equal(t, gen+1, r.GetGenerationId())
		require.Equal(t, alive.id, r.GetLeader())
		require.Len(t, r.GetMembers(), 1)
		require.Equal(t, []string{alive.id}, gapiMemberIDs(gapiDescribe(t, ctx, gc, "expiry")))
		pe, err := silent.heartbeat(ctx)
		require.NoError(t, err)
		gapiErr(t, pe, errs.UnknownMemberID, silent.id)
		t.Logf("silent member removed %v after its last call (session 2 s)", expiredAfter.Round(time.Millisecond))
	})
}
