package client

import (
	"sync"
	"sync/atomic"
	"time"
)

// wakeTimer wakes the producer's sender loop when a batch's linger ends.
// Go's own timers are late by up to a millisecond when every thread of the
// process sleeps in the network poller, because the poller's epoll_wait
// takes whole milliseconds: a linger with 300 µs left lasts about 1.1 ms,
// one with 1.5 ms left about 2.2 ms (measured on Linux with Go 1.26; the
// end-to-end p50 at 10k records/s with a 1 ms linger was 1.6 ms instead of
// 1.1). On Linux the timer is a timerfd, a file the poller watches, whose
// expiry wakes the poller on time; elsewhere, or when no timerfd can be
// had (out of file descriptors), it is a time.Timer.
//
// A wake-up may be spurious (an expiry already on its way when Reset or
// Stop ran): the loop that reads C must tolerate an extra pass.
type wakeTimer struct {
	C chan struct{}

	os osTimer // nil: the time.Timer fallback

	// deadline is when the armed OS timer fires (UnixNano), 0 when it is
	// not armed: a pass that asks for the deadline already set (a batch's
	// linger, looked at again and again under load) costs no system call.
	deadline atomic.Int64

	mu sync.Mutex
	t  *time.Timer
}

func newWakeTimer() *wakeTimer {
	w := &wakeTimer{C: make(chan struct{}, 1)}
	w.os = newOSTimer(w.fire)
	return w
}

func (w *wakeTimer) fire() {
	w.deadline.Store(0)
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// Reset makes the timer fire once, d from now, replacing any earlier
// deadline.
func (w *wakeTimer) Reset(d time.Duration) {
	if w.os != nil {
		at := time.Now().Add(d).UnixNano()
		if prev := w.deadline.Load(); prev != 0 && at >= prev-int64(sameDeadline) && at <= prev+int64(sameDeadline) {
			return
		}
		// Stored before arming, so the expiry's fire clears it (an
		// earlier expiry clearing it too only costs a system call).
		w.deadline.Store(at)
		if w.os.reset(d) {
			return
		}
		w.deadline.Store(0)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t == nil {
		w.t = time.AfterFunc(d, w.fire)
		return
	}
	w.t.Reset(d)
}

// Stop cancels the deadline.
func (w *wakeTimer) Stop() {
	if w.os != nil {
		w.deadline.Store(0)
		w.os.stop()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Stop()
	}
}

// Close releases the timer; it must not be used after.
func (w *wakeTimer) Close() {
	w.Stop()
	if w.os != nil {
		w.os.close()
	}
}

// osTimer is a timer the OS wakes the Go poller for; reset reports false
// if the OS refused, and the caller falls back to a time.Timer.
type osTimer interface {
	reset(d time.Duration) bool
	stop()
	close()
}

// sameDeadline is how close a new deadline must be to the armed one to
// leave the timer as it is: well under the poller's millisecond, and
// about what waking the loop costs.
const sameDeadline = 20 * time.Microsecond
