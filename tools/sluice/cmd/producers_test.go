package cmd

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

func TestWriteProducers(t *testing.T) {
	res := &storagev1.DescribeProducersResult{Partition: tp0, NodeId: 2, LastStableOffset: 17, Producers: []*storagev1.ProducerState{
		{ProducerId: 1000, ProducerEpoch: 0, LastSequence: 99, LastTimestampMs: 1_800_000_000_000, CoordinatorEpoch: 0, CurrentTxnStartOffset: -1},
		{ProducerId: 1001, ProducerEpoch: 2, LastSequence: 4, LastTimestampMs: 1_800_000_000_500, CoordinatorEpoch: 3, CurrentTxnStartOffset: 17},
	}}
	var b bytes.Buffer
	g := &globals{output: "text"}
	require.NoError(t, g.print(&b, nil, func(w io.Writer) error { writeProducers(w, res); return nil }))
	out := b.String()
	require.Contains(t, out, "Partition: t-0  Answered by: node 2  Last stable offset: 17  Producers: 2")
	require.Regexp(t, `1000\s+0\s+99\s+2027-01-15T08:00:00.000Z\s+0\s+-\n`, out)
	require.Regexp(t, `1001\s+2\s+4\s+2027-01-15T08:00:00.500Z\s+3\s+17\n`, out)

	b.Reset()
	res.LastStableOffset, res.Producers = -1, nil
	require.NoError(t, g.print(&b, nil, func(w io.Writer) error { writeProducers(w, res); return nil }))
	require.Equal(t, "Partition: t-0  Answered by: node 2  Last stable offset: -  Producers: 0\n", b.String())
}
