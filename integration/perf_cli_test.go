package integration

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
)

// `sluice perf consume --group` reads as a member of the group, as
// kafka-consumer-perf-test does with a group: it reads every record of the
// topic, reports the join, and on the way out commits where it stopped, so
// that the group's committed offsets reach the log end of every partition.
// Flags that make no sense with a group are refused before anything
// connects.
func TestCLIPerfConsumeGroup(t *testing.T) {
	const n = 30000
	c := cluster.Start(t, cluster.Options{Combined: true})
	produced := runCLI(t, c, "", "perf", "produce", "--topic", "t", "--partitions", "3", "--replication-factor", "1",
		"--num-records", strconv.Itoa(n), "--record-size", "100", "--acks", "all", "-o", "json")
	var prod struct{ Records, Errors int64 }
	require.NoError(t, json.Unmarshal([]byte(produced), &prod), produced)
	require.Equal(t, int64(n), prod.Records)
	require.Zero(t, prod.Errors)

	_, stderr, err := groupCLI(t, c, "perf", "consume", "--topic", "t", "--group", "g", "--partition", "0")
	require.Error(t, err)
	require.Contains(t, stderr, "cannot be combined with --partition")
	_, stderr, err = groupCLI(t, c, "perf", "consume", "--topic", "t", "--group-protocol", "consumer")
	require.Error(t, err)
	require.Contains(t, stderr, "--group-protocol needs --group")

	out := runCLI(t, c, "", "perf", "consume", "--topic", "t", "--group", "g", "--messages", strconv.Itoa(n), "-o", "json")
	var sum struct {
		Mode        string         `json:"mode"`
		Records     int64          `json:"records"`
		Bytes       int64          `json:"bytes"`
		Errors      int64          `json:"errors"`
		MBPerSec    float64        `json:"mb_per_s"`
		FirstRecord *float64       `json:"first_record_s"`
		Join        *float64       `json:"join_s"`
		FetchMBPerS float64        `json:"fetch_mb_per_s"`
		Config      map[string]any `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sum), out)
	require.Equal(t, "consume", sum.Mode)
	require.Equal(t, int64(n), sum.Records, out)
	require.Equal(t, int64(n*100), sum.Bytes, out)
	require.Zero(t, sum.Errors, out)
	require.Positive(t, sum.MBPerSec, out)
	require.Positive(t, sum.FetchMBPerS, out)
	require.NotNil(t, sum.Join, out)
	require.NotNil(t, sum.FirstRecord, out)
	require.GreaterOrEqual(t, *sum.FirstRecord, *sum.Join, "the first record comes after the join: %s", out)
	require.Equal(t, "g", sum.Config["group"], out)

	desc, stderr, err := groupCLI(t, c, "group", "describe", "g", "-o", "json")
	require.NoError(t, err, stderr)
	var d struct {
		Offsets []struct {
			Partition     int32 `json:"partition"`
			CurrentOffset int64 `json:"currentOffset"`
			LogEndOffset  int64 `json:"logEndOffset"`
		} `json:"offsets"`
	}
	require.NoError(t, json.Unmarshal([]byte(desc), &d), desc)
	require.Len(t, d.Offsets, 3, desc)
	var committed int64
	for _, o := range d.Offsets {
		require.Equal(t, o.LogEndOffset, o.CurrentOffset, "partition %d: committed offset below the log end: %s", o.Partition, desc)
		committed += o.CurrentOffset
	}
	require.Equal(t, int64(n), committed, desc)
}
