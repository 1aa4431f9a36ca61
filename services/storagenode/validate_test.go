package storagenode

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
)

func violations(t *testing.T, err error) map[string]string {
	t.Helper()
	require.Error(t, err)
	e := errs.From(err)
	require.Equal(t, errs.InvalidRequest, e.Code)
	out := map[string]string{}
	for _, v := range e.Violations {
		out[v.GetField()] = v.GetDescription()
	}
	return out
}

func TestValidateProduce(t *testing.T) {
	ok := &storagev1.ProduceRequest{Partitions: []*storagev1.ProducePartition{{
		Topic: "t", Partition: 0, Data: &storagev1.ProducePartition_Batches{Batches: []byte{1}},
	}}}
	require.NoError(t, validateProduce(ok))

	v := violations(t, validateProduce(&storagev1.ProduceRequest{
		Acks:      9,
		TimeoutMs: -1,
		Partitions: []*storagev1.ProducePartition{
			{Topic: "bad topic", Partition: -2},
			{Topic: "t", Data: &storagev1.ProducePartition_Records{Records: &commonv1.Records{}}},
			{Topic: "t", Data: &storagev1.ProducePartition_Batches{Batches: []byte{1}}, Compression: 42},
		},
	}))
	require.Contains(t, v["acks"], "9 is not a known value")
	require.Contains(t, v["timeout_ms"], "got -1")
	require.Contains(t, v["partitions[0].topic"], "illegal character ' '")
	require.Contains(t, v["partitions[0].partition"], "got -2")
	require.Contains(t, v["partitions[0]"], "has no data")
	require.Contains(t, v["partitions[1].records"], "is empty")
	require.Contains(t, v["partitions[2]"], "appears more than once")
	require.Contains(t, v["partitions[2].compression"], "42 is not a known value")
}

func TestValidateFetchAndListOffsets(t *testing.T) {
	v := violations(t, validateFetch(&storagev1.FetchRequest{MaxWaitMs: -5, Partitions: []*storagev1.FetchPartition{{Topic: "t", FetchOffset: -1}}}))
	require.Contains(t, v["max_wait_ms"], "got -5")
	require.Contains(t, v["partitions[0].fetch_offset"], "use ListOffsets")
	require.Contains(t, violations(t, validateFetch(&storagev1.FetchRequest{}))["partitions"], "at least one")

	v = violations(t, validateListOffsets(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
		{Topic: "t"}, {Topic: "t", Partition: 1, Spec: storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, TimestampMs: -3},
	}}))
	require.Contains(t, v["partitions[0].spec"], "EARLIEST")
	require.Contains(t, v["partitions[1].timestamp_ms"], "got -3")
}

func TestValidateDeleteRecordsAndEpochs(t *testing.T) {
	v := violations(t, validateDeleteRecords(&storagev1.DeleteRecordsRequest{Partitions: []*storagev1.DeleteRecordsPartition{{Topic: "t", Offset: -2}}}))
	require.Contains(t, v["partitions[0].offset"], "-1 (the high watermark)")
	require.NoError(t, validateDeleteRecords(&storagev1.DeleteRecordsRequest{Partitions: []*storagev1.DeleteRecordsPartition{{Topic: "t", Offset: -1}}}))
	v = violations(t, validateOffsetForLeaderEpoch(&storagev1.OffsetForLeaderEpochRequest{Partitions: []*storagev1.OffsetForLeaderEpochPartition{{Topic: "t", LeaderEpoch: -1}}}))
	require.Contains(t, v["partitions[0].leader_epoch"], "got -1")
}

// The role's flags come from the command line: a negative write-behind
// range is refused with the flag's name, and the default leaves writeback
// to the kernel.
func TestConfigWriteBehind(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, c.Validate())
	require.Zero(t, c.ReplicaConfig(config.Node{DataDir: t.TempDir()}).Storage.WriteBehindBytes)

	require.NoError(t, fs.Parse([]string{"--storage.write-behind-bytes=4194304"}))
	require.Equal(t, int64(4<<20), c.ReplicaConfig(config.Node{DataDir: t.TempDir()}).Storage.WriteBehindBytes)

	require.NoError(t, fs.Parse([]string{"--storage.write-behind-bytes=-1"}))
	require.ErrorContains(t, c.Validate(), "storage.write-behind-bytes")
}
