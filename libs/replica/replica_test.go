package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// newLeader returns a manager on node 1 leading partition t-0 with the
// given ISR and min.insync.replicas.
func newLeader(t *testing.T, isr []int32, minISR string) (*Manager, *Partition) {
	return newLeaderWith(t, isr, map[string]string{"min.insync.replicas": minISR, "sluice.fsync.before.ack": "false"})
}

func newLeaderWith(t *testing.T, isr []int32, configs map[string]string) (*Manager, *Partition) {
	t.Helper()
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{
		Revision: 1, ControllerId: -1,
		Topics: []*controllerv1.TopicMetadata{{Name: "t", TopicId: "id", Configs: configs,
			Partitions: []*commonv1.PartitionState{{Topic: "t", LeaderId: 1, LeaderEpoch: 3, Replicas: []int32{1, 2, 3}, Isr: isr}}}},
	}))
	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	m := NewManager(Config{Dir: t.TempDir(), LagTimeMax: time.Hour}, 1, cache, nil, pool, log.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	p, ok := m.Get(TP{"t", 0})
	require.True(t, ok)
	require.True(t, p.View().IsLeader)
	return m, p
}

func batchOf(t *testing.T, n int) []byte {
	t.Helper()
	b := record.NewBuilder(record.CodecNone)
	for i := range n {
		require.NoError(t, b.AppendKV(time.Now().UnixMilli(), nil, []byte{byte(i)}))
	}
	out, err := b.Build()
	require.NoError(t, err)
	return append([]byte(nil), out...)
}

func TestHighWatermarkIsSmallestISRLogEnd(t *testing.T) {
	_, p := newLeader(t, []int32{1, 2, 3}, "2")
	res, err := p.Produce(context.Background(), batchOf(t, 5), AcksLeader, nil, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	require.Equal(t, int64(0), p.View().HighWatermark, "followers have not fetched yet")

	epoch := int32(3)
	_, _, _, err = p.ReadForFollower(2, 5, -1, &epoch, 1<<20)
	require.NoError(t, err)
	require.Equal(t, int64(0), p.View().HighWatermark, "replica 3 holds it")
	_, _, _, err = p.ReadForFollower(3, 3, -1, &epoch, 1<<20)
	require.NoError(t, err)
	require.Equal(t, int64(3), p.View().HighWatermark)
	_, _, _, err = p.ReadForFollower(3, 5, -1, &epoch, 1<<20)
	require.NoError(t, err)
	require.Equal(t, int64(5), p.View().HighWatermark)

	// A consumer reads only below the high watermark.
	data, v, div, err := p.ReadForConsumer(0, 1<<20, nil, nil)
	require.NoError(t, err)
	require.Nil(t, div)
	require.Equal(t, int64(5), v.HighWatermark)
	require.Equal(t, int64(5), data.NextOffset)
	data.Release()
}

func TestHighWatermarkWaitsForMinInsync(t *testing.T) {
	_, p := newLeader(t, []int32{1}, "2")
	// acks=all is refused before appending when the ISR is too small.
	_, err := p.Produce(context.Background(), batchOf(t, 1), AcksAll, nil, record.FromClient)
	require.Equal(t, errs.NotEnoughReplicas, errs.CodeOf(err))
	require.Equal(t, int64(0), p.Log().LogEndOffset())
	// acks=1 appends, but the mark stays put with one in-sync replica.
	_, err = p.Produce(context.Background(), batchOf(t, 2), AcksLeader, nil, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, int64(0), p.View().HighWatermark)
}

func TestEpochChecksAndDivergence(t *testing.T) {
	_, p := newLeader(t, []int32{1, 2, 3}, "1")
	_, err := p.Produce(context.Background(), batchOf(t, 4), AcksLeader, nil, record.FromClient)
	require.NoError(t, err)
	old, newer := int32(2), int32(4)
	_, err = p.Produce(context.Background(), batchOf(t, 1), AcksLeader, &old, record.FromClient)
	require.Equal(t, errs.FencedLeaderEpoch, errs.CodeOf(err))
	_, err = p.Produce(context.Background(), batchOf(t, 1), AcksLeader, &newer, record.FromClient)
	require.Equal(t, errs.UnknownLeaderEpoch, errs.CodeOf(err))

	// A follower whose last batch came from epoch 2, ending past where
	// epoch 2 ends here, diverged: it learns where to truncate.
	cur := int32(3)
	_, _, div, err := p.ReadForFollower(2, 10, 2, &cur, 1<<20)
	require.NoError(t, err)
	require.NotNil(t, div)
	require.LessOrEqual(t, div.EndOffset, int64(10))
	// One that matches gets data.
	data, _, div, err := p.ReadForFollower(2, 0, -1, &cur, 1<<20)
	require.NoError(t, err)
	require.Nil(t, div)
	require.Equal(t, int64(4), data.NextOffset)
	data.Release()
}

func TestAcksAllCompletesWhenFollowersCatchUp(t *testing.T) {
	_, p := newLeader(t, []int32{1, 2}, "2")
	done := make(chan error, 1)
	go func() {
		_, err := p.Produce(context.Background(), batchOf(t, 3), AcksAll, nil, record.FromClient)
		done <- err
	}()
	epoch := int32(3)
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if p.Log().LogEndOffset() < 3 {
			return errs.New(errs.RequestTimedOut, "not appended yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("acknowledged before the follower had the records: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, _, _, err := p.ReadForFollower(2, 3, -1, &epoch, 1<<20)
	require.NoError(t, err)
	require.NoError(t, <-done)
}

// With sluice.fsync.before.ack (the default) the leader counts towards the
// high watermark only what it has made durable; acks=all still completes,
// through group commit.
func TestFsyncBeforeAckCountsDurableOffsets(t *testing.T) {
	_, p := newLeaderWith(t, []int32{1}, map[string]string{"min.insync.replicas": "1"})
	res, err := p.Produce(context.Background(), batchOf(t, 4), AcksAll, nil, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, int64(3), res.LastOffset)
	require.Equal(t, int64(4), p.View().HighWatermark)
	require.GreaterOrEqual(t, p.Log().DurableOffset(), int64(4), "acknowledged only once durable")
}

// On a topic that fsyncs before acknowledging, records produced with
// acks=1 (which never wait for an fsync) still become durable and visible
// to consumers, without any acks=all producer to drive the group commit.
func TestFsyncBeforeAckAcksLeaderRecordsBecomeVisible(t *testing.T) {
	_, p := newLeaderWith(t, []int32{1}, map[string]string{"min.insync.replicas": "1"})
	for range 3 {
		_, err := p.Produce(context.Background(), batchOf(t, 5), AcksLeader, nil, record.FromClient)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return p.View().HighWatermark == 15 }, 10*time.Second, time.Millisecond,
		"high watermark %d, want 15", p.View().HighWatermark)
	require.GreaterOrEqual(t, p.Log().DurableOffset(), int64(15), "visible only once durable")
	data, _, _, err := p.ReadForConsumer(0, 1<<20, nil, nil)
	require.NoError(t, err)
	require.Equal(t, int64(15), data.NextOffset)
	data.Release()
}

// A traced append is registered before any follower can read it: a
// follower that reads the new records at once, woken by the append or
// fetching on its own, sends them on with the produce's trace context
// (otherwise its append is missing from the trace). One follower waits to
// be woken; another fetches in a loop, as one busy with other data would.
func TestTracedAppendIsRegisteredBeforeFollowersRead(t *testing.T) {
	_, p := newLeader(t, []int32{1, 2, 3}, "2")
	p.mu.Lock()
	woken := p.notify
	p.mu.Unlock()
	seen := make(chan map[string]string, 2)
	go func() {
		<-woken
		seen <- p.traceContextFor(0, 5)
	}()
	go func() {
		epoch := int32(3)
		for {
			data, _, _, err := p.ReadForFollower(3, 0, -1, &epoch, 1<<20)
			if err != nil {
				seen <- map[string]string{"error": err.Error()}
				return
			}
			if data != nil && data.NextOffset > 0 {
				data.Release()
				seen <- p.traceContextFor(0, data.NextOffset)
				return
			}
		}
	}()
	carrier := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	span := trace.SpanFromContext(context.Background())
	res, _, done, err := p.AppendTraced(batchOf(t, 5), AcksAll, nil, record.FromClient, span, carrier)
	require.NoError(t, err)
	require.EqualValues(t, 4, res.LastOffset)
	require.Equal(t, carrier, <-seen, "the trace context of the records a follower reads first")
	require.Equal(t, carrier, <-seen, "the trace context of the records a follower reads first")
	done()
	require.Nil(t, p.traceContextFor(0, 5), "unregistered once the wait is over")
}
