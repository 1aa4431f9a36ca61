package replica

import (
	"testing"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// Over a simulated minute of back-to-back chunks the bucket lets through
// the rate times the span, plus at most the burst and one chunk.
func TestThrottleBoundsRate(t *testing.T) {
	now := time.Unix(0, 0)
	th := throttle{now: func() time.Time { return now }}
	const rate = 1 << 20
	chunk := throttledChunk(rate, 1<<20)
	if chunk <= 0 || chunk > 1<<20 {
		t.Fatalf("chunk %d", chunk)
	}
	sent := 0
	start := now
	for now.Sub(start) < time.Minute {
		if d := th.wait(rate); d > 0 {
			now = now.Add(d)
			continue
		}
		th.take(chunk, rate)
		sent += chunk
	}
	span := now.Sub(start).Seconds()
	if limit := rate*span + rate*throttleBurst.Seconds() + float64(chunk); float64(sent) > limit {
		t.Fatalf("sent %d bytes in %.1f s at %d B/s: above %.0f", sent, span, rate, limit)
	}
	if float64(sent) < 0.95*rate*span {
		t.Fatalf("sent %d bytes in %.1f s at %d B/s: the bucket holds back more than it should", sent, span, rate)
	}
}

// An idle spell earns no more than the burst.
func TestThrottleIdleBurst(t *testing.T) {
	now := time.Unix(0, 0)
	th := throttle{now: func() time.Time { return now }}
	const rate = 1000
	th.take(0, rate)
	now = now.Add(time.Hour)
	th.take(int(rate*throttleBurst.Seconds())+1, rate)
	if th.wait(rate) == 0 {
		t.Fatal("an hour idle let more than the burst through")
	}
}

func TestThrottledChunk(t *testing.T) {
	if got := throttledChunk(1<<30, 1<<20); got != 1<<20 {
		t.Fatalf("a fast rate keeps the configured chunk: %d", got)
	}
	if got := throttledChunk(1, 1<<20); got != minThrottledChunk {
		t.Fatalf("a slow rate keeps the smallest chunk: %d", got)
	}
}

// Only a replica that a reassignment is adding is throttled, and only
// while a rate is set: the followers already in the replica set are not.
func TestReassignmentRateOnlyForAddingReplicas(t *testing.T) {
	cache := metadata.NewCache()
	m := &Manager{cache: cache}
	img := metadata.Empty()
	img.Topics["t"] = &metadata.Topic{Name: "t", Partitions: []*commonv1.PartitionState{
		{Topic: "t", Partition: 0, LeaderId: 1, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2}, AddingReplicas: []int32{3}, RemovingReplicas: []int32{2}},
		{Topic: "t", Partition: 1, LeaderId: 1, Replicas: []int32{1, 2}, Isr: []int32{1}},
	}}
	cache.Reset(img)
	tp0, tp1 := TP{"t", 0}, TP{"t", 1}
	if r := m.reassignmentRate(3, tp0); r != 0 {
		t.Fatalf("no rate set, yet %v", r)
	}
	withRate := *img
	withRate.ClusterConfigs = map[string]string{topicconfig.ReplicationThrottledRate: "1048576"}
	cache.Reset(&withRate)
	if r := m.reassignmentRate(3, tp0); r != 1<<20 {
		t.Fatalf("the adding replica is throttled at the rate, got %v", r)
	}
	for _, c := range []struct {
		replica int32
		tp      TP
	}{{2, tp0}, {2, tp1}, {4, tp0}, {3, TP{"missing", 0}}} {
		if r := m.reassignmentRate(c.replica, c.tp); r != 0 {
			t.Fatalf("replica %d of %s is not being added, yet throttled at %v", c.replica, c.tp, r)
		}
	}
}
