package storage

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// load opens the segments of the directory and recovers the log. It runs in
// Open, before any other goroutine can see the log.
func (l *Log) load() error {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	var bases, swaps []int64
	for _, name := range names {
		path := filepath.Join(l.dir, name)
		switch {
		case strings.HasSuffix(name, ".tmp"), strings.HasSuffix(name, cleanedSuffix):
			// An interrupted atomic write or compaction: the old state is
			// intact, so the leftover just goes.
			if err := removeIfExists(l.fs, path); err != nil {
				return err
			}
		case strings.HasSuffix(name, logSuffix+swapSuffix):
			if base, ok := parseSegmentFileName(name, logSuffix+swapSuffix); ok {
				swaps = append(swaps, base)
			}
		case strings.HasSuffix(name, swapSuffix):
			// Indexes of swapped segments are rebuilt from the log.
			if err := removeIfExists(l.fs, path); err != nil {
				return err
			}
		default:
			if base, ok := parseSegmentFileName(name, logSuffix); ok {
				bases = append(bases, base)
			}
		}
	}
	rebuilt := map[int64]bool{}
	for _, base := range swaps {
		if bases, err = l.completeSwap(base, bases); err != nil {
			return err
		}
		rebuilt[base] = true
	}
	slices.Sort(bases)
	bases = slices.Compact(bases)
	for _, name := range names {
		for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
			if base, ok := parseSegmentFileName(name, suffix); ok && !slices.Contains(bases, base) {
				if err := removeIfExists(l.fs, filepath.Join(l.dir, name)); err != nil {
					return err
				}
			}
		}
	}

	_, statErr := l.fs.Stat(filepath.Join(l.dir, cleanShutdownFile))
	clean := statErr == nil
	rp, rpOK := l.readRecoveryPoint()
	logStart, logStartOK := readOffsetFile(l.fs, filepath.Join(l.dir, logStartCheckpointFile))
	l.cleanedTo, _ = readOffsetFile(l.fs, filepath.Join(l.dir, cleanerCheckpointFile))
	epochsOK := true
	if data, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, epochCheckpointFile)); err == nil {
		entries, derr := decodeEpochs(data)
		if derr != nil {
			l.log.Warn("leader epoch checkpoint unreadable, rebuilding it from the log", "err", derr)
			epochsOK = false
		}
		l.epochs.entries = entries
	} else if len(bases) > 0 {
		epochsOK = false
	}

	if len(bases) == 0 {
		start := int64(0)
		if logStartOK {
			start = logStart
		}
		s, err := createSegment(l.fs, l.dir, start, l.clock.Now(), l.mapHint())
		if err != nil {
			return err
		}
		l.segs = []*segment{s}
		l.logStart, l.leo = start, start
		l.epochs.dirty = true
		l.durable.Store(start)
		return l.finishOpen(true)
	}

	// Where to scan from: nothing after a clean shutdown, the recovery point
	// after a crash, everything when there is no usable recovery point or
	// epoch cache.
	scanSeg, scanPos, scanOff := 0, int64(0), bases[0]
	noScan := false
	if rpOK && epochsOK {
		if i := slices.Index(bases, rp.Segment); i >= 0 {
			size, err := l.fileSize(filepath.Join(l.dir, segmentFileName(rp.Segment, logSuffix)))
			if err != nil {
				return err
			}
			if rp.Position <= size && !rebuilt[rp.Segment] {
				scanSeg, scanPos, scanOff = i, rp.Position, rp.Offset
				noScan = clean && i == len(bases)-1 && rp.Position == size
			}
		} else {
			// The segment the recovery point names is gone: retention
			// deleted it or compaction merged it. Everything below the
			// recovery point is still durable, so scan from the start of
			// the last segment at or below it. (This is why deleting
			// segments need not rewrite the recovery point.)
			for j, b := range bases {
				if b <= rp.Offset {
					scanSeg, scanOff = j, b
				}
			}
		}
	}
	if !epochsOK {
		l.epochs.entries = nil
	}

	for i, base := range bases {
		s, err := l.openSegment(base, i < scanSeg || (noScan && i < len(bases)-1))
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s)
	}
	for i := 0; i+1 < len(l.segs); i++ {
		l.segs[i].next = l.segs[i+1].base
	}

	// Segments below the recovery point are durable: their indexes are
	// checked and, if damaged, rebuilt by walking batch headers; a segment
	// that cannot be walked there is damage below what was acknowledged as
	// durable, which recovery must not silently cut away.
	for i := 0; i < scanSeg; i++ {
		if err := l.loadTrusted(l.segs[i], rebuilt[l.segs[i].base]); err != nil {
			return err
		}
	}
	if noScan {
		s := l.activeSegment()
		s.next = rp.Offset
		if err := l.loadTrusted(s, false); err != nil {
			return err
		}
		s.sealed = false
		if err := s.offIdx.toHeap(); err != nil {
			return err
		}
		if err := s.timeIdx.toHeap(); err != nil {
			return err
		}
		s.next = rp.Offset
		if _, lastPos, ok := s.offIdx.lastOffset(); ok {
			s.sinceIdx = s.size - lastPos
		} else {
			s.sinceIdx = s.size
		}
		l.leo = rp.Offset
		l.durable.Store(l.leo)
	} else {
		// Only what the recovery point vouches for is known durable; the
		// recovered tail may exist only in the page cache of the crashed
		// process's machine, so finishOpen fsyncs it before claiming it.
		l.durable.Store(scanOff)
		if err := l.recover(scanSeg, scanPos, scanOff); err != nil {
			return err
		}
		l.durable.Store(min(l.durable.Load(), l.leo))
	}

	l.logStart = l.segs[0].base
	if logStartOK && logStart > l.logStart {
		l.logStart = logStart
	}
	if l.logStart > l.leo {
		// The log start was advanced past data the crash then lost.
		if err := l.resetTo(l.logStart); err != nil {
			return err
		}
		l.durable.Store(l.leo)
	}
	l.epochs.truncateFromStart(l.logStart)
	l.epochs.truncateFromEnd(l.leo)
	return l.finishOpen(noScan)
}

// finishOpen removes the clean-shutdown marker (durably, so a crash from now
// on is seen as one) and, after a recovery, persists the new recovery point.
func (l *Log) finishOpen(skipCheckpoint bool) error {
	marker := filepath.Join(l.dir, cleanShutdownFile)
	if _, err := l.fs.Stat(marker); err == nil {
		if err := l.fs.Remove(marker); err != nil {
			return err
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	if skipCheckpoint && !l.epochs.dirty {
		active := l.activeSegment()
		l.ckpt, l.ckptValid = recoveryPoint{Offset: l.leo, Segment: active.base, Position: active.size}, true
		l.ckptAt = time.Now()
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	l.dirDirty = true
	l.mu.Unlock()
	rp, err := l.flushLocked()
	if err != nil {
		return err
	}
	return l.writeRecoveryCheckpointLocked(rp.Offset, rp.Segment, rp.Position)
}

func (l *Log) readRecoveryPoint() (recoveryPoint, bool) {
	data, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, recoveryCheckpointFile))
	if err != nil {
		return recoveryPoint{}, false
	}
	return decodeRecoveryPoint(data)
}

func (l *Log) fileSize(path string) (int64, error) {
	fi, err := l.fs.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// openSegment opens an existing segment's files. Indexes of sealed,
// durable segments are mapped; others are read to the heap.
func (l *Log) openSegment(base int64, mapped bool) (*segment, error) {
	s := &segment{base: base, dir: l.dir, next: base, maxTS: -1, maxTSOff: -1, created: l.clock.Now(), mapHint: l.mapHint()}
	f, err := l.fs.OpenFile(s.path(logSuffix), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s.log = f
	if s.size, err = f.Size(); err != nil {
		_ = f.Close() // reporting the size error
		return nil, err
	}
	oi, err := l.fs.OpenFile(s.path(indexSuffix), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		_ = f.Close() // reporting the open error
		return nil, err
	}
	ti, err := l.fs.OpenFile(s.path(timeIndexSuffix), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		_ = f.Close() // reporting the open error
		_ = oi.Close()
		return nil, err
	}
	if s.offIdx, err = loadIndex(oi, offsetEntrySize, base, mapped); err == nil {
		s.timeIdx, err = loadIndex(ti, timeEntrySize, base, mapped)
	}
	if err != nil {
		_ = f.Close() // reporting the load error
		_ = oi.Close()
		_ = ti.Close()
		return nil, err
	}
	s.sealed = mapped
	return s, nil
}

// loadTrusted checks a durable segment's indexes and rebuilds them by a
// header walk if they are damaged or missing.
func (l *Log) loadTrusted(s *segment, forceRebuild bool) error {
	s.sealed = true
	okOff := validOffsetEntries(s.offIdx.buf, s.base, s.size) == s.offIdx.len()
	okTime := validTimeEntries(s.timeIdx.buf, s.base, s.next) == s.timeIdx.len()
	sparse := s.offIdx.len() == 0 && s.size > 2*int64(max(l.conf().IndexIntervalBytes, record.BatchHeaderSize))
	noTime := s.timeIdx.len() == 0 && s.size > 0
	if okOff && okTime && !sparse && !noTime && !forceRebuild {
		if ts, off, ok := s.timeIdx.lastTime(); ok {
			s.maxTS, s.maxTSOff = ts, off
		}
		return nil
	}
	l.log.Info("rebuilding segment indexes", "segment", s.base)
	if err := s.offIdx.truncateEntries(0); err != nil {
		return err
	}
	if err := s.timeIdx.truncateEntries(0); err != nil {
		return err
	}
	s.sinceIdx = 0
	next := s.next
	st := scanState{prevLast: s.base - 1, prevEpoch: math.MinInt32}
	end, reason, err := l.scanSegment(s, 0, &st)
	if err != nil {
		return err
	}
	if end != s.size {
		return errs.New(errs.StorageError, "segment %d is damaged at byte %d below the recovery point: %s", s.base, end, reason)
	}
	s.next = next
	s.addTimeEntry()
	if err := s.offIdx.seal(); err != nil {
		return err
	}
	return s.timeIdx.seal()
}

// scanState carries what the scan of one segment needs from the previous
// one.
type scanState struct {
	prevLast  int64
	prevEpoch int32
	verify    bool        // check CRCs (recovery) or only structure (index rebuild)
	epochs    *epochCache // assign epochs seen, if set
}

// scanSegment walks the batches of s from byte pos, adding index entries,
// and returns the position after the last good batch with the reason it
// stopped early ("" at the end of the file). A read error is returned as
// err.
func (l *Log) scanSegment(s *segment, pos int64, st *scanState) (int64, string, error) {
	rd := batchReader{f: s.log, size: s.size}
	for pos < s.size {
		b, reason, err := rd.batchAt(pos)
		if err != nil {
			return pos, "", err
		}
		if b == nil {
			return pos, reason, nil
		}
		var h record.BatchHeader
		if st.verify {
			h, err = record.CheckBatch(b, replicaChecks)
			if err != nil {
				return pos, err.Error(), nil
			}
		} else {
			h, _ = record.ParseBatchHeader(b)
			if h.Magic != record.Magic || h.LastOffsetDelta < 0 {
				return pos, "bad batch header", nil
			}
		}
		switch {
		case h.BaseOffset <= st.prevLast:
			return pos, "batch offsets do not increase", nil
		case h.PartitionLeaderEpoch < st.prevEpoch:
			return pos, "leader epochs decrease", nil
		case h.LastOffset()-s.base > math.MaxUint32 || pos > math.MaxUint32:
			return pos, "batch beyond the segment's 32-bit index range", nil
		}
		l.indexBatch(s, &h, pos)
		if st.epochs != nil && h.PartitionLeaderEpoch >= 0 {
			st.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset)
		}
		st.prevLast, st.prevEpoch = h.LastOffset(), h.PartitionLeaderEpoch
		s.next = h.NextOffset()
		pos += int64(h.Size())
	}
	return pos, "", nil
}

// indexBatch updates s's indexes and largest timestamp for a batch written
// at pos. Called under mu (or before the log is shared).
func (l *Log) indexBatch(s *segment, h *record.BatchHeader, pos int64) {
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSOff = h.MaxTimestamp, h.BaseOffset
	}
	if s.sinceIdx >= int64(l.conf().IndexIntervalBytes) {
		if _, last, ok := s.offIdx.lastOffset(); !ok || pos > last {
			s.offIdx.appendOffset(h.BaseOffset, pos)
			s.addTimeEntry()
			s.sinceIdx = 0
		}
	}
	s.sinceIdx += int64(h.Size())
}

// addTimeEntry records the segment's largest timestamp in its time index if
// it grew since the last entry. It is also called when a segment is sealed,
// so a sealed segment's last time entry is its largest timestamp, which
// retention reads.
func (s *segment) addTimeEntry() {
	if s.maxTS < 0 {
		return
	}
	if ts, _, ok := s.timeIdx.lastTime(); ok && ts >= s.maxTS {
		return
	}
	s.timeIdx.appendTime(s.maxTS, s.maxTSOff)
}

// recover scans from segment index si, byte pos (recovery point offset off)
// to the end of the log, truncating at the first batch that fails
// verification and deleting every segment after it.
func (l *Log) recover(si int, pos, off int64) error {
	// Epoch order is checked within the scanned tail only: the cache may
	// hold entries for data the crash lost, which truncateFromEnd drops.
	st := scanState{prevEpoch: math.MinInt32, verify: true, epochs: &l.epochs}
	truncated := false
	for i := si; i < len(l.segs); i++ {
		s := l.segs[i]
		from := int64(0)
		st.prevLast = s.base - 1
		if i == si && pos > 0 {
			// Trust index entries below the recovery point; rescan from the
			// last of them, so the segment's largest timestamp is exact.
			if err := s.offIdx.truncateEntries(validOffsetEntries(s.offIdx.buf, s.base, pos)); err != nil {
				return err
			}
			if err := s.offIdx.truncateOffsetsFrom(pos); err != nil {
				return err
			}
			if err := s.timeIdx.truncateEntries(validTimeEntries(s.timeIdx.buf, s.base, off)); err != nil {
				return err
			}
			if lastOff, lastPos, ok := s.offIdx.lastOffset(); ok {
				from = lastPos
				st.prevLast = lastOff - 1
			}
			if ts, tOff, ok := s.timeIdx.lastTime(); ok {
				s.maxTS, s.maxTSOff = ts, tOff
			}
		} else {
			if err := s.offIdx.truncateEntries(0); err != nil {
				return err
			}
			if err := s.timeIdx.truncateEntries(0); err != nil {
				return err
			}
			s.maxTS, s.maxTSOff = -1, -1
		}
		if i > si && s.base <= l.segs[i-1].next-1 {
			// A segment that starts inside its predecessor is debris.
			if err := l.checkCut(i, 0); err != nil {
				return err
			}
			l.segs = l.removeFrom(i)
			truncated = true
			break
		}
		s.sinceIdx = 0
		s.next = s.base
		end, reason, err := l.scanSegment(s, from, &st)
		if err != nil {
			return err
		}
		l.recoveryScanned += end - from
		if i == si && end < pos {
			// Damage below the recovery point.
			return errs.New(errs.StorageError, "segment %d is damaged at byte %d below the recovery point %d: %s", s.base, end, pos, reason)
		}
		if end < s.size {
			if err := l.checkCut(i, end); err != nil {
				return err
			}
			l.log.Warn("truncating corrupt or torn log tail", "segment", s.base, "position", end, "size", s.size, "reason", reason)
			if err := s.log.Truncate(end); err != nil {
				return err
			}
			s.size = end
			l.segs = l.removeFrom(i + 1)
			truncated = true
		}
		if i < len(l.segs)-1 {
			s.addTimeEntry()
			if err := s.offIdx.seal(); err != nil {
				return err
			}
			if err := s.timeIdx.seal(); err != nil {
				return err
			}
			s.sealed = true
			l.needSync = append(l.needSync, s)
		}
	}
	active := l.activeSegment()
	active.sealed = false
	l.leo = active.next
	l.dirDirty = l.dirDirty || truncated
	l.log.Info("recovered log after an unclean shutdown", "scanned_bytes", l.recoveryScanned,
		"log_end_offset", l.leo, "truncated", truncated)
	return nil
}

// checkCut refuses, in the scratch log of Reopen, to cut segment i at byte
// end (and delete the segments after it) when that takes bytes the log
// being reopened had published: its readers may still hold them mapped,
// and a page cut from under a map faults (SIGBUS) when touched. Only a
// torn append past the published end may be cut there; damage below it
// keeps the log offline until a restart, whose recovery runs before any
// reader.
func (l *Log) checkCut(i int, end int64) error {
	for j, s := range l.segs[i:] {
		at := int64(0)
		if j == 0 {
			at = end
		}
		if p := l.published[s.base]; at < p {
			return errs.New(errs.StorageError, "recovery would cut segment %d at byte %d, below the %d bytes readers were given before the log went offline; "+
				"it stays offline: restart the node", s.base, at, p)
		}
	}
	return nil
}

// removeFrom deletes segments i and later and returns the remaining list.
// Used only while opening.
func (l *Log) removeFrom(i int) []*segment {
	for _, s := range l.segs[i:] {
		if err := s.remove(l.fs); err != nil {
			l.log.Warn("removing segment after a corrupt tail", "segment", s.base, "err", err)
		}
	}
	return l.segs[:i]
}

// completeSwap finishes a compaction swap interrupted by a crash: the
// .log.swap file is complete and durable (it was renamed from .cleaned
// after its fsync), so the segments it replaces are deleted and it takes
// their place. Its indexes are rebuilt.
func (l *Log) completeSwap(base int64, bases []int64) ([]int64, error) {
	swapPath := filepath.Join(l.dir, segmentFileName(base, logSuffix+swapSuffix))
	f, err := l.fs.OpenFile(swapPath, os.O_RDONLY, 0)
	if err != nil {
		return bases, err
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close() // reporting the size error
		return bases, err
	}
	rd := batchReader{f: f, size: size}
	last := base - 1
	for pos := int64(0); pos < size; {
		b, _, err := rd.batchAt(pos)
		if err != nil || b == nil {
			break
		}
		h, _ := record.ParseBatchHeader(b)
		last = h.LastOffset()
		pos += int64(h.Size())
	}
	_ = f.Close() // read-only
	var keep []int64
	for _, b := range bases {
		if b >= base && b <= last {
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				if err := removeIfExists(l.fs, filepath.Join(l.dir, segmentFileName(b, suffix))); err != nil {
					return bases, err
				}
			}
			continue
		}
		keep = append(keep, b)
	}
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		if err := removeIfExists(l.fs, filepath.Join(l.dir, segmentFileName(base, suffix))); err != nil {
			return bases, err
		}
	}
	if err := l.fs.Rename(swapPath, filepath.Join(l.dir, segmentFileName(base, logSuffix))); err != nil {
		return bases, err
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return bases, err
	}
	l.log.Info("completed an interrupted compaction swap", "segment", base)
	return append(keep, base), nil
}

// resetTo drops every segment and starts an empty log at offset. Used while
// opening; TruncateFullyAndStartAt is the public form.
func (l *Log) resetTo(offset int64) error {
	for _, s := range l.segs {
		if err := s.remove(l.fs); err != nil {
			return err
		}
	}
	s, err := createSegment(l.fs, l.dir, offset, l.clock.Now(), l.mapHint())
	if err != nil {
		return err
	}
	l.segs = []*segment{s}
	l.leo, l.logStart = offset, offset
	l.epochs.clear()
	l.dirDirty = true
	return nil
}

// batchReader reads batches of a file through a window buffer, so a scan
// issues one read per MiB rather than two per batch.
type batchReader struct {
	f     vfs.File
	size  int64
	buf   []byte
	start int64
}

const scanWindow = 1 << 20

// batchAt returns the whole batch at pos, or nil with a reason if the bytes
// there cannot be a batch (torn or garbage).
func (r *batchReader) batchAt(pos int64) ([]byte, string, error) {
	if pos+record.LogOverhead > r.size {
		return nil, "torn batch header", nil
	}
	hdr, err := r.read(pos, record.LogOverhead)
	if err != nil {
		return nil, "", err
	}
	n := int64(record.BatchSize(hdr))
	if n < record.BatchHeaderSize {
		return nil, "batch length below the header size", nil
	}
	if pos+n > r.size {
		return nil, "batch runs past the end of the file", nil
	}
	b, err := r.read(pos, n)
	if err != nil {
		return nil, "", err
	}
	return b, "", nil
}

func (r *batchReader) read(pos, n int64) ([]byte, error) {
	if pos >= r.start && pos+n <= r.start+int64(len(r.buf)) {
		return r.buf[pos-r.start : pos-r.start+n], nil
	}
	want := min(max(n, scanWindow), r.size-pos)
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	r.start = pos
	if _, err := r.f.ReadAt(r.buf, pos); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	return r.buf[:n], nil
}
