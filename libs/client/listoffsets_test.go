package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// ListOffsets sends one request per leader, retries a partition whose
// leader is moving, and names the partitions it could not look up.
func TestListOffsetsPerLeader(t *testing.T) {
	fc, c := startGroupCluster(t, 2, Config{RequestTimeout: 5 * time.Second})
	var calls1, calls2 atomic.Int32
	fc.nodes[0].listOffsets = func(req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
		calls1.Add(1)
		resp := &storagev1.ListOffsetsResponse{}
		for _, p := range req.GetPartitions() {
			if p.GetSpec() != OffsetTimestamp || p.GetTimestampMs() != 1234 {
				return nil, errs.New(errs.InvalidRequest, "got spec %v at %d", p.GetSpec(), p.GetTimestampMs())
			}
			resp.Results = append(resp.Results, &storagev1.ListOffsetsResult{Topic: p.GetTopic(), Partition: p.GetPartition(), Offset: 40})
		}
		return resp, nil
	}
	fc.nodes[1].listOffsets = func(req *storagev1.ListOffsetsRequest) (*storagev1.ListOffsetsResponse, error) {
		res := &storagev1.ListOffsetsResult{Topic: "t", Partition: 1, Offset: -1}
		if calls2.Add(1) == 1 {
			res.Error = errs.New(errs.NotLeaderOrFollower, "t-1 is moving").Proto()
		}
		return &storagev1.ListOffsetsResponse{Results: []*storagev1.ListOffsetsResult{res}}, nil
	}
	t0, t1 := TopicPartition{"t", 0}, TopicPartition{"t", 1}
	got, err := c.ListOffsets(context.Background(), OffsetTimestamp, 1234, t0, t1)
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]int64{t0: 40, t1: -1}, got)
	require.EqualValues(t, 1, calls1.Load())
	require.EqualValues(t, 2, calls2.Load(), "the moving partition was asked again")

	got, err = c.ListOffsets(context.Background(), OffsetTimestamp, 1234, t0, TopicPartition{"t", 9}, TopicPartition{"gone", 0})
	require.Equal(t, map[TopicPartition]int64{t0: 40}, got)
	require.ErrorContains(t, err, `gone-0: UNKNOWN_TOPIC_OR_PARTITION: topic "gone" does not exist`)
	require.ErrorContains(t, err, `t-9: UNKNOWN_TOPIC_OR_PARTITION: topic "t" has 2 partitions; partition 9 does not exist`)
}
