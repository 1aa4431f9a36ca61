package groupcoord

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/service"
)

// heldCoordinator is a coordinator with one loaded shard for every group and
// a topic "t" of 4 partitions, enough to drive ConsumerGroupHeartbeat
// without a log (the consumer protocol writes nothing).
func heldCoordinator(t *testing.T, interval time.Duration) *GroupCoordinator {
	img := metadata.Empty()
	img.Revision = 1
	img.Topics["t"] = &metadata.Topic{Name: "t"}
	for p := int32(0); p < 4; p++ {
		img.Topics["t"].Partitions = append(img.Topics["t"].Partitions, &commonv1.PartitionState{Topic: "t", Partition: p})
	}
	off := &metadata.Topic{Name: OffsetsTopic, Internal: true, Partitions: []*commonv1.PartitionState{{Topic: OffsetsTopic, Partition: 0, LeaderId: 1}}}
	img.Topics[OffsetsTopic] = off
	cache := metadata.NewCache()
	cache.Reset(img)
	c := &GroupCoordinator{now: time.Now, logger: log.Discard(), shards: map[int32]*shard{},
		deps: service.Deps{Metadata: cache, Node: config.Node{ID: 1}},
		cfg:  Config{ConsumerSessionTimeout: time.Minute, ConsumerHeartbeatInterval: interval}}
	c.m = newMetrics(noopMeter(), c)
	c.tracer = noopTracer()
	s := newShard(c, 0, &coordinator.MemLog{})
	s.loaded = true
	c.shards[0] = s
	t.Cleanup(s.cancel)
	return c
}

func owned(a *groupv1.Assignment) []*groupv1.TopicPartitions { return a.GetTopicPartitions() }

// A stable member's held heartbeat is answered as soon as a second member
// joins (with the partitions it must give up), not at the end of its
// heartbeat interval; and the joiner's held heartbeat is answered as soon
// as the first member reports the revocation.
func TestHeldHeartbeatAnswersOnChange(t *testing.T) {
	c := heldCoordinator(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := func(id string) *groupv1.ConsumerGroupHeartbeatResponse {
		resp, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: id, MemberEpoch: 0,
			RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}})
		require.NoError(t, err)
		require.Nil(t, resp.GetError())
		return resp
	}
	a := join("a")
	require.Len(t, owned(a.GetAssignment())[0].GetPartitions(), 4)

	held := make(chan *groupv1.ConsumerGroupHeartbeatResponse, 1)
	go func() {
		resp, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "a",
			MemberEpoch: a.GetMemberEpoch(), OwnedPartitions: owned(a.GetAssignment()), MaxWaitMs: 3_600_000})
		require.NoError(t, err)
		held <- resp
	}()
	// Nothing changes: the heartbeat stays held.
	select {
	case r := <-held:
		t.Fatalf("heartbeat answered with nothing new: %v", r)
	case <-time.After(200 * time.Millisecond):
	}
	b := join("b")
	var r *groupv1.ConsumerGroupHeartbeatResponse
	select {
	case r = <-held:
	case <-ctx.Done():
		t.Fatal("the held heartbeat was not answered when the group changed")
	}
	require.Nil(t, r.GetError())
	require.NotNil(t, r.Assignment, "the answer carries the reduced assignment")
	kept := owned(r.GetAssignment())[0].GetPartitions()
	require.Len(t, kept, 2)

	// b waits for partitions a still holds; its held heartbeat is answered
	// when a reports the revocation.
	go func() {
		resp, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "b",
			MemberEpoch: b.GetMemberEpoch(), OwnedPartitions: owned(b.GetAssignment()), MaxWaitMs: 3_600_000})
		require.NoError(t, err)
		held <- resp
	}()
	select {
	case r := <-held:
		t.Fatalf("b's heartbeat answered before a revoked: %v", r)
	case <-time.After(200 * time.Millisecond):
	}
	_, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "a",
		MemberEpoch: r.GetMemberEpoch(), OwnedPartitions: owned(r.GetAssignment())})
	require.NoError(t, err)
	select {
	case r = <-held:
	case <-ctx.Done():
		t.Fatal("b's held heartbeat was not answered when a released its partitions")
	}
	require.NotNil(t, r.Assignment)
	require.Len(t, owned(r.GetAssignment())[0].GetPartitions(), 2)
}

func noopMeter() metric.Meter { return metricnoop.NewMeterProvider().Meter("") }

func noopTracer() trace.Tracer { return tracenoop.NewTracerProvider().Tracer("") }

// A held heartbeat with nothing new is answered when the heartbeat
// interval ends (it once waited for the call's deadline instead, and the
// member's session, not refreshed meanwhile, expired).
func TestHeldHeartbeatEndsAtTheInterval(t *testing.T) {
	c := heldCoordinator(t, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "a",
		RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	for range 3 {
		r, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "a",
			MemberEpoch: a.GetMemberEpoch(), OwnedPartitions: owned(a.GetAssignment()), MaxWaitMs: 60_000})
		require.NoError(t, err)
		require.Nil(t, r.GetError())
		require.NoError(t, ctx.Err(), "the held heartbeat was answered only at the call's deadline")
	}
}

// A consumer-protocol group's state is written as it changes, and a
// coordinator that replays the partition goes on with the same members and
// epochs: nobody is fenced by a failover.
func TestConsumerGroupStateSurvivesAReload(t *testing.T) {
	c := heldCoordinator(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "a",
		RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	b, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "b",
		RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	old := c.shards[0]
	old.mu.Lock()
	require.False(t, old.groups["g"].consumer.dirty, "every change was written")
	want := old.groups["g"].consumer.Describe()
	old.mu.Unlock()

	// A new coordinator replays the same log.
	s := newShard(c, 0, old.log)
	s.load()
	c.mu.Lock()
	c.shards[0] = s
	c.mu.Unlock()
	s.mu.Lock()
	got := s.groups["g"].consumer.Describe()
	s.mu.Unlock()
	require.True(t, proto.Equal(want, got), "restored group differs:\n%v\n%v", want, got)

	// Both members heartbeat on with the epochs they have: no fencing.
	for _, m := range []*groupv1.ConsumerGroupHeartbeatResponse{a, b} {
		r, err := c.ConsumerGroupHeartbeat(ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: m.GetMemberId(),
			MemberEpoch: m.GetMemberEpoch(), OwnedPartitions: owned(m.GetAssignment())})
		require.NoError(t, err)
		require.Nil(t, r.GetError(), "member %s after the reload", m.GetMemberId())
	}
}
