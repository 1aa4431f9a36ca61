package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the log the time: retention, compaction lag, tombstone
// horizons, segment.ms and LogAppendTime all read it, so tests can drive
// them with a ManualClock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set sets the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// ShiftedClock is the wall clock moved by an offset that can change at any
// time, for fault injection: a process told its clock jumped (NTP step,
// a VM restored from a snapshot) sees retention, segment.ms and
// LogAppendTime follow the jump. Safe for concurrent use.
type ShiftedClock struct {
	offset atomic.Int64 // nanoseconds
}

// NewShiftedClock returns a ShiftedClock at offset zero.
func NewShiftedClock() *ShiftedClock { return &ShiftedClock{} }

// Now returns the wall clock plus the offset.
func (c *ShiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// SetOffset sets the offset from the wall clock (negative runs behind).
func (c *ShiftedClock) SetOffset(d time.Duration) { c.offset.Store(int64(d)) }

// Offset returns the offset from the wall clock.
func (c *ShiftedClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }
