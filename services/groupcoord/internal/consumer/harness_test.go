package consumer

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

const testGroup = "g1"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeTopics is a Topics backed by a map.
type fakeTopics map[string]int32

func (f fakeTopics) Partitions(topic string) int32 { return f[topic] }

func (f fakeTopics) Names() []string {
	out := make([]string, 0, len(f))
	for t := range f {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// client models a consumer: what it holds and what it was last told.
type client struct {
	id       string
	instance string
	epoch    int32
	topics   []string
	regex    string
	// held is what the consumer holds now and reports as owned.
	held map[tp]bool
	// told is the last assignment received and not yet applied (nil when
	// applied).
	told map[tp]bool
	// toldEpoch and heldEpoch are the member epochs that came with told
	// and with held: a commit of held still in flight carries heldEpoch.
	toldEpoch, heldEpoch int32
}

func newClient(id string, topics ...string) *client {
	return &client{id: id, topics: topics, held: map[tp]bool{}}
}

func (c *client) ownedProto() []*groupv1.TopicPartitions {
	byTopic := map[string][]int32{}
	for k := range c.held {
		byTopic[k.topic] = append(byTopic[k.topic], k.partition)
	}
	var out []*groupv1.TopicPartitions
	for _, t := range sortedTopics(byTopic) {
		ps := byTopic[t]
		slices.Sort(ps)
		out = append(out, &groupv1.TopicPartitions{Topic: t, Partitions: ps})
	}
	return out
}

// apply makes the consumer hold what it was last told.
func (c *client) apply() {
	if c.told != nil {
		c.held, c.heldEpoch = c.told, c.toldEpoch
		c.told = nil
	}
}

func (c *client) joinRequest() *groupv1.ConsumerGroupHeartbeatRequest {
	return &groupv1.ConsumerGroupHeartbeatRequest{
		GroupId:              testGroup,
		MemberId:             c.id,
		MemberEpoch:          0,
		InstanceId:           c.instance,
		RebalanceTimeoutMs:   30_000,
		SubscribedTopicNames: c.topics,
		SubscribedTopicRegex: c.regex,
	}
}

func (c *client) hbRequest() *groupv1.ConsumerGroupHeartbeatRequest {
	return &groupv1.ConsumerGroupHeartbeatRequest{
		GroupId:         testGroup,
		MemberId:        c.id,
		MemberEpoch:     c.epoch,
		InstanceId:      c.instance,
		OwnedPartitions: c.ownedProto(),
	}
}

// take records a successful response.
func (c *client) take(resp *groupv1.ConsumerGroupHeartbeatResponse) {
	c.id = resp.GetMemberId()
	c.epoch = resp.GetMemberEpoch()
	if resp.Assignment != nil {
		c.toldEpoch = c.epoch
		c.told = map[tp]bool{}
		for _, t := range resp.GetAssignment().GetTopicPartitions() {
			for _, p := range t.GetPartitions() {
				c.told[tp{t.GetTopic(), p}] = true
			}
		}
	}
}

// join sends the join heartbeat and applies the answer.
func join(t testing.TB, g *Group, c *client, topics Topics, now time.Time) *groupv1.ConsumerGroupHeartbeatResponse {
	t.Helper()
	c.held = map[tp]bool{}
	c.told = nil
	resp, err := g.Heartbeat(c.joinRequest(), topics, now)
	require.NoError(t, err)
	c.take(resp)
	c.apply()
	return resp
}

// beat sends a heartbeat reporting what the client holds, then applies the
// answer.
func beat(t testing.TB, g *Group, c *client, topics Topics, now time.Time) *groupv1.ConsumerGroupHeartbeatResponse {
	t.Helper()
	resp, err := g.Heartbeat(c.hbRequest(), topics, now)
	require.NoError(t, err)
	c.take(resp)
	c.apply()
	return resp
}

func requireCode(t testing.TB, err error, code errs.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, errs.Name(code), errs.Name(errs.CodeOf(err)), "error: %v", err)
}

// tpSet renders a partition set as "topic-p" strings, sorted.
func tpSet(set map[tp]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, fmt.Sprintf("%s-%d", k.topic, k.partition))
	}
	sort.Strings(out)
	return out
}

func assignedSet(m *member) map[tp]bool {
	out := map[tp]bool{}
	for t, ps := range m.assigned {
		for p := range ps {
			out[tp{t, p}] = true
		}
	}
	return out
}

func targetSet(target map[string][]int32) map[tp]bool {
	out := map[tp]bool{}
	for t, ps := range target {
		for _, p := range ps {
			out[tp{t, p}] = true
		}
	}
	return out
}

// checkOwners asserts the owner map is exactly the union of the members'
// assigned and pending partitions, with one owner each.
func checkOwners(t require.TestingT, g *Group) {
	seen := map[tp]string{}
	for id, m := range g.members {
		for _, pe := range []partitionEpochs{m.assigned, m.pending} {
			for topic, ps := range pe {
				for p := range ps {
					k := tp{topic, p}
					prev, dup := seen[k]
					require.False(t, dup, "%s-%d owned by %s and %s", topic, p, prev, id)
					seen[k] = id
				}
			}
		}
	}
	n := 0
	for topic, ps := range g.owner {
		for p, id := range ps {
			n++
			require.Equal(t, seen[tp{topic, p}], id, "owner map for %s-%d", topic, p)
		}
	}
	require.Equal(t, len(seen), n, "owner map size")
}
