package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// The group coordinator's state across failures: what it acknowledged
// survives the loss of its process, a deposed coordinator acknowledges
// nothing, and __consumer_offsets holds Kafka's record layouts.

// TestGroupAPICoordinatorFailover kills the coordinator of a stable classic
// group with committed offsets; the node that takes over its partition of
// __consumer_offsets (RF 3) serves the same offsets and the same group, and
// the members carry on in their generation without rejoining.
func TestGroupAPICoordinatorFailover(t *testing.T) {
	sideBySide(t)
	e := gapiStart(t, 3, fastSessions...)
	_, err := e.cl.CreateTopic(e.ctx, "orders", 2, 3, nil)
	require.NoError(t, err)
	const group = "durable"
	co := e.coordinator(group, -1)
	gc := e.at(co.Addr)
	pid := gapiPartitionFor(group, gapiOffsetsPartitions)
	offsetsTopic := gapiDescribeTopic(t, e, "__consumer_offsets")
	require.Len(t, offsetsTopic.GetPartitions(), gapiOffsetsPartitions)
	ps := offsetsTopic.GetPartitions()[pid]
	require.Equal(t, co.NodeID, ps.GetLeaderId(), "the coordinator is the leader of partition %d (Kafka's hash of the group id)", pid)
	require.Len(t, ps.GetReplicas(), 3)

	// Session 30 s: longer than the failover, so members survive it.
	a := gapiNewMember(gc, group, 30000, "range")
	b := gapiNewMember(gc, group, 30000, "range")
	s := gapiNewMember(gc, group, 30000, "range")
	s.instance = "static-1"
	formed := time.Now()
	gapiFormGroup(t, e.ctx, a, b, s)
	t.Logf("three members formed generation %d in %v", s.gen, time.Since(formed).Round(time.Millisecond))
	ctx, cancel := e.call()
	defer cancel()
	// The static member restarts: a new member id, same generation, which
	// must survive the failover too.
	restarted := *s
	restarted.id = ""
	jr, err := gc.JoinGroup(ctx, restarted.joinRequest())
	require.NoError(t, err)
	gapiNoErr(t, jr.GetError(), "static rejoin")
	require.Equal(t, s.gen, jr.GetGenerationId())
	restarted.id = jr.GetMemberId()
	p0, p1 := gapiPart("orders", 0, 42), gapiPart("orders", 1, 7)
	p0.Metadata = "from a"
	p0.LeaderEpoch = ptrInt32(3)
	oc, err := gc.OffsetCommit(ctx, gapiCommit(group, a.gen, a.id, p0, p1))
	require.NoError(t, err)
	for _, r := range oc.GetResults() {
		gapiNoErr(t, r.GetError(), "commit before the failover")
	}
	before := gapiDescribe(t, ctx, gc, group)

	require.NoError(t, co.Kill())
	killed := time.Now()
	co2 := e.coordinator(group, co.NodeID)
	t.Logf("node %d coordinates %q %v after node %d was killed", co2.NodeID, group, time.Since(killed).Round(time.Millisecond), co.NodeID)
	gc2 := e.at(co2.Addr)
	ctx2, cancel2 := e.call()
	defer cancel2()
	fr, err := gc2.OffsetFetch(ctx2, &groupv1.OffsetFetchRequest{GroupId: group})
	require.NoError(t, err)
	gapiNoErr(t, fr.GetError(), "OffsetFetch at the new coordinator")
	require.Len(t, fr.GetPartitions(), 2)
	got := fr.GetPartitions()
	require.Equal(t, []any{"orders", int32(0), int64(42), int32(3), "from a"},
		[]any{got[0].GetTopic(), got[0].GetPartition(), got[0].GetOffset(), got[0].GetLeaderEpoch(), got[0].GetMetadata()})
	require.Equal(t, []any{"orders", int32(1), int64(7), int32(-1), ""},
		[]any{got[1].GetTopic(), got[1].GetPartition(), got[1].GetOffset(), got[1].GetLeaderEpoch(), got[1].GetMetadata()})

	after := gapiDescribe(t, ctx2, gc2, group)
	require.Equal(t, "Stable", after.GetState())
	require.Equal(t, before.GetEpoch(), after.GetEpoch())
	require.Equal(t, "range", after.GetProtocol())
	require.Equal(t, gapiMemberIDs(before), gapiMemberIDs(after))
	for i, m := range after.GetMembers() {
		require.Equal(t, before.GetMembers()[i].GetAssignment().GetTopicPartitions(), m.GetAssignment().GetTopicPartitions(),
			"member %s keeps its assignment", m.GetMemberId())
	}
	require.Contains(t, gapiMemberIDs(after), restarted.id, "the restarted static member's id survives")
	require.NotContains(t, gapiMemberIDs(after), s.id)
	for _, m := range []*gapiMember{a, b, &restarted} {
		m.gc = gc2
		pe, err := m.heartbeat(ctx2)
		require.NoError(t, err)
		gapiNoErr(t, pe, "heartbeat in the old generation at the new coordinator")
	}
	s.gc = gc2
	pe, err := s.heartbeat(ctx2)
	require.NoError(t, err)
	gapiErr(t, pe, errs.FencedInstanceID, "static-1")
	oc, err = gc2.OffsetCommit(ctx2, gapiCommit(group, b.gen, b.id, gapiPart("orders", 1, 8)))
	require.NoError(t, err)
	gapiNoErr(t, oc.GetResults()[0].GetError(), "member commit at the new coordinator")
	oc, err = gc2.OffsetCommit(ctx2, gapiCommit(group, b.gen-1, b.id, gapiPart("orders", 1, 1)))
	require.NoError(t, err)
	gapiErr(t, oc.GetResults()[0].GetError(), errs.IllegalGeneration, group)
	require.Equal(t, map[string]int64{"orders-0": 42, "orders-1": 8}, gapiOffsets(t, ctx2, gc2, group))

	// The topic reads as Kafka's: every record decodes with kmsg, each
	// group's records are in its hash partition, and the last ones hold
	// what the coordinator serves.
	recs := gapiReadOffsetsTopic(t, e)
	last := recs.offsets[group]
	require.Equal(t, int64(42), last["orders-0"].Offset)
	require.Equal(t, "from a", last["orders-0"].Metadata)
	require.EqualValues(t, 3, last["orders-0"].LeaderEpoch)
	require.Equal(t, int64(8), last["orders-1"].Offset)
	gm := recs.groups[group]
	require.NotNil(t, gm, "the group's metadata record")
	require.Equal(t, before.GetEpoch(), gm.Generation)
	require.Equal(t, "consumer", gm.ProtocolType)
	require.Equal(t, "range", *gm.Protocol)
	var ids []string
	for _, m := range gm.Members {
		ids = append(ids, m.MemberID)
		var asg kmsg.ConsumerMemberAssignment
		require.NoError(t, asg.ReadFrom(m.Assignment), "a member's assignment is a ConsumerMemberAssignment")
		var sub kmsg.ConsumerMemberMetadata
		require.NoError(t, sub.ReadFrom(m.Subscription), "a member's subscription is a ConsumerMemberMetadata")
		require.Equal(t, []string{"orders"}, sub.Topics)
	}
	slices.Sort(ids)
	require.Equal(t, gapiMemberIDs(before), ids)
}

func ptrInt32(v int32) *int32 { return &v }

func gapiDescribeTopic(t *testing.T, e *gapiEnv, topic string) *controllerv1.TopicDescription {
	t.Helper()
	resp, err := e.cl.DescribeTopics(e.ctx, topic)
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 1)
	d := resp.GetTopics()[0]
	gapiNoErr(t, d.GetError(), "DescribeTopics "+topic)
	return d
}

// gapiOffsetsRecords is what __consumer_offsets holds, decoded: the last
// offset commit per group and "topic-partition", and the last group
// metadata per group (nil after a tombstone).
type gapiOffsetsRecords struct {
	offsets map[string]map[string]kmsg.OffsetCommitValue
	groups  map[string]*kmsg.GroupMetadataValue
}

// gapiReadOffsetsTopic reads every partition of __consumer_offsets to its
// end with the SDK's plain consumer and decodes each record with kmsg as
// Kafka lays them out (the key's version says which: 0 and 1 an offset
// commit, 2 a group's metadata). A record in a partition other than its
// group's hash partition fails the test. With partitions named, only those
// are read. The end of a partition is its high watermark: only what is
// committed is read.
func gapiReadOffsetsTopic(t *testing.T, e *gapiEnv, partitions ...int32) gapiOffsetsRecords {
	t.Helper()
	if len(partitions) == 0 {
		for p := range int32(gapiOffsetsPartitions) {
			partitions = append(partitions, p)
		}
	}
	var tps []client.TopicPartition
	for _, p := range partitions {
		tps = append(tps, client.TopicPartition{Topic: "__consumer_offsets", Partition: p})
	}
	ends, err := e.cl.ListOffsets(e.ctx, client.OffsetLatest, 0, tps...)
	require.NoError(t, err)
	k := e.cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	var want []client.TopicPartition
	for _, tp := range tps {
		if ends[tp] > 0 {
			want = append(want, tp)
		}
	}
	require.NotEmpty(t, want)
	start := time.Now()
	k.Assign(want...)
	out := gapiOffsetsRecords{offsets: map[string]map[string]kmsg.OffsetCommitValue{}, groups: map[string]*kmsg.GroupMetadataValue{}}
	n := 0
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	done := func() bool {
		for _, tp := range want {
			if k.Position(tp) < ends[tp] {
				return false
			}
		}
		return true
	}
	for !done() {
		batch, err := k.Poll(ctx)
		require.NoError(t, err, "reading __consumer_offsets")
		for _, r := range batch {
			n++
			require.GreaterOrEqual(t, len(r.Key), 2, "record %d of partition %d has a versioned key", r.Offset, r.Partition)
			switch v := int16(binary.BigEndian.Uint16(r.Key)); v {
			case 0, 1:
				var key kmsg.OffsetCommitKey
				require.NoError(t, key.ReadFrom(r.Key))
				require.Equal(t, gapiPartitionFor(key.Group, gapiOffsetsPartitions), r.Partition, "group %q", key.Group)
				tp := fmt.Sprintf("%s-%d", key.Topic, key.Partition)
				if out.offsets[key.Group] == nil {
					out.offsets[key.Group] = map[string]kmsg.OffsetCommitValue{}
				}
				if r.Value == nil {
					delete(out.offsets[key.Group], tp)
					continue
				}
				var val kmsg.OffsetCommitValue
				require.NoError(t, val.ReadFrom(r.Value))
				out.offsets[key.Group][tp] = val
			case 2:
				var key kmsg.GroupMetadataKey
				require.NoError(t, key.ReadFrom(r.Key))
				require.Equal(t, gapiPartitionFor(key.Group, gapiOffsetsPartitions), r.Partition, "group %q", key.Group)
				if r.Value == nil {
					out.groups[key.Group] = nil
					continue
				}
				val := new(kmsg.GroupMetadataValue)
				require.NoError(t, val.ReadFrom(r.Value))
				out.groups[key.Group] = val
			case 1000:
				// A consumer-protocol group's state: Kafka's key layout with a
				// version Kafka does not use, and Sluice's own value.
				var key kmsg.GroupMetadataKey
				require.NoError(t, key.ReadFrom(r.Key))
				require.Equal(t, gapiPartitionFor(key.Group, gapiOffsetsPartitions), r.Partition, "group %q", key.Group)
			default:
				t.Fatalf("__consumer_offsets-%d offset %d: key version %d is none of Kafka's offset or group layouts", r.Partition, r.Offset, v)
			}
		}
	}
	t.Logf("decoded %d records of __consumer_offsets with kmsg in %v", n, time.Since(start).Round(time.Millisecond))
	return out
}

// TestGroupAPIDeposedCoordinator pauses a group's coordinator until another
// node coordinates the group, commits there, then resumes the paused
// process and commits straight to it: the deposed coordinator must not
// acknowledge the commit, and the group keeps the new coordinator's offset.
func TestGroupAPIDeposedCoordinator(t *testing.T) {
	sideBySide(t)
	e := gapiStart(t, 3, fastSessions...)
	_, err := e.cl.CreateTopic(e.ctx, "orders", 1, 3, nil)
	require.NoError(t, err)
	const group = "deposed"
	old := e.coordinator(group, -1)
	gcOld := e.at(old.Addr)
	ctx, cancel := e.call()
	defer cancel()
	oc, err := gcOld.OffsetCommit(ctx, gapiCommit(group, -1, "", gapiPart("orders", 0, 100)))
	require.NoError(t, err)
	gapiNoErr(t, oc.GetResults()[0].GetError(), "first commit")

	require.NoError(t, old.Pause())
	t.Cleanup(func() {
		if old.Paused() {
			_ = old.Resume() // the test failed while the process was paused
		}
	})
	paused := time.Now()
	cur := e.coordinator(group, old.NodeID)
	t.Logf("node %d coordinates %q %v after node %d was paused", cur.NodeID, group, time.Since(paused).Round(time.Millisecond), old.NodeID)
	gcCur := e.at(cur.Addr)
	// The new leader's acks=all write completes once the paused replica
	// has left the ISR; until then commits time out and are retried, as a
	// client would.
	var last error
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		oc, err := gcCur.OffsetCommit(ctx, gapiCommit(group, -1, "", gapiPart("orders", 0, 200)))
		if err != nil {
			last = err
			return false
		}
		if pe := oc.GetResults()[0].GetError(); pe != nil {
			last = errs.FromProto(pe)
			require.True(t, errs.FromProto(pe).Retriable(), "commit at the new coordinator: %v", last)
			return false
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "commit at the new coordinator: %v", last)

	// One commit is sent while the process is still stopped (it waits in
	// the socket and is read as soon as the process runs), one right after
	// it resumes: neither may be acknowledged.
	zombie := func(offset int64) <-chan *errs.Error {
		ch := make(chan *errs.Error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(e.ctx, 15*time.Second)
			defer cancel()
			zc, err := gcOld.OffsetCommit(ctx, gapiCommit(group, -1, "", gapiPart("orders", 0, offset)))
			switch {
			case err != nil:
				ch <- errs.From(err)
			case zc.GetResults()[0].GetError() == nil:
				ch <- nil
			default:
				ch <- errs.FromProto(zc.GetResults()[0].GetError())
			}
		}()
		return ch
	}
	inFlight := zombie(300)
	require.NoError(t, old.Resume())
	afterResume := zombie(301)
	for _, ch := range []<-chan *errs.Error{inFlight, afterResume} {
		outcome := <-ch
		require.NotNil(t, outcome, "the deposed coordinator acknowledged a commit")
		t.Logf("the deposed coordinator answered: %v", outcome)
		require.Contains(t, []string{errs.Name(errs.NotCoordinator), errs.Name(errs.CoordinatorNotAvailable), errs.Name(errs.RequestTimedOut)},
			errs.Name(outcome.Code), "%v", outcome)
	}

	now := e.coordinator(group, -1)
	ctx2, cancel2 := e.call()
	defer cancel2()
	require.Equal(t, map[string]int64{"orders-0": 200}, gapiOffsets(t, ctx2, e.at(now.Addr), group),
		"the group keeps the offset the current coordinator acknowledged")
	// Once the old process has caught up it redirects to the current
	// coordinator, or serves the group again itself, never with 300 or 301.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		defer cancel()
		fr, err := e.at(old.Addr).OffsetFetch(ctx, &groupv1.OffsetFetchRequest{GroupId: group})
		if err != nil {
			return false
		}
		if pe := fr.GetError(); pe != nil {
			ee := errs.FromProto(pe)
			return ee.Code == errs.NotCoordinator && ee.Coordinator.GetNodeId() != old.NodeID
		}
		require.Len(t, fr.GetPartitions(), 1)
		require.EqualValues(t, 200, fr.GetPartitions()[0].GetOffset(), "the old node serves the group again with the acknowledged offset")
		return true
	}, 30*time.Second, 100*time.Millisecond, "the resumed node neither redirects nor serves the group")
}

// TestGroupAPIStaticRejoinIsDurable restarts a static member while its
// coordinator's followers on __consumer_offsets are stopped, so the new
// member id cannot be replicated, and then kills the coordinator. Whatever
// the JoinGroup answered must hold at the next coordinator: a member told
// its new id is in the group (Kafka answers the rejoin only once the group
// record is stored, and reverts the id if storing fails) must be known
// there, with the old id fenced.
func TestGroupAPIStaticRejoinIsDurable(t *testing.T) {
	sideBySide(t)
	e := gapiStart(t, 3)
	_, err := e.cl.CreateTopic(e.ctx, "orders", 2, 3, nil)
	require.NoError(t, err)
	const group = "static-durable"
	co := e.coordinator(group, -1)
	gc := e.at(co.Addr)
	s := gapiNewMember(gc, group, 60000, "range")
	s.instance = "static-1"
	other := gapiNewMember(gc, group, 60000, "range")
	gapiFormGroup(t, e.ctx, s, other)
	ps := gapiDescribeTopic(t, e, "__consumer_offsets").GetPartitions()[gapiPartitionFor(group, gapiOffsetsPartitions)]
	require.Len(t, ps.GetIsr(), 3, "the group's offsets partition is fully replicated before the test")

	var followers []int32
	for _, p := range e.c.StorageNodes() {
		if p.NodeID != co.NodeID {
			require.NoError(t, p.Pause())
			followers = append(followers, p.NodeID)
			t.Cleanup(func() {
				if p.Paused() {
					_ = p.Resume()
				}
			})
		}
	}
	// The control: a commit is not acknowledged while no follower can
	// store it.
	cctx, ccancel := context.WithTimeout(e.ctx, time.Second)
	oc, cerr := gc.OffsetCommit(cctx, gapiCommit(group, other.gen, other.id, gapiPart("orders", 0, 1)))
	ccancel()
	if cerr == nil {
		require.NotNil(t, oc.GetResults()[0].GetError(), "a commit was acknowledged while the followers were stopped")
	}
	restarted := *s
	restarted.id = ""
	jctx, jcancel := context.WithTimeout(e.ctx, 3*time.Second)
	jr, jerr := gc.JoinGroup(jctx, restarted.joinRequest())
	jcancel()
	toldNewID := jerr == nil && jr.GetError() == nil
	if toldNewID {
		restarted.id, restarted.gen = jr.GetMemberId(), jr.GetGenerationId()
		t.Logf("JoinGroup answered new member id %s while nodes %v, the partition's followers, were stopped", restarted.id, followers)
		// What is committed (below the high watermark) must already
		// name the new id.
		recs := gapiReadOffsetsTopic(t, e, gapiPartitionFor(group, gapiOffsetsPartitions))
		var committed []string
		for _, m := range recs.groups[group].Members {
			committed = append(committed, m.MemberID)
		}
		require.Contains(t, committed, restarted.id,
			"JoinGroup answered the restarted static member before its new id was committed to __consumer_offsets")
	} else {
		t.Logf("JoinGroup did not succeed while the followers were stopped: %v %v", jerr, errs.FromProto(jr.GetError()))
	}
	require.NoError(t, co.Kill())
	for _, p := range e.c.StorageNodes() {
		if p.Paused() {
			require.NoError(t, p.Resume())
		}
	}
	co2 := e.coordinator(group, co.NodeID)
	gc2 := e.at(co2.Addr)
	ctx, cancel := e.call()
	defer cancel()
	d := gapiDescribe(t, ctx, gc2, group)
	t.Logf("node %d restored members %v", co2.NodeID, gapiMemberIDs(d))
	s.gc, restarted.gc, other.gc = gc2, gc2, gc2
	if toldNewID {
		pe, err := restarted.heartbeat(ctx)
		require.NoError(t, err)
		gapiNoErr(t, pe, "heartbeat of the member id the old coordinator answered, at the new coordinator")
		pe, err = s.heartbeat(ctx)
		require.NoError(t, err)
		gapiErr(t, pe, errs.FencedInstanceID, "static-1")
	} else {
		pe, err := s.heartbeat(ctx)
		require.NoError(t, err)
		gapiNoErr(t, pe, "the old member id, never replaced")
	}
}
