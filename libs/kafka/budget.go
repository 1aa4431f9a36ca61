package kafka

import (
	"context"
	"errors"
	"sync"
)

// budget bounds the bytes of request frames a process holds at once, over
// all its connections (Kafka's queued.max.request.bytes): a connection
// reserves a frame's size before it allocates the frame and gives it back
// once the request's answer is ready (decoded record batches alias the
// frame until then). A reader that finds the budget spent stops reading
// its socket until others give bytes back, so many connections sending
// large requests at once wait instead of exhausting memory.
type budget struct {
	mu    sync.Mutex
	avail int64
	// freed is closed and replaced whenever bytes come back.
	freed chan struct{}
}

func newBudget(n int64) *budget { return &budget{avail: n, freed: make(chan struct{})} }

var errStopped = errors.New("kafka listener stopping")

// acquire reserves n bytes, waiting while they are not free, until ctx
// ends or stop closes. Waiters are not served in order: a large frame can
// wait behind smaller ones, never forever while requests finish.
func (b *budget) acquire(ctx context.Context, stop <-chan struct{}, n int64) error {
	for {
		b.mu.Lock()
		if b.avail >= n {
			b.avail -= n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errStopped
		}
	}
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.avail += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
