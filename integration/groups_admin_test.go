package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// groupCLI runs the sluice CLI and returns its stdout, its stderr and its
// error, for commands expected to fail as well as to succeed.
func groupCLI(t *testing.T, c *devcluster.Cluster, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ",")}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// joinGroup starts a group consumer on topic t and polls until it owns
// every one of want partitions.
func joinGroup(t *testing.T, cl *client.Client, group string, protocol client.GroupProtocol, want int) *client.GroupConsumer {
	t.Helper()
	gc, err := cl.NewGroupConsumer(client.GroupConsumerConfig{GroupID: group, Topics: []string{"t"}, Protocol: protocol, Reset: client.ResetEarliest})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gc.Close(ctx) // a consumer the test closed already says so
	})
	deadline := time.Now().Add(90 * time.Second)
	for len(gc.Assignment()) < want {
		require.True(t, time.Now().Before(deadline), "group %s: %d of %d partitions assigned", group, len(gc.Assignment()), want)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := gc.Poll(ctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			require.NoError(t, err)
		}
	}
	return gc
}

func committedOffsets(t *testing.T, cl *client.Client, group string, tps ...client.TopicPartition) map[client.TopicPartition]int64 {
	t.Helper()
	got, err := cl.FetchOffsets(context.Background(), group, tps...)
	require.NoError(t, err)
	out := map[client.TopicPartition]int64{}
	for tp, p := range got {
		out[tp] = p.GetOffset()
	}
	return out
}

// Group administration through the SDK and the CLI against a real cluster
// (two storage nodes, so the groups spread over two coordinators): list,
// describe with lag, reset-offsets as a dry run and executed, refusals for
// a group with members, delete-offsets and delete.
func TestGroupsAdmin(t *testing.T) {
	// A short initial rebalance delay: the test's groups have one member
	// each, so Kafka's 3 s wait for more members only slows it down.
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 2, ExtraArgs: []string{"--group.initial-rebalance-delay=200ms"}})
	cl := cluster.Client(t, c)
	ctx := context.Background()
	_, err := cl.CreateTopic(ctx, "t", 3, 1, nil)
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{})
	defer func() { _ = p.Close(ctx) }()
	var recs []*client.Record
	for part := range int32(3) {
		for range 10 {
			recs = append(recs, &client.Record{Topic: "t", Partition: part, Value: []byte("v")})
		}
	}
	_, err = p.ProduceSync(ctx, recs...)
	require.NoError(t, err)
	t0, t1, t2 := client.TopicPartition{Topic: "t", Partition: 0}, client.TopicPartition{Topic: "t", Partition: 1}, client.TopicPartition{Topic: "t", Partition: 2}

	// A group without members, made by an administrator's commit.
	require.NoError(t, cl.CommitOffsets(ctx, "idle", map[client.TopicPartition]int64{t0: 3, t1: 5}))
	require.Equal(t, map[client.TopicPartition]int64{t0: 3, t1: 5, t2: -1}, committedOffsets(t, cl, "idle", t0, t1, t2))

	// Groups with members, one per protocol.
	busy := joinGroup(t, cl, "busy", client.GroupProtocolClassic, 3)
	require.NoError(t, busy.CommitSync(ctx, map[client.TopicPartition]int64{t0: 2}))
	busyNext := joinGroup(t, cl, "busy-next", client.GroupProtocolConsumer, 3)

	t.Run("list", func(t *testing.T) {
		all, err := cl.ListGroups(ctx, nil, nil)
		require.NoError(t, err)
		states := map[string]string{}
		types := map[string]string{}
		var ids []string
		for _, g := range all {
			ids = append(ids, g.GetGroupId())
			states[g.GetGroupId()], types[g.GetGroupId()] = g.GetState(), g.GetType()
		}
		require.Equal(t, []string{"busy", "busy-next", "idle"}, ids, "sorted, each once")
		require.Equal(t, "Empty", states["idle"])
		require.Equal(t, "Stable", states["busy"])
		require.Equal(t, "classic", types["busy"])
		require.Equal(t, "consumer", types["busy-next"])

		empty, err := cl.ListGroups(ctx, []string{"Empty"}, nil)
		require.NoError(t, err)
		require.Len(t, empty, 1)
		require.Equal(t, "idle", empty[0].GetGroupId())

		out, _, err := groupCLI(t, c, "group", "list")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^busy\s+classic\s+consumer\s+Stable$`, out)
		require.Regexp(t, `(?m)^idle\s+`, out)
		out, _, err = groupCLI(t, c, "group", "list", "--type", "consumer")
		require.NoError(t, err)
		require.Contains(t, out, "busy-next")
		require.NotContains(t, out, "idle")
		out, _, err = groupCLI(t, c, "group", "list", "--state", "empty", "-o", "json")
		require.NoError(t, err)
		var listed groupv1.ListGroupsResponse
		require.NoError(t, protoJSON(out, &listed), out)
		require.Len(t, listed.GetGroups(), 1)
		require.Equal(t, "idle", listed.GetGroups()[0].GetGroupId())
	})

	t.Run("describe", func(t *testing.T) {
		descs, err := cl.DescribeGroups(ctx, "busy", "busy-next")
		require.NoError(t, err)
		require.Equal(t, "Stable", descs[0].GetState())
		require.Len(t, descs[0].GetMembers(), 1)
		require.Equal(t, busy.MemberID(), descs[0].GetMembers()[0].GetMemberId())
		require.Len(t, descs[1].GetMembers(), 1)
		require.Equal(t, busyNext.MemberID(), descs[1].GetMembers()[0].GetMemberId())

		lag, err := cl.GroupLag(ctx, "busy")
		require.NoError(t, err)
		require.Len(t, lag, 3)
		require.Equal(t, client.PartitionLag{Topic: "t", Partition: 0, Committed: 2, LogEnd: 10, Lag: 8,
			MemberID: busy.MemberID(), ClientID: lag[0].ClientID, Host: lag[0].Host}, lag[0])
		require.Equal(t, busy.MemberID(), lag[2].MemberID, "assigned partitions without commits are listed too")

		out, _, err := groupCLI(t, c, "group", "describe", "busy")
		require.NoError(t, err)
		require.Contains(t, out, "State: Stable  Type: classic")
		require.Contains(t, out, busy.MemberID())
		require.Contains(t, out, "t:0,1,2")
		require.Regexp(t, `(?m)^t\s+0\s+2\s+10\s+8\s+`+busy.MemberID(), out)

		_, stderr, err := groupCLI(t, c, "group", "describe", "nobody")
		require.Error(t, err)
		require.Contains(t, stderr, "consumer group 'nobody' does not exist")
	})

	t.Run("refusals-while-members", func(t *testing.T) {
		_, stderr, err := groupCLI(t, c, "group", "reset-offsets", "busy", "--topic", "t", "--to-earliest")
		require.Error(t, err)
		require.Contains(t, stderr, "Assignments can only be reset if the group 'busy' is inactive, but the current state is Stable")

		err = cl.CommitOffsets(ctx, "busy", map[client.TopicPartition]int64{t0: 0})
		require.Error(t, err, "an administrator's commit to a group with members")
		t.Logf("commit to a group with members: %v", err)

		_, stderr, err = groupCLI(t, c, "group", "delete", "busy")
		require.Error(t, err)
		require.Contains(t, stderr, "NON_EMPTY_GROUP")

		_, stderr, err = groupCLI(t, c, "group", "delete-offsets", "busy", "--topic", "t")
		require.Error(t, err, "the group consumes t")
		t.Logf("delete-offsets of a subscribed topic: %s", stderr)
	})

	t.Run("reset-offsets", func(t *testing.T) {
		out, stderr, err := groupCLI(t, c, "group", "reset-offsets", "idle", "--topic", "t", "--to-latest")
		require.NoError(t, err, stderr)
		require.Regexp(t, `(?m)^idle\s+t\s+0\s+3\s+10$`, out)
		require.Regexp(t, `(?m)^idle\s+t\s+2\s+-\s+10$`, out)
		require.Contains(t, stderr, "Dry run")
		require.Equal(t, map[client.TopicPartition]int64{t0: 3, t1: 5, t2: -1}, committedOffsets(t, cl, "idle", t0, t1, t2), "a dry run commits nothing")

		_, stderr, err = groupCLI(t, c, "group", "reset-offsets", "idle", "--topic", "t:0,1", "--shift-by", "-2", "--execute")
		require.NoError(t, err, stderr)
		require.Equal(t, map[client.TopicPartition]int64{t0: 1, t1: 3, t2: -1}, committedOffsets(t, cl, "idle", t0, t1, t2))

		out, stderr, err = groupCLI(t, c, "group", "reset-offsets", "idle", "--topic", "t", "--to-offset", "40", "--execute", "-o", "json")
		require.NoError(t, err, stderr)
		var plan struct {
			Executed   bool `json:"executed"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				New       int64 `json:"newOffset"`
			} `json:"partitions"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &plan), out)
		require.True(t, plan.Executed)
		require.Len(t, plan.Partitions, 3)
		require.Equal(t, int64(10), plan.Partitions[0].New, "kept within the log")
		require.Equal(t, map[client.TopicPartition]int64{t0: 10, t1: 10, t2: 10}, committedOffsets(t, cl, "idle", t0, t1, t2))

		_, stderr, err = groupCLI(t, c, "group", "reset-offsets", "idle", "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
		require.NoError(t, err, stderr)
		require.Equal(t, map[client.TopicPartition]int64{t0: 0, t1: 0, t2: 0}, committedOffsets(t, cl, "idle", t0, t1, t2))

		// A group that does not exist yet is created by the commit, as
		// with Kafka's tool.
		_, stderr, err = groupCLI(t, c, "group", "reset-offsets", "fresh", "--topic", "t:2", "--to-earliest", "--execute")
		require.NoError(t, err, stderr)
		require.Equal(t, map[client.TopicPartition]int64{t2: 0}, committedOffsets(t, cl, "fresh", t2))
	})

	t.Run("delete-offsets", func(t *testing.T) {
		out, stderr, err := groupCLI(t, c, "group", "delete-offsets", "idle", "--topic", "t:1")
		require.NoError(t, err, stderr)
		require.Regexp(t, `(?m)^t\s+1\s+Deleted$`, out)
		require.Equal(t, map[client.TopicPartition]int64{t0: 0, t1: -1, t2: 0}, committedOffsets(t, cl, "idle", t0, t1, t2))
		require.NoError(t, cl.DeleteOffsets(ctx, "idle", t2))
		require.Equal(t, map[client.TopicPartition]int64{t0: 0, t1: -1, t2: -1}, committedOffsets(t, cl, "idle", t0, t1, t2))
	})

	t.Run("delete", func(t *testing.T) {
		res, err := cl.DeleteGroups(ctx, "idle", "busy")
		require.Error(t, err)
		require.Nil(t, res[0].GetError())
		require.NotNil(t, res[1].GetError(), "busy has a member")

		closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, busy.Close(closeCtx))
		out, stderr, err := groupCLI(t, c, "group", "delete", "busy", "fresh")
		require.NoError(t, err, stderr)
		require.Contains(t, out, "Deleted group busy.")
		require.Contains(t, out, "Deleted group fresh.")

		all, err := cl.ListGroups(ctx, nil, nil)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, "busy-next", all[0].GetGroupId())
	})
}

// After a SIGKILL of the node coordinating a group, admin calls from a
// client that cached it find the new coordinator on their own and see the
// offsets committed before the kill (the new coordinator replayed them).
func TestGroupAdminFollowsCoordinatorMove(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx := context.Background()
	_, err := cl.CreateTopic(ctx, "t", 1, 3, nil)
	require.NoError(t, err)
	t0 := client.TopicPartition{Topic: "t", Partition: 0}
	require.NoError(t, cl.CommitOffsets(ctx, "g", map[client.TopicPartition]int64{t0: 5}))
	before, _, err := cl.FindCoordinator(ctx, "g")
	require.NoError(t, err)
	victim := nodeByID(c, before)
	require.NotNil(t, victim, "coordinator %d is not a process of the cluster", before)
	require.NoError(t, victim.Kill())

	start := time.Now()
	require.Equal(t, map[client.TopicPartition]int64{t0: 5}, committedOffsets(t, cl, "g", t0), "offsets committed before the kill")
	require.NoError(t, cl.CommitOffsets(ctx, "g", map[client.TopicPartition]int64{t0: 6}))
	t.Logf("coordinator moved away from node %d; the calls took %v", before, time.Since(start))
	after, _, err := cl.FindCoordinator(ctx, "g")
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	require.Equal(t, map[client.TopicPartition]int64{t0: 6}, committedOffsets(t, cl, "g", t0))

	out, stderr, err := groupCLI(t, c, "group", "describe", "g")
	require.NoError(t, err, stderr)
	require.Regexp(t, `(?m)^t\s+0\s+6\s+`, out)
}

func protoJSON(s string, m proto.Message) error { return protojson.Unmarshal([]byte(s), m) }
