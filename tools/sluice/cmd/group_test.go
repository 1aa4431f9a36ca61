package cmd

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client"
)

func TestParseTopicSpec(t *testing.T) {
	s, err := parseTopicSpec("orders")
	require.NoError(t, err)
	require.Equal(t, topicSpec{topic: "orders"}, s)

	s, err = parseTopicSpec("orders:2, 0,2")
	require.NoError(t, err)
	require.Equal(t, topicSpec{topic: "orders", partitions: []int32{2, 0}}, s)

	for _, bad := range []string{"", ":1", "orders:", "orders:x", "orders:-1", "orders:1,,2"} {
		_, err := parseTopicSpec(bad)
		require.Error(t, err, bad)
	}
}

func TestResetFlagsValidate(t *testing.T) {
	ok := resetFlags{topics: []string{"t"}, toEarliest: true}
	spec, topics, err := ok.validate()
	require.NoError(t, err)
	require.Equal(t, resetToEarliest, spec.mode)
	require.Equal(t, []topicSpec{{topic: "t"}}, topics)

	spec, _, err = resetFlags{allTopics: true, shiftBySet: true, shiftBy: -5}.validate()
	require.NoError(t, err)
	require.Equal(t, resetSpec{mode: resetShiftBy, n: -5}, spec)

	spec, _, err = resetFlags{topics: []string{"t"}, toOffsetSet: true}.validate()
	require.NoError(t, err)
	require.Equal(t, resetSpec{mode: resetToOffset, n: 0}, spec, "--to-offset 0 is a valid reset")

	spec, _, err = resetFlags{topics: []string{"t"}, toDatetime: "2026-11-30T12:00:00Z"}.validate()
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli(), spec.at.UnixMilli())

	spec, _, err = resetFlags{topics: []string{"t"}, toDatetime: "2026-11-30T12:00:00.000"}.validate()
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.Local).UnixMilli(), spec.at.UnixMilli(), "no zone is local time, as in Kafka's tool")

	for name, tc := range map[string]struct {
		f    resetFlags
		want string
	}{
		"no reset":            {resetFlags{topics: []string{"t"}}, "one of --to-earliest"},
		"two resets":          {resetFlags{topics: []string{"t"}, toEarliest: true, shiftBySet: true}, "--to-earliest, --shift-by"},
		"no topics":           {resetFlags{toLatest: true}, "--topic TOPIC"},
		"topics and all":      {resetFlags{topics: []string{"t"}, allTopics: true, toLatest: true}, "--topic TOPIC"},
		"negative offset":     {resetFlags{topics: []string{"t"}, toOffsetSet: true, toOffset: -1}, "must not be negative"},
		"bad datetime":        {resetFlags{topics: []string{"t"}, toDatetime: "yesterday"}, "2006-01-02T15:04:05Z"},
		"execute and dry run": {resetFlags{topics: []string{"t"}, toLatest: true, execute: true, dryRun: true}, "exclude each other"},
		"bad topic":           {resetFlags{topics: []string{"t:a"}, toLatest: true}, "not a partition number"},
	} {
		_, _, err := tc.f.validate()
		require.ErrorContains(t, err, tc.want, name)
	}
}

func TestPlanReset(t *testing.T) {
	a0, a1, b0 := client.TopicPartition{Topic: "a", Partition: 0}, client.TopicPartition{Topic: "a", Partition: 1}, client.TopicPartition{Topic: "b", Partition: 0}
	tps := []client.TopicPartition{b0, a1, a0}
	in := resetInputs{
		committed: map[client.TopicPartition]int64{a0: 50, a1: -1, b0: 5},
		earliest:  map[client.TopicPartition]int64{a0: 10, a1: 0, b0: 0},
		latest:    map[client.TopicPartition]int64{a0: 100, a1: 20, b0: 8},
		byTime:    map[client.TopicPartition]int64{a0: 70, a1: -1, b0: 3},
	}
	plan := func(spec resetSpec) []int64 {
		rows, err := planReset(spec, tps, in)
		require.NoError(t, err)
		require.Equal(t, []client.TopicPartition{a0, a1, b0}, []client.TopicPartition{
			{Topic: rows[0].Topic, Partition: rows[0].Partition}, {Topic: rows[1].Topic, Partition: rows[1].Partition}, {Topic: rows[2].Topic, Partition: rows[2].Partition}})
		require.Equal(t, []int64{50, -1, 5}, []int64{rows[0].Current, rows[1].Current, rows[2].Current})
		return []int64{rows[0].New, rows[1].New, rows[2].New}
	}
	require.Equal(t, []int64{10, 0, 0}, plan(resetSpec{mode: resetToEarliest}))
	require.Equal(t, []int64{100, 20, 8}, plan(resetSpec{mode: resetToLatest}))
	require.Equal(t, []int64{70, 20, 3}, plan(resetSpec{mode: resetToDatetime}), "no record that recent: the log end")
	require.Equal(t, []int64{15, 15, 8}, plan(resetSpec{mode: resetToOffset, n: 15}), "kept within [earliest, latest]")
	require.Equal(t, []int64{10, 0, 0}, plan(resetSpec{mode: resetToOffset, n: 0}))

	in.committed[a1] = 4
	require.Equal(t, []int64{47, 1, 2}, plan2(t, resetSpec{mode: resetShiftBy, n: -3}, tps, in))
	require.Equal(t, []int64{10, 0, 0}, plan2(t, resetSpec{mode: resetShiftBy, n: -1000}, tps, in), "not before the log start")
	require.Equal(t, []int64{100, 20, 8}, plan2(t, resetSpec{mode: resetShiftBy, n: 1000}, tps, in), "not past the log end")

	delete(in.committed, a1)
	_, err := planReset(resetSpec{mode: resetShiftBy, n: 1}, tps, in)
	require.ErrorContains(t, err, "cannot shift the offset of a-1: the group has no committed offset there")

	delete(in.latest, b0)
	_, err = planReset(resetSpec{mode: resetToLatest}, tps, in)
	require.ErrorContains(t, err, "b-0: the latest offset is not known")
}

func plan2(t *testing.T, spec resetSpec, tps []client.TopicPartition, in resetInputs) []int64 {
	t.Helper()
	rows, err := planReset(spec, tps, in)
	require.NoError(t, err)
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.New
	}
	return out
}

func TestResetAllowed(t *testing.T) {
	require.NoError(t, resetAllowed("g", "Empty"))
	require.NoError(t, resetAllowed("g", "Dead"), "a group that does not exist yet")
	require.EqualError(t, resetAllowed("g", "Stable"), "Assignments can only be reset if the group 'g' is inactive, but the current state is Stable")
	require.Error(t, resetAllowed("g", "PreparingRebalance"))
}

func TestNormalizeFilters(t *testing.T) {
	states, types, err := normalizeFilters([]string{"stable", "EMPTY"}, []string{"Consumer"})
	require.NoError(t, err)
	require.Equal(t, []string{"Stable", "Empty"}, states)
	require.Equal(t, []string{"consumer"}, types)
	_, _, err = normalizeFilters([]string{"running"}, nil)
	require.ErrorContains(t, err, "want one of Empty, Stable")
	_, _, err = normalizeFilters(nil, []string{"share"})
	require.ErrorContains(t, err, "want classic or consumer")
}

// Flag mistakes are reported before the cluster is contacted: the
// bootstrap address here has nobody listening, so a command that tried to
// connect would fail differently.
func TestGroupCommandFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"group", "reset-offsets", "g", "--topic", "t"}, "one of --to-earliest"},
		{[]string{"group", "reset-offsets", "g", "--to-latest"}, "--topic TOPIC[:P,P] (repeatable) or --all-topics"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-latest", "--to-offset", "3"}, "--to-latest, --to-offset"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-datetime", "2026-13-01"}, "--to-datetime"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-latest", "--execute", "--dry-run"}, "exclude each other"},
		{[]string{"group", "reset-offsets", "--topic", "t", "--to-latest"}, "accepts 1 arg"},
		{[]string{"group", "delete-offsets", "g"}, "--topic TOPIC"},
		{[]string{"group", "delete-offsets", "g", "--topic", "t:z"}, "not a partition number"},
		{[]string{"group", "list", "--state", "running"}, "--state"},
		{[]string{"group", "delete"}, "requires at least 1 arg"},
		{[]string{"group", "describe"}, "accepts 1 arg"},
	} {
		root, _ := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"--bootstrap", "127.0.0.1:1", "--request-timeout", "100ms"}, tc.args...))
		err := root.Execute()
		require.ErrorContains(t, err, tc.want, strings.Join(tc.args, " "))
	}
}

func TestWriteGroupDescription(t *testing.T) {
	d := &groupv1.GroupDescription{GroupId: "g", State: "Stable", Type: "classic", ProtocolType: "consumer", Protocol: "range", Epoch: 3,
		Members: []*groupv1.GroupMember{{MemberId: "m1", ClientId: "c1", ClientHost: "/127.0.0.1",
			Assignment: &groupv1.Assignment{TopicPartitions: []*groupv1.TopicPartitions{{Topic: "t", Partitions: []int32{1, 0}}}}}}}
	lag := []client.PartitionLag{
		{Topic: "t", Partition: 0, Committed: 5, LogEnd: 9, Lag: 4, MemberID: "m1", ClientID: "c1", Host: "/127.0.0.1"},
		{Topic: "t", Partition: 1, Committed: -1, LogEnd: 2, Lag: -1, MemberID: "m1", ClientID: "c1", Host: "/127.0.0.1"},
	}
	var b bytes.Buffer
	g := &globals{output: "text"}
	require.NoError(t, g.print(&b, nil, func(w io.Writer) error {
		writeGroupDescription(w, d, groupCoordinator{NodeID: 7, Address: "10.0.0.7:9090"}, lag)
		return nil
	}))
	out := b.String()
	require.Contains(t, out, "Group: g  State: Stable  Type: classic  Protocol: consumer/range  Epoch: 3  Members: 1")
	require.Contains(t, out, "Coordinator: node 7 at 10.0.0.7:9090")
	require.Contains(t, out, "t:0,1")
	require.Regexp(t, `t\s+0\s+5\s+9\s+4\s+m1\s+/127.0.0.1\s+c1`, out)
	require.Regexp(t, `t\s+1\s+-\s+2\s+-\s+m1`, out)

	b.Reset()
	d.Members = nil
	require.NoError(t, g.print(&b, nil, func(w io.Writer) error { writeGroupDescription(w, d, groupCoordinator{NodeID: -1}, nil); return nil }))
	require.Contains(t, b.String(), "Consumer group 'g' has no active members.")
	require.Contains(t, b.String(), "Coordinator: unknown")
}
