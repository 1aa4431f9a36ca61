package replica

import (
	"testing"
	"time"
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
