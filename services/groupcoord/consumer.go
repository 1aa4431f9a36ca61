package groupcoord

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/services/groupcoord/internal/consumer"
)

// consumerGroup is a group on the consumer protocol (KIP-848): the state
// machine in internal/consumer, plus what the shard tracks around it.
//
// Its membership is kept in memory only: after a coordinator moves, members
// learn UNKNOWN_MEMBER_ID on their next heartbeat and rejoin with epoch 0
// (their committed offsets, which are in the log, are kept). Kafka persists
// this state in record layouts kmsg does not define yet.
type consumerGroup struct {
	*consumer.Group
	emptySince time.Time
	// revision is the metadata revision the subscriptions were resolved at.
	revision int64
	epoch    int32
	// changed is closed (and replaced) whenever something changes that a
	// held heartbeat may be waiting for; owned is each member's last
	// reported partitions (ownedKey).
	changed chan struct{}
	owned   map[string]string
	// dirty is set when the group changed since its state was last
	// written.
	dirty bool
}

func newConsumerGroup(g *consumer.Group, revision int64) *consumerGroup {
	return &consumerGroup{Group: g, revision: revision, epoch: g.Epoch(), changed: make(chan struct{}), owned: map[string]string{}}
}

// wake is called on every change of the group: it answers held
// heartbeats, and marks the group for persisting.
func (cg *consumerGroup) wake() {
	close(cg.changed)
	cg.changed = make(chan struct{})
	cg.dirty = true
}

// persistLocked writes the group's state when it changed since the last
// write. The write is not waited for: a coordinator that takes over from an
// older state fences the members that moved past it (their epochs are newer
// than any it knows), and they rejoin.
func (s *shard) persistConsumerLocked(g *group) {
	cg := g.consumer
	if cg == nil || !cg.dirty {
		return
	}
	cg.dirty = false
	s.writeLocked([]kv{{consumerGroupKey(g.id), cg.Snapshot().Encode()}}, func(int64) {}, func(err *errs.Error) {
		s.c.logger.Warn("consumer group state not stored", slog.String("group", g.id), slogErr(err))
	})
}

// imageTopics resolves subscriptions against a metadata image. Internal
// topics are not subscribable, as in Kafka.
type imageTopics struct{ img *metadata.Image }

func (t imageTopics) Partitions(topic string) int32 {
	if tt, ok := t.img.Topics[topic]; ok && !tt.Internal {
		return int32(len(tt.Partitions))
	}
	return 0
}

func (t imageTopics) Names() []string { return t.img.TopicNames(false) }

func (r *GroupCoordinator) consumerConfig() consumer.Config {
	return consumer.Config{SessionTimeout: r.cfg.ConsumerSessionTimeout, HeartbeatInterval: r.cfg.ConsumerHeartbeatInterval,
		DefaultAssignor: consumer.UniformAssignorName, MaxSize: r.cfg.ConsumerMaxSize}
}

// ConsumerGroupHeartbeat is the consumer protocol's one call. With
// max_wait_ms set, a heartbeat that brings the member nothing new is held
// until something changes for it (or the wait ends), so a new target or a
// released partition reaches it at once rather than one heartbeat interval
// later.
func (r *GroupCoordinator) ConsumerGroupHeartbeat(ctx context.Context, req *groupv1.ConsumerGroupHeartbeatRequest) (*groupv1.ConsumerGroupHeartbeatResponse, error) {
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return &groupv1.ConsumerGroupHeartbeatResponse{Error: e.Proto(), MemberId: req.GetMemberId()}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, cg := s.consumerHeartbeatLocked(ctx, req)
	if cg == nil || resp.GetError() != nil || req.GetMaxWaitMs() <= 0 || req.GetMemberEpoch() <= 0 ||
		resp.Assignment != nil || resp.GetMemberEpoch() != req.GetMemberEpoch() {
		return resp, nil
	}
	wait := min(time.Duration(req.GetMaxWaitMs())*time.Millisecond, r.cfg.ConsumerHeartbeatInterval)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := cg.changed
		s.mu.Unlock()
		expired := false
		select {
		case <-changed:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		s.mu.Lock()
		g := s.groups[req.GetGroupId()]
		if g == nil || g.consumer != cg || ctx.Err() != nil || s.ctx.Err() != nil {
			return resp, nil
		}
		// Run the heartbeat again: it refreshes the session (the member
		// was silent while held) and reconciles against the group now.
		next, _ := s.consumerHeartbeatLocked(ctx, req)
		if expired || next.GetError() != nil || next.Assignment != nil || next.GetMemberEpoch() != req.GetMemberEpoch() {
			return next, nil
		}
		resp = next
	}
}

// consumerHeartbeatLocked runs one heartbeat through the group's state
// machine, creating the group on a first join, and wakes held heartbeats
// of the group when it changed anything.
func (s *shard) consumerHeartbeatLocked(ctx context.Context, req *groupv1.ConsumerGroupHeartbeatRequest) (*groupv1.ConsumerGroupHeartbeatResponse, *consumerGroup) {
	r := s.c
	img := r.deps.Metadata.Load()
	now := r.now()
	g := s.groupLocked(req.GetGroupId(), req.GetMemberEpoch() == 0)
	if g == nil {
		return &groupv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(),
			Error: errs.New(errs.UnknownMemberID, "group %q has no member %q; join again with member epoch 0", req.GetGroupId(), req.GetMemberId()).Proto()}, nil
	}
	if g.consumer == nil {
		if g.classic != nil && len(g.classic.members) > 0 {
			return &groupv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(),
				Error: errs.New(errs.InconsistentGroupProtocol, "group %q uses the classic protocol (JoinGroup) and has members; a consumer-protocol member cannot join it until it is empty", g.id).Proto()}, nil
		}
		if req.GetMemberEpoch() != 0 {
			return &groupv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(),
				Error: errs.New(errs.UnknownMemberID, "group %q has no member %q; join again with member epoch 0", g.id, req.GetMemberId()).Proto()}, nil
		}
		g.classic = nil
		g.consumer = newConsumerGroup(consumer.NewGroup(g.id, r.consumerConfig()), img.Revision)
	}
	cg := g.consumer
	if img.Revision != cg.revision {
		cg.TopicsChanged(imageTopics{img})
		cg.revision = img.Revision
	}
	wasEmpty := cg.Empty()
	resp, err := cg.Heartbeat(req, imageTopics{img}, now)
	s.noteConsumerEpochLocked(ctx, cg, now)
	if err != nil {
		if cg.Empty() && len(g.offsets) == 0 && wasEmpty {
			// A refused first join leaves no group behind.
			delete(s.groups, g.id)
		}
		cg.wake()
		return &groupv1.ConsumerGroupHeartbeatResponse{MemberId: req.GetMemberId(), Error: errs.From(err).Proto()}, cg
	}
	if cg.Empty() && !wasEmpty {
		cg.emptySince = now
	}
	owned := ownedKey(req.GetOwnedPartitions())
	if resp.Assignment != nil || resp.GetMemberEpoch() != req.GetMemberEpoch() || cg.owned[resp.GetMemberId()] != owned || req.GetMemberEpoch() < 0 {
		cg.owned[resp.GetMemberId()] = owned
		cg.wake()
	}
	if req.GetMemberEpoch() < 0 {
		delete(cg.owned, resp.GetMemberId())
	}
	s.persistConsumerLocked(g)
	return resp, cg
}

// ownedKey is a compact form of a member's reported partitions, to tell
// whether they changed since its previous heartbeat.
func ownedKey(tps []*groupv1.TopicPartitions) string {
	var b strings.Builder
	for _, tp := range tps {
		b.WriteString(tp.GetTopic())
		for _, p := range tp.GetPartitions() {
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(int(p)))
		}
		b.WriteByte(';')
	}
	return b.String()
}

// noteConsumerEpochLocked counts a group epoch bump as a rebalance.
func (s *shard) noteConsumerEpochLocked(ctx context.Context, cg *consumerGroup, now time.Time) {
	if e := cg.Epoch(); e != cg.epoch {
		if cg.epoch != 0 {
			s.c.m.rebalances.Add(ctx, 1, protocolAttr("consumer"))
			_, span := s.c.tracer.Start(ctx, "group.consumer.epoch")
			span.SetAttributes(attribute.Int("group.epoch", int(e)))
			span.End()
		}
		cg.epoch = e
		cg.wake()
	}
	if cg.Empty() && cg.emptySince.IsZero() {
		cg.emptySince = now
	}
}

// consumerTickLocked expires members and follows topic changes.
func (s *shard) consumerTickLocked(g *group, now time.Time) {
	cg := g.consumer
	img := s.c.deps.Metadata.Load()
	if img.Revision != cg.revision {
		cg.TopicsChanged(imageTopics{img})
		cg.revision = img.Revision
	}
	wasEmpty := cg.Empty()
	if d := cg.NextDeadline(); !d.IsZero() && !now.Before(d) {
		for _, id := range cg.Expire(now) {
			s.c.logger.Info("group member fenced", slog.String("group", g.id), slog.String("member", id))
			delete(cg.owned, id)
			cg.wake()
		}
	}
	s.noteConsumerEpochLocked(context.Background(), cg, now)
	if cg.Empty() && !wasEmpty {
		cg.emptySince = now
	}
	s.persistConsumerLocked(g)
}

// decodeAssignment reads a classic consumer's assignment bytes (Kafka's
// ConsumerMemberAssignment) for DescribeGroups; unreadable bytes give an
// empty assignment.
func decodeAssignment(b []byte) *groupv1.Assignment {
	out := &groupv1.Assignment{}
	if len(b) == 0 {
		return out
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return out
	}
	for _, t := range a.Topics {
		out.TopicPartitions = append(out.TopicPartitions, &groupv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
	}
	return out
}
