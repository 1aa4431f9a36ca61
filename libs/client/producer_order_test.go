package client

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// resultOrder records the order in which a producer's callbacks run.
type resultOrder struct {
	mu  sync.Mutex
	wg  sync.WaitGroup
	ran map[int32][]int // per partition, the records' numbers in callback order
	res map[int]Result
}

func newResultOrder() *resultOrder {
	return &resultOrder{ran: map[int32][]int{}, res: map[int]Result{}}
}

// produce produces record i (its value is i) to partition part.
func (l *resultOrder) produce(t *testing.T, p *Producer, part int32, i int) {
	t.Helper()
	l.wg.Add(1)
	require.NoError(t, p.Produce(context.Background(), &Record{Topic: "t", Partition: part, Value: []byte(strconv.Itoa(i))}, func(r Result) {
		l.mu.Lock()
		l.ran[r.Partition] = append(l.ran[r.Partition], i)
		l.res[i] = r
		l.mu.Unlock()
		l.wg.Done()
	}))
}

// inversions counts the callbacks of a partition that ran after a later
// record's, and describes the first.
func inversions(ran []int) (n int, first string) {
	for i := 1; i < len(ran); i++ {
		if ran[i] < ran[i-1] {
			if n == 0 {
				first = "record " + strconv.Itoa(ran[i]) + "'s callback ran after record " + strconv.Itoa(ran[i-1]) + "'s"
			}
			n++
		}
	}
	return n, first
}

// A batch written by the leader whose answer is lost (or that is refused
// with a retriable error after the append) is resent while the batches
// behind it are acknowledged; the leader answers the resend with its
// original, lower offset. Its callbacks still run before those of the
// batches behind it: a partition's callbacks run in offset order.
func TestProducerCallbacksInOffsetOrderAfterRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *errs.Error
	}{
		{"answer lost", errs.New(errs.RequestTimedOut, "replication timed out")},
		{"stream cut after append", errCut},
		{"too few replicas after append", errs.New(errs.NotEnoughReplicasAfterAppend, "ISR shrank")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSeqNode()
			var failed atomic.Int32
			f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
				if n == 1 && failed.Add(1) == 1 {
					return tc.err, true
				}
				return nil, false
			}
			p, _ := startSeqNode(t, f, ProducerConfig{BatchBytes: 200, Linger: 5 * time.Millisecond, RetryBackoff: time.Millisecond})
			l := newResultOrder()
			const n = 400
			for i := range n {
				l.produce(t, p, 0, i)
			}
			l.wg.Wait()
			for i := range n {
				require.NoError(t, l.res[i].Err, "record %d", i)
				require.EqualValues(t, i, l.res[i].Offset, "record %d", i)
			}
			inv, first := inversions(l.ran[0])
			require.Zero(t, inv, "callbacks in offset order: %s", first)
			require.Equal(t, numbers(n, nil), f.log(0))
			require.NoError(t, p.Flush(context.Background()))
			requireSettled(t, p)
		})
	}
}

// Under random faults (lost answers, cut streams, refusals for good) every
// callback runs once, and each partition's run in produce order, failures
// in their places: a batch that fails for good does not hold later ones
// back, and one acknowledged early waits for the earlier ones.
func TestProducerCallbacksInOrderUnderRandomFaults(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(strconv.Itoa(int(seed)), func(t *testing.T) {
			f := newSeqNode()
			rng := rand.New(rand.NewPCG(seed, 7))
			f.fault = func(n int, part int32, h record.BatchHeader) (*errs.Error, bool) {
				// Called with f.mu held. Only what was not appended is
				// refused for good.
				x := rng.IntN(100)
				if x >= 16 && x < 18 && f.appendedLocked(part, h) {
					x = 100
				}
				switch {
				case x < 8:
					return errs.New(errs.RequestTimedOut, "replication timed out"), true
				case x < 12:
					return errCut, true
				case x < 16:
					return errs.New(errs.NotLeaderOrFollower, "not the leader"), false
				case x < 18:
					return errs.New(errs.InvalidRecord, "refused by the test"), false
				}
				return nil, false
			}
			p, _ := startSeqNode(t, f, ProducerConfig{BatchBytes: 300, Linger: time.Millisecond, RetryBackoff: time.Millisecond,
				RetryBackoffMax: 5 * time.Millisecond})
			l := newResultOrder()
			const n = 2000
			for i := range n {
				l.produce(t, p, int32(i%seqParts), i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, p.Flush(ctx))
			l.wg.Wait()
			failed := 0
			for part := range int32(seqParts) {
				require.Len(t, l.ran[part], n/seqParts, "partition %d: every callback ran once", part)
				inv, first := inversions(l.ran[part])
				require.Zero(t, inv, "partition %d: callbacks in produce order: %s", part, first)
				last := int64(-1)
				for _, i := range l.ran[part] {
					r := l.res[i]
					if r.Err != nil {
						failed++
						continue
					}
					require.Greater(t, r.Offset, last, "record %d", i)
					last = r.Offset
				}
			}
			requireSettled(t, p)
			t.Logf("%d records failed", failed)
		})
	}
}
