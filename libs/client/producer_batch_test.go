package client

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
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

// A batch that grew past the topic's max.message.bytes while its partition
// could not send is refused as a whole; the producer splits it and sends
// the pieces in its place, so every record is written once and in order,
// with and without idempotence, and the partition stops growing batches
// past the pieces' size.
func TestProducerSplitsBatchRefusedAsTooLarge(t *testing.T) {
	const n = 600
	for _, tc := range []struct {
		name string
		cfg  ProducerConfig
	}{
		{"idempotent", ProducerConfig{}},
		{"idempotence off", ProducerConfig{DisableIdempotence: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSeqNode()
			f.hold, f.holdFor = 5, 30*time.Millisecond
			f.maxMessageBytes = 500
			cfg := tc.cfg
			cfg.BatchBytes, cfg.MaxBatchBytes, cfg.Linger = 200, 4000, time.Millisecond
			p, _ := startSeqNode(t, f, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			produce := func(from, to int) {
				recs := make([]*Record, 0, to-from)
				for i := from; i < to; i++ {
					recs = append(recs, &Record{Topic: "t", Partition: 0, Value: []byte(strconv.Itoa(i))})
				}
				res, err := p.ProduceSync(ctx, recs...)
				require.NoError(t, err)
				for i, r := range res {
					require.Equal(t, int64(from+i), r.Offset)
				}
				require.Equal(t, numbers(to, nil), f.log(0), "each record once, in order")
				requireSettled(t, p)
			}
			produce(0, n)
			f.mu.Lock()
			refused := f.tooLarge
			f.mu.Unlock()
			require.Positive(t, refused, "a grown batch was refused")
			// Only batches grown before the first refusal was answered
			// can be refused: those in flight and the open one.
			require.LessOrEqual(t, refused, 2*maxIdempotentInFlight)
			// The partition no longer grows batches past the pieces' size:
			// stalled again, it is refused nothing more.
			produce(n, n+n/3)
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Equal(t, refused, f.tooLarge, "no batch refused after the split")
		})
	}
}

// A record that alone passes max.message.bytes fails with the leader's
// error; the records batched with it are written, in order, although the
// first pieces of the refused batch are refused again and split in turn.
func TestProducerSingleRecordTooLargeFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ProducerConfig
	}{
		{"idempotent", ProducerConfig{}},
		{"idempotence off", ProducerConfig{DisableIdempotence: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSeqNode()
			f.maxMessageBytes = 1024
			cfg := tc.cfg
			cfg.Linger = 50 * time.Millisecond
			p, _ := startSeqNode(t, f, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const big = 20
			var recs []*Record
			var want []string
			for i := range 40 {
				v := fmt.Sprintf("%03d", i) + strings.Repeat("x", 97)
				if i == big {
					v = strings.Repeat("y", 2000)
				} else {
					want = append(want, v)
				}
				recs = append(recs, &Record{Topic: "t", Partition: 0, Value: []byte(v)})
			}
			res, err := p.ProduceSync(ctx, recs...)
			require.Error(t, err)
			for i, r := range res {
				if i != big {
					require.NoError(t, r.Err, "record %d", i)
					continue
				}
				require.True(t, errs.Is(r.Err, errs.MessageTooLarge), "%v", r.Err)
				require.Contains(t, r.Err.Error(), "exceeds max.message.bytes 1024")
			}
			require.Equal(t, want, f.log(0))
			requireSettled(t, p)
		})
	}
}

// A grown batch stays within MaxBatchBytes counting everything a record
// encodes, headers included: with MaxBatchBytes equal to the topic's
// max.message.bytes no batch is refused. Records whose headers outweigh
// their values were once counted by key and value alone, and batches grew
// to several times the limit.
func TestProducerGrownBatchCountsHeaders(t *testing.T) {
	const n = 400
	f := newSeqNode()
	f.hold, f.holdFor = 5, 30*time.Millisecond
	f.maxMessageBytes = 4000
	p, _ := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, MaxBatchBytes: 4000, Linger: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := []byte(strings.Repeat("h", 100))
	recs := make([]*Record, n)
	for i := range recs {
		recs[i] = &Record{Topic: "t", Partition: 0, Value: []byte(strconv.Itoa(i)), Headers: []record.Header{{Key: "trace", Value: hdr}}}
	}
	_, err := p.ProduceSync(ctx, recs...)
	require.NoError(t, err)
	require.Equal(t, numbers(n, nil), f.log(0))
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Zero(t, f.tooLarge, "a batch passed MaxBatchBytes")
}

// The sender loop looks again when a lingering batch's Linger ends: for a
// sub-millisecond Linger, after what is left of it (a batch found at 300 µs
// of a 500 µs Linger once waited a whole Linger more); otherwise no sooner
// than a millisecond.
func TestProducerLooksAgainWhenLingerEnds(t *testing.T) {
	require.Equal(t, 200*time.Microsecond, lookAgain(200*time.Microsecond, true))
	require.Equal(t, time.Millisecond, lookAgain(200*time.Microsecond, false), "no batch lingers: a millisecond between passes")
	require.Equal(t, 3*time.Millisecond, lookAgain(3*time.Millisecond, true))
}

// A producer with nothing queued has its sender loop wait to be woken
// instead of looking again every Linger (thousands of idle producers in
// one process cost most of a core that way), and a record produced after
// that still goes.
func TestProducerIdleLoopWaitsForWork(t *testing.T) {
	f := newSeqNode()
	p, _ := startSeqNode(t, f, ProducerConfig{Linger: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")})
	require.NoError(t, err)
	require.Zero(t, p.sendReady(ctx), "no batch queued: no pass is due")
	_, err = p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("1")})
	require.NoError(t, err)
	require.Equal(t, numbers(2, nil), f.log(0))
}

// The watchdog of a connection with nothing in flight sleeps instead of
// looking every 250 ms, and a request sent afterwards wakes it.
func TestProducerConnWatchSleepsWhileIdle(t *testing.T) {
	f := newSeqNode()
	f.holdFor = time.Second // each answer waits: the watchdog looks meanwhile
	p, _ := startSeqNode(t, f, ProducerConfig{Linger: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("0")})
	require.NoError(t, err)
	p.connMu.Lock()
	require.Len(t, p.conns, 1)
	var c *prodConn
	for _, c = range p.conns {
	}
	p.connMu.Unlock()
	// Let the pass that finds the answer in come and go (within a tick
	// of 250 ms; a wake-up left from the busy time is dropped by it).
	time.Sleep(time.Second)
	idle := c.watchPasses.Load()
	time.Sleep(time.Second)
	require.Equal(t, idle, c.watchPasses.Load(), "the watchdog looked while nothing was in flight")

	_, err = p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("1")})
	require.NoError(t, err)
	require.Greater(t, c.watchPasses.Load(), idle, "a request in flight woke the watchdog")
	require.Equal(t, numbers(2, nil), f.log(0))
}
