//go:build linux

package client

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerFD is an osTimer on a non-blocking timerfd, read by one goroutine
// through the Go poller.
type timerFD struct {
	f  *os.File
	fd int
}

func newOSTimer(fire func()) osTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	t := &timerFD{f: os.NewFile(uintptr(fd), "linger-timerfd"), fd: fd}
	go t.loop(fire)
	return t
}

func (t *timerFD) loop(fire func()) {
	var b [8]byte // the expiry count
	for {
		if _, err := t.f.Read(b[:]); err != nil {
			return // closed
		}
		fire()
	}
}

func (t *timerFD) reset(d time.Duration) bool {
	// A zero it_value disarms the timer; the shortest wait is 1 ns.
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	return unix.TimerfdSettime(t.fd, 0, &spec, nil) == nil
}

func (t *timerFD) stop() {
	_ = unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{}, nil) // fails only for a bad fd; a late wake-up is harmless
}

// close makes the reading goroutine's Read fail, so it returns.
func (t *timerFD) close() { _ = t.f.Close() }
