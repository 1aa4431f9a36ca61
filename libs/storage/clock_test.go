package storage

import (
	"testing"
	"time"
)

func TestShiftedClockFollowsItsOffset(t *testing.T) {
	c := NewShiftedClock()
	if d := time.Since(c.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("at offset 0 the clock is %v from the wall clock", d)
	}
	c.SetOffset(-time.Hour)
	if d := time.Since(c.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("at offset -1h the clock is %v behind the wall clock", d)
	}
	if c.Offset() != -time.Hour {
		t.Fatalf("Offset = %v", c.Offset())
	}
	c.SetOffset(0)
	if d := time.Since(c.Now()); d > time.Second {
		t.Fatalf("back at offset 0 the clock is %v behind", d)
	}
}
