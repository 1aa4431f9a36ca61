package client

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// While a partition has MaxInFlight batches unanswered, the records that
// arrive join one open batch up to MaxBatchBytes instead of being sealed
// at BatchBytes into a queue of small batches; with MaxBatchBytes equal to
// BatchBytes no batch passes BatchBytes. Either way every record arrives
// once and in order.
func TestProducerBatchGrowsWhileInFlightIsFull(t *testing.T) {
	const n = 600
	// A record of a 1-3 byte value counts as 33-35 bytes against the
	// batch limits.
	for _, tc := range []struct {
		name     string
		maxBatch int
	}{
		{"grows", 4000},
		{"growth off", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSeqNode()
			f.hold, f.holdFor = 5, 100*time.Millisecond
			p, _ := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, MaxBatchBytes: tc.maxBatch, Linger: time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			recs := make([]*Record, n)
			for i := range recs {
				recs[i] = &Record{Topic: "t", Partition: 0, Value: []byte(strconv.Itoa(i))}
			}
			_, err := p.ProduceSync(ctx, recs...)
			require.NoError(t, err)
			require.Equal(t, numbers(n, nil), f.log(0))
			largest := int32(0)
			for _, b := range f.sentBatches() {
				largest = max(largest, b.count)
				require.LessOrEqual(t, int(b.count)*33, tc.maxBatch, "no batch passes MaxBatchBytes")
			}
			if tc.maxBatch > 200 {
				require.Greater(t, int(largest)*33, 200, "a batch grew past BatchBytes while five were in flight")
			}
		})
	}
}

// An idle producer's record is not held for a larger batch: it goes when
// its linger ends.
func TestProducerIdleRecordGoesAfterLinger(t *testing.T) {
	f := newSeqNode()
	f.hold, f.holdFor = 1, time.Millisecond
	p, _ := startSeqNode(t, f, ProducerConfig{Linger: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		_, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	require.Len(t, f.sentBatches(), 3, "one batch per record produced alone")
}
