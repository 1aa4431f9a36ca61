package client

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/assign"
)

func TestGroupConfigDefaults(t *testing.T) {
	cfg := GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Reset: ResetEarliest}
	require.NoError(t, cfg.validate())
	require.Equal(t, 45*time.Second, cfg.SessionTimeout)
	require.Equal(t, 5*time.Minute, cfg.RebalanceTimeout)
	require.Equal(t, 3*time.Second, cfg.HeartbeatInterval)
	require.Equal(t, 5*time.Second, cfg.AutoCommitInterval)
	require.Equal(t, 10*time.Second, cfg.MetadataMaxAge)
	require.Equal(t, ResetEarliest, cfg.Consumer.Reset, "the group's reset policy reaches the consumer")
	var names []string
	for _, a := range cfg.Assignors {
		names = append(names, a.Name())
	}
	require.Equal(t, []string{"range", "cooperative-sticky"}, names, "Kafka's default partition.assignment.strategy")

	next := GroupConsumerConfig{GroupID: "g", TopicPattern: "orders-.*", Protocol: GroupProtocolConsumer}
	require.NoError(t, next.validate())
	require.Equal(t, "uniform", next.ServerAssignor)
	require.Empty(t, next.Assignors)
}

func TestGroupConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  GroupConsumerConfig
		want string
	}{
		{"no group", GroupConsumerConfig{Topics: []string{"t"}}, "GroupID is required"},
		{"no subscription", GroupConsumerConfig{GroupID: "g"}, "set Topics or TopicPattern"},
		{"both subscriptions", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, TopicPattern: "t.*"}, "not both"},
		{"bad pattern", GroupConsumerConfig{GroupID: "g", TopicPattern: "("}, "TopicPattern"},
		{"empty topic", GroupConsumerConfig{GroupID: "g", Topics: []string{""}}, "empty topic name"},
		{"duplicate topic", GroupConsumerConfig{GroupID: "g", Topics: []string{"t", "t"}}, `"t" listed twice`},
		{"server assignor with classic", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, ServerAssignor: "range"}, "ServerAssignor is for the consumer protocol"},
		{"assignors with consumer protocol", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Protocol: GroupProtocolConsumer,
			Assignors: []assign.Assignor{assign.Range()}}, "Assignors are for the classic protocol"},
		{"unknown server assignor", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Protocol: GroupProtocolConsumer, ServerAssignor: "sticky"}, `ServerAssignor "sticky"`},
		{"unknown protocol", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Protocol: 7}, "Protocol GroupProtocol(7)"},
		{"nil assignor", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Assignors: []assign.Assignor{nil}}, "Assignors[0] is nil"},
		{"duplicate assignor", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Assignors: []assign.Assignor{assign.Range(), assign.Range()}}, `"range" listed twice`},
		{"negative timeout", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, SessionTimeout: -time.Second}, "SessionTimeout must not be negative"},
		{"heartbeat above session", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, SessionTimeout: time.Second, HeartbeatInterval: 2 * time.Second}, "must be below SessionTimeout"},
		{"huge timeout", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, RebalanceTimeout: 1000 * time.Hour}, "32-bit milliseconds"},
		{"bad reset", GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}, Reset: 9}, "not an OffsetReset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "group consumer config: "), err.Error())
		})
	}
}

func TestGroupConfigReportsEveryProblem(t *testing.T) {
	cfg := GroupConsumerConfig{SessionTimeout: -1}
	err := cfg.validate()
	require.ErrorContains(t, err, "GroupID is required")
	require.ErrorContains(t, err, "set Topics or TopicPattern")
	require.ErrorContains(t, err, "SessionTimeout must not be negative")
}

func TestParseGroupProtocol(t *testing.T) {
	p, err := ParseGroupProtocol("consumer")
	require.NoError(t, err)
	require.Equal(t, GroupProtocolConsumer, p)
	p, err = ParseGroupProtocol("CLASSIC")
	require.NoError(t, err)
	require.Equal(t, GroupProtocolClassic, p)
	_, err = ParseGroupProtocol("kip-848")
	require.ErrorContains(t, err, "want classic or consumer")
}

func rec(topic string, p int32, off int64, epoch int32) *ConsumedRecord {
	return &ConsumedRecord{Topic: topic, Partition: p, Offset: off, LeaderEpoch: epoch}
}

var (
	tp0 = TopicPartition{"t", 0}
	tp1 = TopicPartition{"t", 1}
	tp2 = TopicPartition{"t", 2}
)

// noPosition is a consumer that has resolved no position yet.
func noPosition(TopicPartition) int64 { return -1 }

// The book commits what Poll returned: the position after the last record
// handed out, with that record's leader epoch, and only what moved since
// the last commit.
func TestOffsetBookCommitsWhatPollReturned(t *testing.T) {
	b := newOffsetBook()
	b.start([]TopicPartition{tp0, tp1}, map[TopicPartition]committedOffset{tp0: {offset: 10, epoch: 3}})
	require.Empty(t, b.due(false, noPosition), "nothing moved: the committed offset is where reading starts")
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {10, 3}}, b.due(true, noPosition), "a full commit sends every known position")

	b.returned([]*ConsumedRecord{rec("t", 0, 10, 3), rec("t", 0, 11, 4), rec("t", 1, 0, 4)})
	due := b.due(false, noPosition)
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {12, 4}, tp1: {1, 4}}, due)

	b.committed(due)
	require.Empty(t, b.due(false, noPosition), "committed positions are not sent again")
	b.returned([]*ConsumedRecord{rec("t", 1, 1, 4)})
	require.Equal(t, map[TopicPartition]committedOffset{tp1: {2, 4}}, b.due(false, noPosition))

	// Interleaved runs of two partitions, and an untracked partition.
	b.returned([]*ConsumedRecord{rec("t", 0, 12, 4), rec("t", 0, 13, 5), rec("t", 1, 2, 4), rec("t", 9, 7, 4), rec("t", 0, 14, 5)})
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {15, 5}, tp1: {3, 4}}, b.due(false, noPosition))
}

// A partition that returned nothing commits where the reset policy put the
// consumer, once that is known, as Kafka commits every owned position.
func TestOffsetBookCommitsResetPosition(t *testing.T) {
	b := newOffsetBook()
	b.start([]TopicPartition{tp0}, nil)
	require.Empty(t, b.due(false, noPosition), "no position resolved yet")
	at := func(tp TopicPartition) int64 {
		if tp == tp0 {
			return 42
		}
		return -1
	}
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {42, -1}}, b.due(false, at))
	b.committed(map[TopicPartition]committedOffset{tp0: {42, -1}})
	require.Empty(t, b.due(false, at))
}

// Revoked partitions leave the book: a commit answered after the
// revocation does not bring them back, and records of them that were still
// on their way do not count.
func TestOffsetBookForgetsRevokedPartitions(t *testing.T) {
	b := newOffsetBook()
	b.start([]TopicPartition{tp0, tp1}, nil)
	b.returned([]*ConsumedRecord{rec("t", 0, 5, 1), rec("t", 1, 7, 1)})
	inFlight := b.due(false, noPosition)
	b.drop([]TopicPartition{tp1})
	b.committed(inFlight)
	b.returned([]*ConsumedRecord{rec("t", 1, 8, 1)})
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {6, 1}}, b.due(true, noPosition))
	require.Empty(t, b.due(false, noPosition))
}

// Positions only move forward: a record below the position (a chunk that
// raced a seek) does not move it back.
func TestOffsetBookPositionsOnlyAdvance(t *testing.T) {
	b := newOffsetBook()
	b.start([]TopicPartition{tp0}, map[TopicPartition]committedOffset{tp0: {offset: 100, epoch: 1}})
	b.returned([]*ConsumedRecord{rec("t", 0, 50, 1)})
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {100, 1}}, b.due(true, noPosition))
}

// A partition that starts again (revoked, then assigned back) starts from
// the committed offset fetched anew, not from what the book had.
func TestOffsetBookRestartTakesNewCommittedOffset(t *testing.T) {
	b := newOffsetBook()
	b.start([]TopicPartition{tp0}, nil)
	b.returned([]*ConsumedRecord{rec("t", 0, 5, 1)})
	b.start([]TopicPartition{tp0}, map[TopicPartition]committedOffset{tp0: {offset: 9, epoch: 2}})
	require.Empty(t, b.due(false, noPosition))
	require.Equal(t, map[TopicPartition]committedOffset{tp0: {9, 2}}, b.due(true, noPosition))
}

func TestFilterAssignedDropsRevokedPartitions(t *testing.T) {
	recs := []*ConsumedRecord{rec("t", 0, 1, 0), rec("t", 1, 1, 0), rec("u", 0, 1, 0), rec("t", 0, 2, 0)}
	got := filterAssigned(recs, map[TopicPartition]bool{tp0: true})
	require.Len(t, got, 2)
	for _, r := range got {
		require.Equal(t, tp0, TopicPartition{r.Topic, r.Partition})
	}
	require.Empty(t, filterAssigned([]*ConsumedRecord{rec("t", 2, 0, 0)}, map[TopicPartition]bool{tp0: true}))
	require.Empty(t, filterAssigned(nil, nil))
}

func TestDiffTPs(t *testing.T) {
	owned := map[TopicPartition]bool{tp0: true, tp1: true}
	target := map[TopicPartition]bool{tp1: true, tp2: true}
	require.Equal(t, []TopicPartition{tp0}, diffTPs(owned, target), "revoked")
	require.Equal(t, []TopicPartition{tp2}, diffTPs(target, owned), "added")
	require.Empty(t, diffTPs(owned, owned))
}

func TestAssignmentProtoRoundTrip(t *testing.T) {
	tps := []TopicPartition{{"a", 0}, {"a", 3}, {"b", 1}}
	got := topicPartitionsProto(tps)
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].GetTopic())
	require.Equal(t, []int32{0, 3}, got[0].GetPartitions())
	set := assignmentSet(&groupv1.Assignment{TopicPartitions: got})
	require.Equal(t, tps, sortedTPs(set))
	require.Empty(t, topicPartitionsProto(nil))
}

// A heartbeat built while a received assignment is not applied yet (or is
// being applied) reports its partitions as owned: the coordinator hands a
// partition on as soon as its owner's report leaves it out, so a report
// without them let one partition go to two members at once.
func TestHeartbeatReportsPartitionsBeingTaken(t *testing.T) {
	m := newNextMember(&GroupConsumer{cfg: GroupConsumerConfig{GroupID: "g", Topics: []string{"t"}}})
	m.owned = []TopicPartition{tp0}
	reported := func() []TopicPartition {
		var out []TopicPartition
		for _, tp := range m.request(3).GetOwnedPartitions() {
			for _, p := range tp.GetPartitions() {
				out = append(out, TopicPartition{tp.GetTopic(), p})
			}
		}
		return out
	}
	require.Equal(t, []TopicPartition{tp0}, reported())

	m.target, m.pending = map[TopicPartition]bool{tp1: true, tp2: true}, true
	require.Equal(t, []TopicPartition{tp0, tp1, tp2}, reported(), "received, not applied: held and to be taken")

	m.pending, m.applying = false, map[TopicPartition]bool{tp1: true, tp2: true}
	require.Equal(t, []TopicPartition{tp0, tp1, tp2}, reported(), "being applied")

	m.owned, m.applying = []TopicPartition{tp1, tp2}, nil
	require.Equal(t, []TopicPartition{tp1, tp2}, reported(), "applied: exactly what is held")
}
