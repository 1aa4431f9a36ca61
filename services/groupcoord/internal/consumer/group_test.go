package consumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestJoinGeneratesIDAndAssignsEverything(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 3, "b": 2}
	c := newClient("", "a", "b")
	resp := join(t, g, c, topics, t0)

	require.Len(t, resp.GetMemberId(), 36, "a UUID-shaped id: %s", resp.GetMemberId())
	require.Equal(t, int32(1), resp.GetMemberEpoch())
	require.Equal(t, int32(5000), resp.GetHeartbeatIntervalMs())
	require.Equal(t, []string{"a-0", "a-1", "a-2", "b-0", "b-1"}, tpSet(c.held))
	require.Equal(t, "Stable", g.State())
	require.Equal(t, int32(1), g.Epoch())

	// A heartbeat that reports what it was told gets no assignment back.
	resp = beat(t, g, c, topics, t0.Add(time.Second))
	require.Nil(t, resp.Assignment)
	require.Equal(t, int32(1), resp.GetMemberEpoch())

	// Reporting something else makes the coordinator resend everything.
	c.held = map[tp]bool{{"a", 0}: true}
	resp = beat(t, g, c, topics, t0.Add(2*time.Second))
	require.NotNil(t, resp.Assignment)
	require.Len(t, c.held, 5)
}

func TestClientProvidedIDOnJoin(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	c := newClient("client-made-id", "a")
	resp := join(t, g, c, fakeTopics{"a": 1}, t0)
	require.Equal(t, "client-made-id", resp.GetMemberId())

	// A repeated join (the first answer was lost) keeps the member and
	// resends its assignment.
	resp = join(t, g, c, fakeTopics{"a": 1}, t0.Add(time.Second))
	require.Equal(t, int32(1), resp.GetMemberEpoch())
	require.Equal(t, []string{"a-0"}, tpSet(c.held))
	require.Equal(t, int32(1), g.Epoch())
}

// TestSecondMemberIncrementalHandOver follows one partition from its old to
// its new owner: revoke first, hand over after the old owner reported it.
func TestSecondMemberIncrementalHandOver(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	c1 := newClient("m1", "a")
	c2 := newClient("m2", "a")
	join(t, g, c1, topics, t0)

	resp := join(t, g, c2, topics, t0)
	require.Equal(t, int32(2), g.Epoch())
	require.Equal(t, int32(2), resp.GetMemberEpoch())
	require.Empty(t, c2.held, "m1 still owns every partition")
	require.Equal(t, "Reconciling", g.State())

	// m1 is told to keep half; it stays in epoch 1 until it revoked.
	resp = beat(t, g, c1, topics, t0)
	require.Equal(t, int32(1), resp.GetMemberEpoch())
	require.Len(t, c1.held, 2)
	require.Len(t, g.Owners()["a"], 4, "revoked partitions stay owned until reported")
	checkOwners(t, g)

	// m2 still waits: m1 has not reported yet from the coordinator's view.
	// (It reported its old set in the heartbeat above.)
	resp = beat(t, g, c2, topics, t0)
	require.Nil(t, resp.Assignment)
	require.Empty(t, c2.held)

	// m1 reports it revoked: it moves to epoch 2 and frees the partitions.
	resp = beat(t, g, c1, topics, t0)
	require.Equal(t, int32(2), resp.GetMemberEpoch())
	require.Len(t, g.Owners()["a"], 2)

	resp = beat(t, g, c2, topics, t0)
	require.NotNil(t, resp.Assignment)
	require.Len(t, c2.held, 2)
	require.Equal(t, "Stable", g.State())
	checkOwners(t, g)
	for k := range c1.held {
		require.False(t, c2.held[k], "%v held by both", k)
	}
}

func TestLeaveFreesPartitions(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	for range 3 {
		beat(t, g, c1, topics, t0)
		beat(t, g, c2, topics, t0)
	}
	require.Equal(t, "Stable", g.State())

	resp, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m2", MemberEpoch: -1}, topics, t0)
	require.NoError(t, err)
	require.Equal(t, int32(-1), resp.GetMemberEpoch())
	require.Equal(t, int32(3), g.Epoch())

	resp = beat(t, g, c1, topics, t0)
	require.Equal(t, int32(3), resp.GetMemberEpoch())
	require.Len(t, c1.held, 4)

	_, err = g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m2", MemberEpoch: 2}, topics, t0)
	requireCode(t, err, errs.UnknownMemberID)

	_, err = g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m1", MemberEpoch: -1}, topics, t0)
	require.NoError(t, err)
	require.True(t, g.Empty())
	require.Equal(t, "Empty", g.State())
	require.Empty(t, g.Owners())
}

func TestStaticMemberRejoinsWithItsAssignment(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	c1.instance = "i1"
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	for range 3 {
		beat(t, g, c1, topics, t0)
		beat(t, g, c2, topics, t0)
	}
	epoch := g.Epoch()
	held := tpSet(c1.held)

	// Temporary leave: the partitions stay with the instance.
	resp, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m1", InstanceId: "i1", MemberEpoch: -2}, topics, t0)
	require.NoError(t, err)
	require.Equal(t, int32(-2), resp.GetMemberEpoch())
	require.Equal(t, epoch, g.Epoch(), "a temporary leave does not rebalance")
	beat(t, g, c2, topics, t0)
	require.Len(t, c2.held, 2)

	// The restarted consumer has a new member id and the same instance.
	c1b := newClient("m1-restarted", "a")
	c1b.instance = "i1"
	resp = join(t, g, c1b, topics, t0.Add(time.Second))
	require.Equal(t, epoch, resp.GetMemberEpoch())
	require.Equal(t, held, tpSet(c1b.held))
	require.Equal(t, epoch, g.Epoch())
	checkOwners(t, g)

	// The old member id is fenced by the instance id.
	_, err = g.Heartbeat(c1.hbRequest(), topics, t0.Add(time.Second))
	requireCode(t, err, errs.FencedInstanceID)

	// A second live consumer with the same instance id is refused.
	dup := newClient("m1-dup", "a")
	dup.instance = "i1"
	_, err = g.Heartbeat(dup.joinRequest(), topics, t0.Add(time.Second))
	requireCode(t, err, errs.UnreleasedInstanceID)
	require.Contains(t, err.Error(), "still used by live member")
}

func TestStaticTemporaryLeaveEndsWithSession(t *testing.T) {
	g := NewGroup(testGroup, Config{SessionTimeout: 10 * time.Second})
	topics := fakeTopics{"a": 2}
	c1 := newClient("m1", "a")
	c1.instance = "i1"
	join(t, g, c1, topics, t0)
	_, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m1", InstanceId: "i1", MemberEpoch: -2}, topics, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, t0.Add(11*time.Second), g.NextDeadline())
	require.Empty(t, g.Expire(t0.Add(10*time.Second)))
	require.Equal(t, []string{"m1"}, g.Expire(t0.Add(11*time.Second)))
	require.True(t, g.Empty())

	// The instance id is free again.
	c := newClient("m9", "a")
	c.instance = "i1"
	join(t, g, c, topics, t0.Add(12*time.Second))
	require.Len(t, c.held, 2)
}

func TestFencing(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	beat(t, g, c1, topics, t0) // Told to revoke, still epoch 1.
	beat(t, g, c1, topics, t0) // Revoked: epoch 2.
	require.Equal(t, int32(2), c1.epoch)

	req := c1.hbRequest()
	req.MemberEpoch = 3
	_, err := g.Heartbeat(req, topics, t0)
	requireCode(t, err, errs.FencedMemberEpoch)
	require.Contains(t, err.Error(), "rejoin with member epoch 0")

	// The previous epoch is accepted when the bump's response was lost and
	// the member owns only what it is assigned.
	req = c1.hbRequest()
	req.MemberEpoch = 1
	resp, err := g.Heartbeat(req, topics, t0)
	require.NoError(t, err)
	require.Equal(t, int32(2), resp.GetMemberEpoch())

	// ...but not when it claims a partition it does not have.
	req.OwnedPartitions = []*groupv1.TopicPartitions{{Topic: "a", Partitions: []int32{0, 1, 2, 3}}}
	_, err = g.Heartbeat(req, topics, t0)
	requireCode(t, err, errs.FencedMemberEpoch)

	// A fenced member rejoins with epoch 0 and gets its assignment again.
	resp = join(t, g, c1, topics, t0)
	require.Equal(t, int32(2), resp.GetMemberEpoch())
	require.Len(t, c1.held, 2)
	checkOwners(t, g)
}

func TestRegexSubscription(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"orders-eu": 2, "orders-us": 1, "audit": 3, "x-orders-eu": 1}
	c := newClient("m1")
	c.regex = "orders-.*"
	join(t, g, c, topics, t0)
	require.Equal(t, []string{"orders-eu-0", "orders-eu-1", "orders-us-0"}, tpSet(c.held), "the regex matches whole names")
	require.True(t, g.Subscribed("orders-asia"))
	require.False(t, g.Subscribed("audit"))

	epoch := g.Epoch()
	topics["orders-asia"] = 1
	g.TopicsChanged(topics)
	require.Equal(t, epoch+1, g.Epoch())
	beat(t, g, c, topics, t0)
	require.Contains(t, tpSet(c.held), "orders-asia-0")

	// A topic the regex does not match changes nothing.
	topics["other"] = 5
	g.TopicsChanged(topics)
	require.Equal(t, epoch+1, g.Epoch())

	// Switching to names drops the regex topics (revoked, then gone).
	req := c.hbRequest()
	req.SubscribedTopicNames = []string{"audit"}
	resp, err := g.Heartbeat(req, topics, t0)
	require.NoError(t, err)
	c.take(resp)
	c.apply()
	require.Empty(t, c.held, "first the old topics are revoked")
	beat(t, g, c, topics, t0)
	require.Equal(t, []string{"audit-0", "audit-1", "audit-2"}, tpSet(c.held))
	require.False(t, g.Subscribed("orders-eu"))
}

func TestTopicGrowthAndCreation(t *testing.T) {
	g := NewGroup(testGroup, Config{DefaultAssignor: "range"})
	topics := fakeTopics{"a": 2}
	c1, c2 := newClient("m1", "a", "later"), newClient("m2", "a", "later")
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	for range 3 {
		beat(t, g, c1, topics, t0)
		beat(t, g, c2, topics, t0)
	}
	require.Equal(t, []string{"a-0"}, tpSet(c1.held))
	require.Equal(t, []string{"a-1"}, tpSet(c2.held))
	epoch := g.Epoch()

	topics["a"] = 4
	topics["later"] = 2
	g.TopicsChanged(topics)
	require.Equal(t, epoch+1, g.Epoch())
	g.TopicsChanged(topics)
	require.Equal(t, epoch+1, g.Epoch(), "no change, no bump")
	for range 3 {
		beat(t, g, c1, topics, t0)
		beat(t, g, c2, topics, t0)
	}
	require.Equal(t, "Stable", g.State())
	require.Len(t, c1.held, 3)
	require.Len(t, c2.held, 3)
	require.True(t, c1.held[tp{"later", 0}] && c2.held[tp{"later", 1}], "range: co-partitioned ranges by member id")
	checkOwners(t, g)
}

func TestRebalanceTimeoutFencesMemberThatDoesNotRevoke(t *testing.T) {
	g := NewGroup(testGroup, Config{SessionTimeout: time.Minute})
	topics := fakeTopics{"a": 4}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0) // Rebalance timeout 30s.
	join(t, g, c2, topics, t0)

	// m1 is told to revoke but keeps reporting everything.
	req := c1.hbRequest()
	_, err := g.Heartbeat(req, topics, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, t0.Add(31*time.Second), g.NextDeadline())
	_, err = g.Heartbeat(req, topics, t0.Add(20*time.Second))
	require.NoError(t, err)
	require.Equal(t, t0.Add(31*time.Second), g.NextDeadline(), "the deadline is set once, when revocation starts")
	beat(t, g, c2, topics, t0.Add(20*time.Second))
	require.Empty(t, c2.held)

	require.Empty(t, g.Expire(t0.Add(30*time.Second)))
	require.Equal(t, []string{"m1"}, g.Expire(t0.Add(31*time.Second)))
	beat(t, g, c2, topics, t0.Add(32*time.Second))
	require.Len(t, c2.held, 4)
	_, err = g.Heartbeat(req, topics, t0.Add(33*time.Second))
	requireCode(t, err, errs.UnknownMemberID)
}

func TestSessionExpiry(t *testing.T) {
	g := NewGroup(testGroup, Config{SessionTimeout: 45 * time.Second})
	topics := fakeTopics{"a": 2}
	require.True(t, g.NextDeadline().IsZero())
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0.Add(10*time.Second))
	require.Equal(t, t0.Add(45*time.Second), g.NextDeadline())
	beat(t, g, c1, topics, t0.Add(40*time.Second))
	require.Equal(t, t0.Add(55*time.Second), g.NextDeadline())
	require.Equal(t, []string{"m2"}, g.Expire(t0.Add(55*time.Second)))
	beat(t, g, c1, topics, t0.Add(56*time.Second))
	beat(t, g, c1, topics, t0.Add(57*time.Second))
	require.Len(t, c1.held, 2)
	require.Equal(t, "Stable", g.State())
}

func TestInvalidRequests(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 1}
	good := func() *groupv1.ConsumerGroupHeartbeatRequest {
		return newClient("", "a").joinRequest()
	}
	cases := []struct {
		name  string
		edit  func(r *groupv1.ConsumerGroupHeartbeatRequest)
		code  errs.Code
		field string
	}{
		{"empty group", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.GroupId = "" }, errs.InvalidRequest, "group_id"},
		{"other group", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.GroupId = "other" }, errs.InvalidRequest, "group_id"},
		{"no subscription", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, errs.InvalidRequest, "subscribed_topic_names"},
		{"no rebalance timeout", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMs = 0 }, errs.InvalidRequest, "rebalance_timeout_ms"},
		{"negative rebalance timeout", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMs = -5 }, errs.InvalidRequest, "rebalance_timeout_ms"},
		{"bad regex", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = "a(" }, errs.InvalidRequest, "subscribed_topic_regex"},
		{"owned on join", func(r *groupv1.ConsumerGroupHeartbeatRequest) {
			r.OwnedPartitions = []*groupv1.TopicPartitions{{Topic: "a", Partitions: []int32{0}}}
		}, errs.InvalidRequest, "owned_partitions"},
		{"bad epoch", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, errs.InvalidRequest, "member_epoch"},
		{"heartbeat without id", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 3 }, errs.InvalidRequest, "member_id"},
		{"static leave without instance", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.MemberId, r.MemberEpoch = "x", -2 }, errs.InvalidRequest, "instance_id"},
		{"unknown assignor", func(r *groupv1.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = "sticky" }, errs.UnsupportedAssignor, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.edit(r)
			_, err := g.Heartbeat(r, topics, t0)
			requireCode(t, err, tc.code)
			if tc.field != "" {
				var e *errs.Error
				require.ErrorAs(t, err, &e)
				require.Equal(t, tc.field, e.Violations[0].GetField())
			}
		})
	}
	require.True(t, g.Empty(), "no invalid request changed the group")
	require.Equal(t, int32(0), g.Epoch())
}

func TestMaxSize(t *testing.T) {
	g := NewGroup(testGroup, Config{MaxSize: 2})
	topics := fakeTopics{"a": 1}
	join(t, g, newClient("m1", "a"), topics, t0)
	join(t, g, newClient("m2", "a"), topics, t0)
	_, err := g.Heartbeat(newClient("m3", "a").joinRequest(), topics, t0)
	requireCode(t, err, errs.GroupMaxSizeReached)
	require.Contains(t, err.Error(), "group.consumer.max.size")
	// A known member may still rejoin.
	join(t, g, newClient("m2", "a"), topics, t0)
}

func TestAssignorChoice(t *testing.T) {
	g := NewGroup(testGroup, Config{DefaultAssignor: "uniform"})
	topics := fakeTopics{"a": 2}
	c1, c2, c3 := newClient("m1", "a"), newClient("m2", "a"), newClient("m3", "a")
	join(t, g, c1, topics, t0)
	require.Equal(t, "uniform", g.Describe().GetProtocol())
	r := c2.joinRequest()
	r.ServerAssignor = "range"
	_, err := g.Heartbeat(r, topics, t0)
	require.NoError(t, err)
	require.Equal(t, "range", g.Describe().GetProtocol(), "one vote for range, none for uniform")
	r = c3.joinRequest()
	r.ServerAssignor = "uniform"
	_, err = g.Heartbeat(r, topics, t0)
	require.NoError(t, err)
	require.Equal(t, "uniform", g.Describe().GetProtocol(), "a tie goes to the default")
}

func TestValidateCommitAndFetch(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	require.NoError(t, g.ValidateCommit("", -1), "an empty group takes simple commits")
	require.NoError(t, g.ValidateFetch("", -1))

	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0)
	require.Equal(t, int32(1), c1.epoch)
	requireCode(t, g.ValidateCommit("", -1), errs.UnknownMemberID)
	requireCode(t, g.ValidateCommit("nobody", 1), errs.UnknownMemberID)
	requireCode(t, g.ValidateCommit("m1", 2), errs.FencedMemberEpoch)
	require.NoError(t, g.ValidateCommit("m1", 1))
	require.NoError(t, g.ValidateFetch("m1", 1))

	// m2 joins; m1 revokes two partitions and moves to epoch 2, keeping two
	// it was assigned at epoch 1.
	join(t, g, c2, topics, t0)
	beat(t, g, c1, topics, t0)
	beat(t, g, c1, topics, t0)
	require.Equal(t, int32(2), c1.epoch)
	kept := tpSet(c1.held)
	require.Len(t, kept, 2)

	// KIP-1251: a commit with epoch 1 is fine for partitions m1 still owns
	// since epoch 1, stale for the ones it gave up. ValidateCommit, which
	// sees no partitions, keeps the strict rule.
	requireCode(t, g.ValidateCommit("m1", 1), errs.StaleMemberEpoch)
	check, err := g.CommitValidator("m1", 1)
	require.NoError(t, err)
	require.NotNil(t, check)
	for p := int32(0); p < 4; p++ {
		err := check("a", p)
		if c1.held[tp{"a", p}] {
			require.NoError(t, err, "a-%d", p)
		} else {
			requireCode(t, err, errs.StaleMemberEpoch)
		}
	}
	requireCode(t, check("b", 0), errs.StaleMemberEpoch)
	check, err = g.CommitValidator("m1", 2)
	require.NoError(t, err)
	require.Nil(t, check, "the current epoch commits every partition")
	_, err = g.CommitValidator("m1", 3)
	requireCode(t, err, errs.FencedMemberEpoch)
	// The fetch path keeps the strict rule.
	requireCode(t, g.ValidateFetch("m1", 1), errs.StaleMemberEpoch)
	requireCode(t, g.ValidateFetch("m1", 3), errs.FencedMemberEpoch)
	requireCode(t, g.ValidateFetch("nobody", 3), errs.UnknownMemberID)

	// m2 got its partitions at epoch 2: an epoch-1 commit is stale for all.
	beat(t, g, c2, topics, t0)
	require.Len(t, c2.held, 2)
	check, err = g.CommitValidator("m2", 1)
	require.NoError(t, err)
	for k := range c2.held {
		requireCode(t, check(k.topic, k.partition), errs.StaleMemberEpoch)
	}
	require.NoError(t, g.ValidateCommit("m2", 2))
}

func TestDescribe(t *testing.T) {
	g := NewGroup(testGroup, Config{DefaultAssignor: "range"})
	topics := fakeTopics{"a": 2}
	c1 := newClient("m1", "a")
	c1.instance = "i1"
	join(t, g, c1, topics, t0)
	d := g.Describe()
	require.Equal(t, testGroup, d.GetGroupId())
	require.Equal(t, "consumer", d.GetType())
	require.Equal(t, "consumer", d.GetProtocolType())
	require.Equal(t, "range", d.GetProtocol())
	require.Equal(t, "Stable", d.GetState())
	require.Equal(t, int32(1), d.GetEpoch())
	require.Len(t, d.GetMembers(), 1)
	m := d.GetMembers()[0]
	require.Equal(t, "m1", m.GetMemberId())
	require.Equal(t, "i1", m.GetGroupInstanceId())
	require.Equal(t, int32(1), m.GetMemberEpoch())
	require.Equal(t, []int32{0, 1}, m.GetAssignment().GetTopicPartitions()[0].GetPartitions())
	require.Equal(t, map[string]map[int32]string{"a": {0: "m1", 1: "m1"}}, g.Owners())
}

// TestAssignmentResentWhenReplacedBeforeApplied: a member told {a-0, a-1}
// that still holds only a-0 when a-1 moves away must be told {a-0}, or it
// would later take a-1 from the stale answer while a-1's new owner has it.
func TestAssignmentResentWhenReplacedBeforeApplied(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 1}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	join(t, g, c1, topics, t0)
	topics["a"] = 2
	g.TopicsChanged(topics)
	resp, err := g.Heartbeat(c1.hbRequest(), topics, t0)
	require.NoError(t, err)
	c1.take(resp) // Told {a-0, a-1}; not applied yet.
	require.Len(t, c1.told, 2)

	join(t, g, c2, topics, t0)
	resp, err = g.Heartbeat(c1.hbRequest(), topics, t0) // Reports {a-0}.
	require.NoError(t, err)
	require.NotNil(t, resp.Assignment, "the assignment changed, so it is sent")
	c1.take(resp)
	c1.apply()
	require.Equal(t, []string{"a-0"}, tpSet(c1.held))
	beat(t, g, c2, topics, t0)
	require.Equal(t, []string{"a-1"}, tpSet(c2.held))
}

// TestRevocationDeadlineRestartsPerRevocation: a member that revoked in time
// and is asked to revoke again gets a full rebalance timeout for it.
func TestRevocationDeadlineRestartsPerRevocation(t *testing.T) {
	g := NewGroup(testGroup, Config{SessionTimeout: time.Hour})
	topics := fakeTopics{"a": 6}
	c1, c2, c3 := newClient("m1", "a"), newClient("m2", "a"), newClient("m3", "a")
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	beat(t, g, c1, topics, t0) // Revoke 3, deadline t0+30s.
	require.Equal(t, t0.Add(30*time.Second), g.members["m1"].revokeDeadline)

	join(t, g, c3, topics, t0.Add(20*time.Second))
	beat(t, g, c1, topics, t0.Add(25*time.Second)) // Reports the first revocation; asked for another.
	require.Equal(t, stateUnrevoked, g.members["m1"].state)
	require.Equal(t, t0.Add(55*time.Second), g.members["m1"].revokeDeadline)
	require.Empty(t, g.Expire(t0.Add(40*time.Second)))
}

func TestStaticMemberAwayCannotCommit(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	c := newClient("m1", "a")
	c.instance = "i1"
	join(t, g, c, fakeTopics{"a": 1}, t0)
	_, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m1", InstanceId: "i1", MemberEpoch: -2}, nil, t0)
	require.NoError(t, err)
	requireCode(t, g.ValidateCommit("m1", 1), errs.FencedMemberEpoch)
	requireCode(t, g.ValidateFetch("m1", 1), errs.FencedMemberEpoch)
	require.Equal(t, int32(-2), g.Describe().GetMembers()[0].GetMemberEpoch())
}

// TestStaticRejoinDuringRevocation: a static member that left while it had
// partitions pending revocation comes back owning nothing, so the
// revocation completes and its new owner can take them.
func TestStaticRejoinDuringRevocation(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	topics := fakeTopics{"a": 4}
	c1, c2 := newClient("m1", "a"), newClient("m2", "a")
	c1.instance = "i1"
	join(t, g, c1, topics, t0)
	join(t, g, c2, topics, t0)
	beat(t, g, c1, topics, t0) // Told to revoke two.
	require.Equal(t, stateUnrevoked, g.members["m1"].state)
	_, err := g.Heartbeat(&groupv1.ConsumerGroupHeartbeatRequest{GroupId: testGroup, MemberId: "m1", InstanceId: "i1", MemberEpoch: -2}, topics, t0)
	require.NoError(t, err)
	require.True(t, g.members["m1"].revokeDeadline.IsZero(), "while away, only the session timeout counts")
	require.Equal(t, t0.Add(45*time.Second), g.NextDeadline())

	c1b := newClient("m1b", "a")
	c1b.instance = "i1"
	resp := join(t, g, c1b, topics, t0.Add(time.Second))
	require.Equal(t, int32(2), resp.GetMemberEpoch())
	require.Len(t, c1b.held, 2)
	beat(t, g, c2, topics, t0.Add(time.Second))
	require.Len(t, c2.held, 2)
	require.Equal(t, "Stable", g.State())
	checkOwners(t, g)
}

// TestHeartbeatWithoutTopicView: a nil Topics keeps the last partition
// counts (the caller may have no view yet).
func TestHeartbeatWithoutTopicView(t *testing.T) {
	g := NewGroup(testGroup, Config{})
	c := newClient("m1", "a")
	join(t, g, c, fakeTopics{"a": 2}, t0)
	resp := beat(t, g, c, nil, t0)
	require.Nil(t, resp.Assignment)
	require.Len(t, c.held, 2)
	require.Equal(t, int32(1), g.Epoch())
}
