package quota

import (
	"sync"
	"time"
)

// sensor measures one entity's rate of one quantity (bytes, or percent of
// request-handling time) over a sliding window of samples, as Kafka's
// client quota sensors do: the window is WindowNum samples of WindowSize
// each, aligned on multiples of WindowSize, and the rate is the sum of
// the samples still in the window divided by the time the window spans.
//
// The span is measured from the start of the oldest sample in the window,
// or from the sensor's first record if that is later, and is at least one
// sample. Kafka instead counts at least WindowNum-1 samples, which lets a
// new client send WindowNum-1 seconds' worth of quota in one burst before
// the first throttle; counting from the first record bounds a new
// client's burst to one sample's worth while measuring the same rate once
// the window is full.
type sensor struct {
	mu    sync.Mutex
	size  int64 // ns per sample
	first int64 // unix ns of the first record
	last  int64 // unix ns of the last record, for expiry
	// epochs[i] is the sample index (unix ns / size) whose value
	// values[i] holds; a slot whose epoch left the window counts zero.
	epochs []int64
	values []float64
}

func newSensor(n int, size time.Duration, now int64) *sensor {
	s := &sensor{size: int64(size), first: now, last: now, epochs: make([]int64, n), values: make([]float64, n)}
	for i := range s.epochs {
		s.epochs[i] = -1
	}
	return s
}

// record adds v at now and returns the rate over the window, per second,
// and the window's span.
func (s *sensor) record(now int64, v float64) (rate float64, span time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := now / s.size
	i := int(ep % int64(len(s.epochs)))
	if s.epochs[i] != ep {
		s.epochs[i], s.values[i] = ep, 0
	}
	s.values[i] += v
	if now > s.last {
		s.last = now
	}
	return s.measure(now)
}

// rate returns the rate over the window at now, without recording.
func (s *sensor) rate(now int64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _ := s.measure(now)
	return r
}

func (s *sensor) measure(now int64) (float64, time.Duration) {
	n := int64(len(s.epochs))
	cur := now / s.size
	oldest := cur - n + 1
	var total float64
	for i, ep := range s.epochs {
		if ep >= oldest && ep <= cur {
			total += s.values[i]
		}
	}
	from := max(oldest*s.size, s.first)
	span := max(now-from, s.size)
	return total / (float64(span) / float64(time.Second)), time.Duration(span)
}

func (s *sensor) lastRecord() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
