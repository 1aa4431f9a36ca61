package client

import (
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// wakeTimers are the timer with its OS clock and without (the fallback).
func wakeTimers(t *testing.T) map[string]*wakeTimer {
	t.Helper()
	os := newWakeTimer()
	if runtime.GOOS == "linux" {
		// The linger's accuracy depends on it: without the timerfd a wait
		// with less than a millisecond left lasts a millisecond.
		require.NotNil(t, os.os, "no timerfd on Linux")
	}
	return map[string]*wakeTimer{"os": os, "fallback": {C: make(chan struct{}, 1)}}
}

func fired(w *wakeTimer, within time.Duration) bool {
	select {
	case <-w.C:
		return true
	case <-time.After(within):
		return false
	}
}

func TestWakeTimerFiresOnceAndStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for name, w := range wakeTimers(t) {
		t.Run(name, func(t *testing.T) {
			defer w.Close()
			w.Reset(200 * time.Microsecond)
			require.True(t, fired(w, 5*time.Second), "the deadline passed and nothing woke the loop")
			require.False(t, fired(w, 50*time.Millisecond), "one Reset woke the loop twice")

			// A later Reset replaces the deadline: not at 1 ms, at 10 s.
			w.Reset(time.Millisecond)
			w.Reset(10 * time.Second)
			require.False(t, fired(w, 50*time.Millisecond), "Reset kept the earlier deadline")

			w.Reset(20 * time.Millisecond)
			w.Stop()
			require.False(t, fired(w, 100*time.Millisecond), "a stopped timer fired")

			// Usable again after Stop.
			w.Reset(0)
			require.True(t, fired(w, 5*time.Second), "a zero wait never fired")
		})
	}
	// Close ended the timerfd's reading goroutine (goleak above).
}

// BenchmarkLingerLateness reports how late a 300 µs wait (a linger with
// 300 µs left) ends in an otherwise idle process: the median and p99 in
// µs, with the producer's wake timer and with a time.Timer.
func BenchmarkLingerLateness(b *testing.B) {
	const d = 300 * time.Microsecond
	measure := func(b *testing.B, wait func()) {
		late := make([]time.Duration, 0, b.N)
		for range b.N {
			start := time.Now()
			wait()
			late = append(late, time.Since(start)-d)
		}
		sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
		b.ReportMetric(float64(late[len(late)/2].Microseconds()), "late-p50-µs")
		b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "late-p99-µs")
	}
	b.Run("wakeTimer", func(b *testing.B) {
		w := newWakeTimer()
		defer w.Close()
		measure(b, func() { w.Reset(d); <-w.C })
	})
	b.Run("time.Timer", func(b *testing.B) {
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		measure(b, func() { t.Reset(d); <-t.C })
	})
}
