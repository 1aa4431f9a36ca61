package groupcoord

import (
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/services/groupcoord/internal/consumer"
)

// topicPartition names a partition whose offset a group commits.
type topicPartition struct {
	topic     string
	partition int32
}

// group is everything a shard holds for one group id: its committed
// offsets, and its membership on one of the two protocols (or none, for a
// group that only stores offsets, such as one used by standalone consumers).
type group struct {
	id       string
	offsets  map[topicPartition]committedOffset
	classic  *classicGroup
	consumer *consumerGroup
	// metaLogOffset is the offsets-topic offset of the last group
	// metadata record applied in replay.
	metaLogOffset int64
}

// groupLocked returns the group, creating it when create is set.
func (s *shard) groupLocked(id string, create bool) *group {
	g := s.groups[id]
	if g == nil && create {
		g = &group{id: id, offsets: map[topicPartition]committedOffset{}, metaLogOffset: -1}
		s.groups[id] = g
	}
	return g
}

// empty reports whether the group has no members on either protocol.
func (g *group) empty() bool {
	return (g.classic == nil || len(g.classic.members) == 0) && (g.consumer == nil || g.consumer.Empty())
}

// state is the group's state in Kafka's words.
func (g *group) state() string {
	switch {
	case g.classic != nil:
		return g.classic.state
	case g.consumer != nil:
		return g.consumer.State()
	}
	return stateEmpty
}

// typ is "classic" or "consumer".
func (g *group) typ() string {
	if g.consumer != nil {
		return "consumer"
	}
	return "classic"
}

// emptySince is when the group last became empty, for offset expiry.
func (g *group) emptySince() time.Time {
	if g.classic != nil {
		return g.classic.stateSince
	}
	if g.consumer != nil {
		return g.consumer.emptySince
	}
	return time.Time{}
}

// applyRecordLocked applies one record of the offsets topic at logOffset, in
// replay and after a write is acknowledged.
func (s *shard) applyRecordLocked(key, value []byte, logOffset int64) error {
	k, err := parseKey(key)
	if err != nil {
		return err
	}
	switch k.kind {
	case kindOffset:
		tp := topicPartition{k.topic, k.partition}
		g := s.groupLocked(k.group, value != nil)
		if g == nil {
			return nil
		}
		if cur, ok := g.offsets[tp]; ok && cur.logOffset > logOffset {
			return nil
		}
		if value == nil {
			delete(g.offsets, tp)
			s.dropIfGoneLocked(g)
			return nil
		}
		c, err := parseOffsetValue(value)
		if err != nil {
			return err
		}
		c.logOffset = logOffset
		g.offsets[tp] = c
	case kindGroup:
		g := s.groupLocked(k.group, value != nil)
		if g == nil || g.metaLogOffset > logOffset {
			return nil
		}
		g.metaLogOffset = logOffset
		if value == nil {
			g.classic = nil
			s.dropIfGoneLocked(g)
			return nil
		}
		v, err := parseGroupValue(value)
		if err != nil {
			return err
		}
		g.classic = restoreClassic(v, s.c.now())
		g.consumer = nil
	case kindConsumerGroup:
		g := s.groupLocked(k.group, value != nil)
		if g == nil || g.metaLogOffset > logOffset {
			return nil
		}
		g.metaLogOffset = logOffset
		if value == nil {
			g.consumer = nil
			s.dropIfGoneLocked(g)
			return nil
		}
		snap, err := consumer.DecodeSnapshot(value)
		if err != nil {
			return err
		}
		cg, err := consumer.Restore(g.id, s.c.consumerConfig(), snap, s.c.now())
		if err != nil {
			return err
		}
		g.consumer = newConsumerGroup(cg, 0)
		g.classic = nil
	}
	return nil
}

// dropIfGoneLocked forgets a group with no offsets, pending or committed,
// and no members.
func (s *shard) dropIfGoneLocked(g *group) {
	if len(g.offsets) == 0 && g.empty() && (g.classic == nil || g.classic.generation == 0) && !s.hasPendingLocked(g.id) {
		delete(s.groups, g.id)
	}
}

func slogErr(e *errs.Error) slog.Attr { return slog.String("err", e.Error()) }

func groupsAttr(n int) slog.Attr { return slog.Int("groups", n) }

func durationAttr(d time.Duration) slog.Attr { return slog.Duration("duration", d) }
