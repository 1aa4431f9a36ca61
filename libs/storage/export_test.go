package storage

// abandon drops the log as a killed process would: no flush, no recovery
// point, no clean-shutdown marker. Written bytes stay in the page cache, as
// they do when a process dies; file handles are closed so tests do not leak
// them.
func (l *Log) abandon() {
	l.fl.stop()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.appendMu.Lock()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.appendMu.Unlock()
	l.fl.failWaiters(errClosed)
	l.closeSegments()
}
