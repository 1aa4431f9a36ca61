package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// FetchStableOffsets asks with require_stable and returns a partition whose
// transactional commit is pending with UNSTABLE_OFFSET_COMMIT, next to the
// partitions answered; FetchOffsets does not ask for stability.
func TestFetchStableOffsets(t *testing.T) {
	f := &txnOffsetsNode{unstable: 1}
	c := startTxnOffsetsNode(t, f)
	tps := []TopicPartition{{"t", 0}, {"t", 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := c.FetchStableOffsets(ctx, "g", tps...)
	require.True(t, errs.Is(err, errs.UnstableOffsetCommit), "%v", err)
	require.Equal(t, errs.UnstableOffsetCommit, errs.FromProto(got[tps[0]].GetError()).Code)
	require.Equal(t, int64(41), got[tps[1]].GetOffset())

	got, err = c.FetchStableOffsets(ctx, "g", tps...)
	require.NoError(t, err)
	require.Equal(t, int64(40), got[tps[0]].GetOffset())

	_, err = c.FetchOffsets(ctx, "g", tps...)
	require.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.fetches, 3)
	require.True(t, f.fetches[0].GetRequireStable())
	require.True(t, f.fetches[1].GetRequireStable())
	require.False(t, f.fetches[2].GetRequireStable())
}
