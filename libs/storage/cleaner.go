package storage

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// CleanerOptions configure a Cleaner.
type CleanerOptions struct {
	// Interval is how often every registered log is checked; zero means 30
	// seconds (Kafka's log.retention.check.interval.ms is 5 minutes; a
	// shorter period keeps disk use closer to retention.bytes).
	Interval time.Duration
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
}

// Cleaner is the background worker of a storage node: every interval it
// enforces retention on each registered log and compacts those whose
// cleanup.policy includes compact. One goroutine serves every log, so
// cleaning competes with the data path for at most one core.
type Cleaner struct {
	opts   CleanerOptions
	mu     sync.Mutex
	logs   map[*Log]struct{}
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}
}

// NewCleaner starts a Cleaner.
func NewCleaner(opts CleanerOptions) *Cleaner {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cleaner{opts: opts, logs: map[*Log]struct{}{}, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	go c.run(ctx)
	return c
}

// Add registers a log.
func (c *Cleaner) Add(l *Log) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs[l] = struct{}{}
}

// Remove unregisters a log; a pass already running on it finishes.
func (c *Cleaner) Remove(l *Log) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.logs, l)
}

// Trigger asks for a pass now instead of at the next interval.
func (c *Cleaner) Trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Close stops the Cleaner, cancelling a running compaction (which leaves
// the log as it was), and waits for it to exit.
func (c *Cleaner) Close() {
	c.cancel()
	<-c.done
}

func (c *Cleaner) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.RunOnce(ctx)
	}
}

// RunOnce runs one pass over every registered log and returns when done.
func (c *Cleaner) RunOnce(ctx context.Context) {
	c.mu.Lock()
	logs := make([]*Log, 0, len(c.logs))
	for l := range c.logs {
		logs = append(logs, l)
	}
	c.mu.Unlock()
	for _, l := range logs {
		if ctx.Err() != nil {
			return
		}
		if l.Err() != nil || l.isClosed() {
			continue
		}
		if _, err := l.EnforceRetention(); err != nil {
			c.opts.Logger.Warn("enforcing retention failed", "dir", l.Dir(), "err", err)
		}
		if l.Config().CleanupPolicy.Compact() {
			if _, err := l.Compact(ctx, false); err != nil && ctx.Err() == nil {
				c.opts.Logger.Warn("compaction failed", "dir", l.Dir(), "err", err)
			}
		}
	}
}
