package storage

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// PageCache bounds how many bytes of a node's logs stay in the kernel's page
// cache. Left alone, the kernel keeps every written page until memory runs
// out and reclaim recycles the oldest. On a virtual machine whose balloon
// reports free pages to the host (Firecracker, and others with virtio's
// free page reporting), memory that stayed free belongs to the host again,
// and the first write into each such page faults in the host: copying a
// GiB into fresh page-cache pages measured 1.8-2.0 s of system time there,
// against 0.33 s into pages dropped moments before (docs/performance.md,
// "Sustained rate"). A budget makes the node recycle its own pages: once
// the logs hold more than the budget, the oldest durable bytes of the logs
// holding most are dropped, down to an even share, never the newest Keep
// bytes of a log, which tailing consumers and followers read.
//
// A consumer reading further back than the budget reaches reads from disk,
// as it would once the kernel evicted the data; the budget trades those
// reads for cheaper writes. Nil (no budget) leaves the page cache to the
// kernel.
type PageCache struct {
	budget, keep int64
	interval     time.Duration

	trimMu  sync.Mutex // one Trim at a time: it alone moves the logs' drop points
	mu      sync.Mutex
	logs    map[*Log]struct{}
	stop    chan struct{}
	stopped chan struct{}

	// dropped counts the bytes given back to the kernel.
	dropped atomic.Int64
}

// PageCacheOptions configure a PageCache.
type PageCacheOptions struct {
	// BudgetBytes is how many bytes of log data the node leaves cached; 0
	// or less means no budget.
	BudgetBytes int64
	// KeepBytes is how many of the newest bytes of each log are never
	// dropped; zero means 64 MiB.
	KeepBytes int64
	// Interval is how often the budget is checked; zero means 1 s.
	Interval time.Duration
}

// NewPageCache returns a budget, or nil (no budget) when BudgetBytes is 0 or
// less.
func NewPageCache(o PageCacheOptions) *PageCache {
	if o.BudgetBytes <= 0 {
		return nil
	}
	if o.KeepBytes <= 0 {
		o.KeepBytes = 64 << 20
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	return &PageCache{budget: o.BudgetBytes, keep: o.KeepBytes, interval: o.Interval, logs: map[*Log]struct{}{}}
}

// Budget returns the budget in bytes (0 for nil).
func (c *PageCache) Budget() int64 {
	if c == nil {
		return 0
	}
	return c.budget
}

// DroppedBytes returns how many bytes of log data the budget has dropped
// from the page cache so far.
func (c *PageCache) DroppedBytes() int64 {
	if c == nil {
		return 0
	}
	return c.dropped.Load()
}

// register adds an open log. The checking loop runs while any log is
// registered, so a budget shared by tests or restarted roles leaks nothing.
func (c *PageCache) register(l *Log) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs[l] = struct{}{}
	if c.stop == nil {
		c.stop, c.stopped = make(chan struct{}), make(chan struct{})
		go c.run(c.stop, c.stopped)
	}
}

// unregister removes a closed log, stopping the loop after the last one.
func (c *PageCache) unregister(l *Log) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.logs, l)
	var stop, stopped chan struct{}
	if len(c.logs) == 0 && c.stop != nil {
		stop, stopped = c.stop, c.stopped
		c.stop, c.stopped = nil, nil
	}
	c.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}

func (c *PageCache) run(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.Trim()
		}
	}
}

// Trim brings the cached bytes of the registered logs under the budget, as
// far as their newest Keep bytes allow. The loop calls it every Interval.
func (c *PageCache) Trim() {
	if c == nil {
		return
	}
	c.trimMu.Lock()
	defer c.trimMu.Unlock()
	c.mu.Lock()
	logs := make([]*Log, 0, len(c.logs))
	for l := range c.logs {
		logs = append(logs, l)
	}
	c.mu.Unlock()
	cached := make([]int64, len(logs))
	var total int64
	for i, l := range logs {
		cached[i] = l.cachedBytes()
		total += cached[i]
	}
	if total <= c.budget {
		return
	}
	// Every log is cut to the same level, the highest that fits the budget,
	// so one busy partition does not evict the tails of the quiet ones.
	level := fitLevel(cached, c.budget, c.keep)
	for i, l := range logs {
		if over := cached[i] - level; over > 0 {
			c.dropped.Add(l.dropCache(over, c.keep))
		}
	}
}

// fitLevel returns the largest level, at least keep, for which the sum of
// min(cached, level) fits budget (keep if none does).
func fitLevel(cached []int64, budget, keep int64) int64 {
	sorted := slices.Clone(cached)
	slices.Sort(sorted)
	// Below the i-th smallest, the logs from i on are cut to the level and
	// those before keep what they have.
	var below int64
	for i, c := range sorted {
		n := int64(len(sorted) - i)
		if level := (budget - below) / n; level < c {
			return max(level, keep)
		}
		below += c
	}
	return max(sorted[len(sorted)-1], keep)
}

// cachedBytes returns the bytes between the log's page-cache drop point and
// its end.
func (l *Log) cachedBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	var n int64
	for _, s := range l.segs {
		switch {
		case s.base > l.cacheSeg:
			n += s.size
		case s.base == l.cacheSeg:
			n += max(s.size-l.cachePos, 0)
		}
	}
	return n
}

// dropCache gives up to n of the oldest cached bytes of the log back to the
// kernel, never the newest keep bytes, and returns how many it dropped.
// Only bytes an fsync made durable are dropped: the kernel would keep dirty
// pages anyway, and after a failed write-back the page cache holds the only
// copy that Reopen rewrites. The log is flushed first when the bytes to drop
// are not durable yet. Called by PageCache.Trim only.
func (l *Log) dropCache(n, keep int64) int64 {
	type span struct {
		seg      *segment
		mp       *segMap
		from, to int64
	}
	collect := func(n int64) (spans []span, short bool) {
		l.syncMu.Lock()
		defer l.syncMu.Unlock()
		l.mu.RLock()
		defer l.mu.RUnlock()
		if l.closed {
			return nil, false
		}
		var total int64
		for _, s := range l.segs {
			if s.base > l.cacheSeg {
				total += s.size
			} else if s.base == l.cacheSeg {
				total += max(s.size-l.cachePos, 0)
			}
		}
		left := min(n, total-keep)
		dp := l.durablePos
		for _, s := range l.segs {
			if left <= 0 {
				break
			}
			if s.base < l.cacheSeg {
				continue
			}
			from := int64(0)
			if s.base == l.cacheSeg {
				from = min(l.cachePos, s.size)
			}
			durable := s.size // a segment before the durable point was synced whole
			if s.base == dp.Segment {
				durable = min(dp.Position, s.size)
			} else if s.base > dp.Segment {
				durable = 0
			}
			to := min(from+left, durable)
			if to < from+left && to < s.size {
				short = true
			}
			if to > from {
				sp := span{seg: s, from: from, to: to}
				s.mapMu.Lock()
				if s.mp != nil {
					s.mp.acquire()
					sp.mp = s.mp
				}
				s.mapMu.Unlock()
				spans = append(spans, sp)
				left -= to - from
				l.cacheSeg, l.cachePos = s.base, to
			}
			if to < s.size {
				break
			}
		}
		return spans, short
	}
	drop := func(spans []span) int64 {
		var done int64
		for _, sp := range spans {
			if sp.mp != nil {
				if d, ok := sp.mp.m.(vfs.CacheDropper); ok {
					_ = d.DropCache(sp.from, sp.to-sp.from) // an unmapped page stays correct, only cached
				}
				sp.mp.release()
			}
			// Counted as done even if the file was closed meanwhile (the
			// only failure): its pages go with it.
			if d, ok := sp.seg.log.(vfs.CacheDropper); ok {
				_ = d.DropCache(sp.from, sp.to-sp.from)
				done += sp.to - sp.from
			}
		}
		return done
	}
	spans, short := collect(n)
	done := drop(spans)
	// The checkpoint is persisted only as often as the flusher would.
	if short && done < n && l.flush(false) == nil {
		spans, _ = collect(n - done)
		done += drop(spans)
	}
	return done
}
