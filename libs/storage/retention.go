package storage

import (
	"path/filepath"
	"slices"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// RetentionResult describes what EnforceRetention or DeleteRecordsBefore
// removed.
type RetentionResult struct {
	DeletedSegments int
	DeletedBytes    int64
	LogStartOffset  int64
	// ExpiredProducers counts the producer ids forgotten after
	// producer.id.expiration.ms.
	ExpiredProducers int
}

// EnforceRetention deletes whole segments from the front of the log while
// they are older than retention.ms (by their newest timestamp, or by when
// they were created if no record has one) or the log is larger than
// retention.bytes, when cleanup.policy includes delete; and, under any
// policy, segments wholly below the log start offset (after
// DeleteRecordsBefore). The active segment is rolled first if it has
// expired, so an idle partition's data goes too. The log start offset
// advances to the first remaining segment and is persisted. Readers of
// deleted segments keep their chunks until they release them.
func (l *Log) EnforceRetention() (RetentionResult, error) {
	if err := l.check(); err != nil {
		return RetentionResult{}, err
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	res, err := l.deleteSegments(true)
	if err == nil {
		res.ExpiredProducers = l.ExpireProducers()
	}
	return res, err
}

// DeleteRecordsBefore advances the log start offset to offset (Kafka's
// DeleteRecords): records below it are no longer readable, and segments
// wholly below it are deleted. The caller keeps offset at or below the high
// watermark. It returns the new log start offset.
func (l *Log) DeleteRecordsBefore(offset int64) (int64, error) {
	if err := l.check(); err != nil {
		return 0, err
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.appendMu.Lock()
	if l.closed {
		l.appendMu.Unlock()
		return 0, errClosed
	}
	if offset > l.leo {
		l.appendMu.Unlock()
		return 0, errs.New(errs.OffsetOutOfRange, "cannot delete records before %d: the log ends at %d", offset, l.leo)
	}
	if offset <= l.logStart {
		start := l.logStart
		l.appendMu.Unlock()
		return start, nil
	}
	l.mu.Lock()
	l.logStart = offset
	l.epochs.truncateFromStart(offset)
	l.mu.Unlock()
	l.appendMu.Unlock()
	if err := l.writeLogStart(offset); err != nil {
		return 0, l.fail("writing log start offset", err)
	}
	res, err := l.deleteSegments(false)
	if err != nil {
		return 0, err
	}
	return res.LogStartOffset, nil
}

// deleteSegments deletes segments from the front: those wholly below the log
// start, and with byPolicy those retention.ms and retention.bytes reject.
// syncMu must be held.
func (l *Log) deleteSegments(byPolicy bool) (RetentionResult, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return RetentionResult{}, errClosed
	}
	cfg := l.conf()
	now := l.clock.Now()
	nowMs := now.UnixMilli()
	timeOn := byPolicy && cfg.CleanupPolicy.Delete() && cfg.RetentionMs >= 0
	sizeOn := byPolicy && cfg.CleanupPolicy.Delete() && cfg.RetentionBytes >= 0
	newest := func(s *segment) int64 {
		if s.maxTS >= 0 {
			return s.maxTS
		}
		return s.created.UnixMilli()
	}
	expired := func(s *segment) bool { return timeOn && nowMs-newest(s) > cfg.RetentionMs }

	active := l.activeSegment()
	if active.size > 0 && (expired(active) || active.next <= l.logStart) {
		// Kafka rolls an expired active segment so retention can take it.
		if err := l.roll(l.leo, now); err != nil {
			return RetentionResult{}, err
		}
	}

	l.mu.Lock()
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	n := 0
	var deletedBytes int64
	for _, s := range l.segs[:len(l.segs)-1] {
		over := sizeOn && total-s.size >= cfg.RetentionBytes
		if !(expired(s) || over || s.next <= l.logStart) {
			break
		}
		total -= s.size
		deletedBytes += s.size
		n++
	}
	if n == 0 {
		start := l.logStart
		l.mu.Unlock()
		return RetentionResult{LogStartOffset: start}, nil
	}
	removed := slices.Clone(l.segs[:n])
	l.segs = slices.Clone(l.segs[n:])
	l.needSync = slices.DeleteFunc(l.needSync, func(s *segment) bool { return slices.Contains(removed, s) })
	if s := l.segs[0].base; s > l.logStart {
		// Persisted with the next recovery point: after a crash the log
		// start is at least the first segment's base anyway.
		l.logStart = s
		l.logStartDirty = true
	}
	l.epochs.truncateFromStart(l.logStart)
	l.producers.pruneAborted(l.logStart)
	l.dirDirty = true
	start := l.logStart
	first := l.segs[0].base
	l.mu.Unlock()
	l.removeSnapshots(func(off int64) bool { return off < first })

	for _, s := range removed {
		if err := s.remove(l.fs); err != nil {
			return RetentionResult{}, l.fail("deleting segment", err)
		}
	}
	l.log.Info("deleted old segments", "count", n, "bytes", deletedBytes, "log_start_offset", start)
	return RetentionResult{DeletedSegments: n, DeletedBytes: deletedBytes, LogStartOffset: start}, nil
}

// repairCheckpointLocked rewrites the recovery point when the segment it
// names is gone (retention, compaction) or it lies past the log end
// (truncation), so the next Open can use it. It never fsyncs data: the
// repaired point is one that is already durable. Every change that
// invalidates a recovery point keeps the data below min(old point, log end)
// durable, so the start of the last segment at or below that offset is a
// valid point (recovery then rescans at most that segment beyond the old
// point); a truncation, which fsyncs the cut file, keeps the exact end.
// syncMu must be held.
func (l *Log) repairCheckpointLocked() error {
	l.mu.RLock()
	rp, ok := l.ckpt, l.ckptValid
	valid := ok && rp.Offset <= l.leo && slices.ContainsFunc(l.segs, func(s *segment) bool {
		return s.base == rp.Segment && rp.Position <= s.size
	})
	var next recoveryPoint
	switch {
	case valid:
	case ok && rp.Offset >= l.leo:
		active := l.activeSegment()
		next = recoveryPoint{Offset: l.leo, Segment: active.base, Position: active.size}
	default:
		limit := l.leo
		if ok {
			limit = min(limit, rp.Offset)
		}
		b := l.segs[0].base
		for _, s := range l.segs {
			if s.base <= limit {
				b = s.base
			}
		}
		next = recoveryPoint{Offset: b, Segment: b, Position: 0}
	}
	l.mu.RUnlock()
	if valid {
		return nil
	}
	return l.writeRecoveryCheckpointLocked(next.Offset, next.Segment, next.Position)
}

// TruncateTo removes every batch that holds an offset at or after offset,
// for a follower whose log diverged from its new leader's (KIP-101: the
// offset comes from EndOffsetForEpoch on the leader, never from the
// follower's high watermark). A batch that straddles offset is removed
// whole, so the log end becomes that batch's base offset. The epoch cache
// and indexes are truncated too, and the truncation is made durable before
// TruncateTo returns. Readers holding chunks of the truncated bytes are
// waited for: chunks must be released promptly.
func (l *Log) TruncateTo(offset int64) error {
	if err := l.check(); err != nil {
		return err
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.appendMu.Lock()
	if l.closed {
		l.appendMu.Unlock()
		return errClosed
	}
	if offset >= l.leo {
		l.appendMu.Unlock()
		return nil
	}
	if offset < l.logStart {
		l.appendMu.Unlock()
		return l.resetLocked(offset)
	}
	err := l.truncateLocked(offset)
	if err == nil {
		err = l.reloadProducersLocked()
	}
	l.appendMu.Unlock()
	if err != nil {
		return err
	}
	return l.repairCheckpointLocked()
}

// truncateLocked does TruncateTo's work under syncMu and appendMu.
func (l *Log) truncateLocked(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ti := l.segmentFor(offset)
	for ti > 0 && l.segs[ti].base >= offset {
		ti--
	}
	ti = max(ti, 0)
	target := l.segs[ti]

	// Find the first batch holding an offset at or after offset.
	rd := batchReader{f: target.log, size: target.size}
	pos := int64(0)
	if target.base <= offset {
		pos, _ = target.startPosition(offset, func(p int64) []byte {
			b, _, _ := rd.batchAt(p)
			return b
		})
	}
	newLEO := offset
	for pos < target.size {
		b, _, err := rd.batchAt(pos)
		if err != nil {
			return l.fail("reading "+target.log.Name(), err)
		}
		if b == nil {
			break
		}
		h, _ := record.ParseBatchHeader(b)
		if h.LastOffset() >= offset {
			newLEO = min(offset, h.BaseOffset)
			break
		}
		pos += int64(h.Size())
	}
	newLEO = max(newLEO, target.base)

	// Mapped pages past the new end would fault in a reader's hands, so
	// wait for the readers of every map of the segment (the current one,
	// and shorter ones it replaced that a read may still walk) before
	// cutting the file.
	if pos < target.size {
		for _, mp := range target.retireMap() {
			<-mp.released
		}
	}
	if err := target.log.Truncate(pos); err != nil {
		return l.fail("truncating "+target.log.Name(), err)
	}
	if err := target.log.Sync(); err != nil {
		return l.fail("syncing "+target.log.Name(), err)
	}
	target.size = pos
	target.next = newLEO
	target.sealed = false
	for _, x := range []*index{target.offIdx, target.timeIdx} {
		if err := x.toHeap(); err != nil {
			return l.fail("unmapping index", err)
		}
	}
	if err := target.offIdx.truncateOffsetsFrom(pos); err != nil {
		return l.fail("truncating offset index", err)
	}
	if err := target.timeIdx.truncateTimesFrom(newLEO); err != nil {
		return l.fail("truncating time index", err)
	}
	// Recompute the largest timestamp and the bytes since the last index
	// entry from what remains after the last offset entry.
	target.maxTS, target.maxTSOff = -1, -1
	if ts, off, ok := target.timeIdx.lastTime(); ok {
		target.maxTS, target.maxTSOff = ts, off
	}
	from := int64(0)
	if _, p, ok := target.offIdx.lastOffset(); ok {
		from = p
	}
	for p := from; p < pos; {
		b, _, err := rd.batchAt(p)
		if err != nil || b == nil {
			break
		}
		h, _ := record.ParseBatchHeader(b)
		if h.MaxTimestamp > target.maxTS {
			target.maxTS, target.maxTSOff = h.MaxTimestamp, h.BaseOffset
		}
		p += int64(h.Size())
	}
	target.sinceIdx = pos - from

	removed := slices.Clone(l.segs[ti+1:])
	l.segs = l.segs[:ti+1]
	l.needSync = slices.DeleteFunc(l.needSync, func(s *segment) bool { return s == target || slices.Contains(removed, s) })
	for _, s := range removed {
		if err := s.remove(l.fs); err != nil {
			return l.fail("deleting segment", err)
		}
	}
	oldLEO := l.leo
	l.leo = newLEO
	// The target was synced above, and a durable point past it covered
	// everything before it: the durable point and the page-cache drop point
	// now end at the cut at most.
	if cut := (recoveryPoint{Offset: newLEO, Segment: target.base, Position: pos}); l.durablePos.Segment > target.base ||
		l.durablePos.Segment == target.base && l.durablePos.Position > pos {
		l.durablePos = cut
	}
	if l.cacheSeg > target.base || l.cacheSeg == target.base && l.cachePos > pos {
		l.cacheSeg, l.cachePos = target.base, pos
	}
	l.epochs.truncateFromEnd(newLEO)
	l.cleanedTo = min(l.cleanedTo, newLEO)
	l.dirDirty = true
	if l.durable.Load() > newLEO {
		l.durable.Store(newLEO)
	}
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, epochCheckpointFile), l.epochs.encode()); err != nil {
		return l.fail("writing leader epoch checkpoint", err)
	}
	l.epochs.dirty = false
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail("syncing log directory", err)
	}
	l.dirDirty = false
	l.log.Info("truncated log", "from", oldLEO, "to", newLEO)
	return nil
}

// TruncateFullyAndStartAt deletes every segment and restarts the log empty at
// offset, for a follower that has fallen below its leader's log start or
// must discard everything. The epoch cache is cleared.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if err := l.check(); err != nil {
		return err
	}
	if offset < 0 {
		return errs.New(errs.InvalidRequest, "offset %d is negative", offset)
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.resetLocked(offset)
}

// resetLocked empties the log at offset. syncMu must be held.
func (l *Log) resetLocked(offset int64) error {
	l.appendMu.Lock()
	if l.closed {
		l.appendMu.Unlock()
		return errClosed
	}
	l.mu.Lock()
	old := l.segs
	l.segs = nil
	for _, s := range old {
		if err := s.remove(l.fs); err != nil {
			l.mu.Unlock()
			l.appendMu.Unlock()
			return l.fail("deleting segment", err)
		}
	}
	s, err := createSegment(l.fs, l.dir, offset, l.clock.Now(), l.mapHint())
	if err != nil {
		l.mu.Unlock()
		l.appendMu.Unlock()
		return l.fail("creating segment", err)
	}
	l.segs = []*segment{s}
	l.needSync = nil
	l.leo, l.logStart, l.cleanedTo = offset, offset, offset
	l.epochs.clear()
	l.producers = newProducerState(offset)
	l.removeSnapshots(func(int64) bool { return true })
	l.durable.Store(offset)
	l.durablePos = recoveryPoint{Offset: offset, Segment: s.base}
	l.cacheSeg, l.cachePos = s.base, 0
	l.dirDirty = true
	l.mu.Unlock()
	l.appendMu.Unlock()
	if err := l.writeLogStart(offset); err != nil {
		return l.fail("writing log start offset", err)
	}
	rp, err := l.flushLocked()
	if err != nil {
		return err
	}
	return l.writeRecoveryCheckpointLocked(rp.Offset, rp.Segment, rp.Position)
}
