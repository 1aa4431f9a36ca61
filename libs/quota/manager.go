package quota

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Options configure a Manager. The zero value is usable: Kafka's defaults
// (11 samples of 1 s), no logger output, no metrics.
type Options struct {
	// WindowNum is the number of samples a rate is measured over (Kafka's
	// quota.window.num, default 11).
	WindowNum int
	// WindowSize is the span of one sample (Kafka's
	// quota.window.size.seconds, default 1 s).
	WindowSize time.Duration
	// Logger receives quota table changes and connection refusals.
	Logger *slog.Logger
	// Now is the clock; tests inject one. Default time.Now.
	Now func() time.Time
}

// Manager enforces a process's quotas: it holds the current Table and a
// sensor per matched entity, and answers how long a client must back off.
type Manager struct {
	opts  Options
	table atomic.Pointer[tableState]
}

type tableState struct {
	t        *Table
	revision int64
}

// NewManager returns a Manager with an empty table (nothing is throttled).
func NewManager(opts Options) *Manager {
	if opts.WindowNum <= 0 {
		opts.WindowNum = 11
	}
	if opts.WindowSize <= 0 {
		opts.WindowSize = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts}
	m.table.Store(&tableState{t: NewTable(nil)})
	return m
}

// SetTable replaces the quota table; revision is the metadata revision it
// came from, for logs. The next request of every connection sees it.
func (m *Manager) SetTable(t *Table, revision int64) {
	if t == nil {
		t = NewTable(nil)
	}
	m.table.Store(&tableState{t: t, revision: revision})
}

// Table returns the current quota table.
func (m *Manager) Table() *Table { return m.table.Load().t }
