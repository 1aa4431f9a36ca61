package txncoord

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
)

// pidBlock is a range of producer ids the controller handed to this
// process, [start, end), of which [next, end) are left.
type pidBlock struct{ start, next, end int64 }

func (b pidBlock) left() int64 { return b.end - b.next }

// fetchBlock asks the controller for the next block of producer ids.
type fetchBlock func(ctx context.Context) (pidBlock, error)

// pidManager hands out producer ids from blocks the controller allocates
// (KIP-730). It asks for the next block in the background once the current
// one is down to a tenth, so InitProducerId rarely waits on the controller;
// an id is never handed out twice, and ids of a block this process did not
// use are skipped for good (a gap, never a reuse).
type pidManager struct {
	fetch  fetchBlock
	logger *slog.Logger

	mu       sync.Mutex
	cur      pidBlock
	prefetch *pidBlock     // the next block, once fetched
	inFlight bool          // a fetch is running
	arrived  chan struct{} // closed when a fetch ends
	lastErr  error         // the last fetch's error, nil once one succeeds
	closed   bool
	ctx      context.Context
	cancel   context.CancelFunc
}

func newPIDManager(fetch fetchBlock, logger *slog.Logger) *pidManager {
	ctx, cancel := context.WithCancel(context.Background())
	return &pidManager{fetch: fetch, logger: logger, arrived: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// next returns a fresh producer id, waiting for a block if none is left.
// While the controller cannot be reached it returns the last fetch's error
// (COORDINATOR_LOAD_IN_PROGRESS if there was none yet) when ctx ends.
func (m *pidManager) next(ctx context.Context) (int64, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return -1, errs.New(errs.NodeNotReady, "the transaction coordinator is stopping")
		}
		if m.cur.left() == 0 && m.prefetch != nil {
			m.cur, m.prefetch = *m.prefetch, nil
		}
		if m.cur.left() > 0 {
			id := m.cur.next
			m.cur.next++
			if m.cur.left() <= (m.cur.end-m.cur.start)/10 {
				m.startFetchLocked()
			}
			m.mu.Unlock()
			return id, nil
		}
		m.startFetchLocked()
		wait, lastErr := m.arrived, m.lastErr
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			if lastErr == nil {
				lastErr = errs.New(errs.CoordinatorLoadInProgress, "waiting for a block of producer ids from the controller")
			}
			return -1, lastErr
		}
	}
}

// warmUp fetches a first block in the background, so the first
// InitProducerId does not wait on the controller.
func (m *pidManager) warmUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur.left() == 0 {
		m.startFetchLocked()
	}
}

// startFetchLocked starts a background fetch unless one is running or a
// block is already waiting.
func (m *pidManager) startFetchLocked() {
	if m.inFlight || m.prefetch != nil || m.closed {
		return
	}
	m.inFlight = true
	go m.fetchLoop()
}

// fetchLoop fetches one block, retrying with backoff until it succeeds or
// the manager closes.
func (m *pidManager) fetchLoop() {
	delay := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		b, err := m.fetch(ctx)
		cancel()
		m.mu.Lock()
		if err == nil && b.left() <= 0 {
			err = errs.New(errs.UnknownServerError, "the controller allocated an empty block of producer ids [%d, %d)", b.next, b.end)
		}
		if err == nil {
			m.prefetch, m.inFlight, m.lastErr = &b, false, nil
		} else {
			m.lastErr = err
		}
		close(m.arrived) // waiters look again, or see the error
		m.arrived = make(chan struct{})
		closed := m.closed
		m.mu.Unlock()
		if err == nil {
			m.logger.Debug("producer id block fetched", slog.Int64("start", b.next), slog.Int64("end", b.end))
			return
		}
		if closed || errors.Is(m.ctx.Err(), context.Canceled) {
			return
		}
		if attempt%20 == 0 {
			m.logger.Warn("cannot fetch producer ids from the controller; retrying", log.Err(err))
		}
		select {
		case <-time.After(delay):
		case <-m.ctx.Done():
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// close stops fetching; next fails from then on.
func (m *pidManager) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
}
