package storage

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// Compaction (cleanup.policy=compact) keeps the latest record of every key,
// after Kafka's log cleaner:
//
//  1. The cleanable range is the durable, sealed segments from the start of
//     the log up to the first one with records younger than
//     min.compaction.lag.ms; the active segment is never touched.
//  2. A pass over the range's batch headers and control records finds each
//     transaction's outcome and each producer's last batch.
//  3. A pass over the records maps every key (a 128-bit seeded hash) to its
//     latest offset, skipping aborted and undecided transactions.
//  4. Segments are rewritten in groups no larger than segment.bytes into
//     <base>.log.cleaned files: a record survives if it is the latest for
//     its key and is not a tombstone past its delete horizon. Batches keep
//     their offsets, epochs and producer fields; a batch left with no
//     records is dropped unless it is its producer's last, which keeps
//     producer state (as Kafka does). Tombstones and transaction markers get
//     a delete horizon of now + delete.retention.ms the first time they are
//     cleaned and go once it passes (KIP-534), so a consumer reading from
//     the start within that window still sees the delete.
//  5. The output is fsynced, renamed to .swap (the commit point), swapped
//     into the segment list, the old segments deleted and the .swap files
//     renamed to their final names. Open completes a swap a crash
//     interrupted (see completeSwap).
//
// Reads and appends continue throughout: the passes read sealed segments
// through their memory maps, and the swap holds the log's write lock only
// to splice the segment list.

// CompactionResult describes one compaction.
type CompactionResult struct {
	// Segments is the number of source segments rewritten.
	Segments int
	// BytesBefore and BytesAfter are their sizes before and after.
	BytesBefore, BytesAfter int64
	// RecordsRemoved counts records dropped, TombstonesRemoved the
	// tombstones among them that had passed their delete horizon.
	RecordsRemoved, TombstonesRemoved int64
	// CleanedTo is the offset below which the log is now compacted.
	CleanedTo int64
}

type keyHash [2]uint64

var hashSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// hashKey hashes a key to 128 bits with per-process random seeds: a
// collision would drop a record wrongly, so it must be negligible and not
// something a producer can aim for.
func hashKey(k []byte) keyHash {
	return keyHash{maphash.Bytes(hashSeeds[0], k), maphash.Bytes(hashSeeds[1], k)}
}

type txnOutcome int8

const (
	txnUndecided txnOutcome = iota
	txnCommitted
	txnAborted
)

type txnSpan struct {
	first, last int64
	outcome     txnOutcome
}

// compactState is what the passes share.
type compactState struct {
	nowMs      int64
	horizon    int64 // delete horizon stamped this time
	keys       map[keyHash]int64
	txns       map[int64][]txnSpan
	lastBatch  map[int64]int64 // producer id -> base offset of its last batch in the range
	it         record.Iterator
	rw         record.Rewriter
	res        CompactionResult
	minHorizon int64
	// bad holds the base offsets of the batches this pass could not
	// decode, so each is reported once per pass.
	bad map[int64]bool
}

// UnreadableBatches returns how many times compaction met a batch it could
// not decode since the log was opened (once per batch per pass). Such a
// batch is kept as it is: the cleaner never takes a partition offline for
// it, but what it holds is neither compacted nor readable; a consumer gets
// a decode error naming its offset.
func (l *Log) UnreadableBatches() int64 { return l.unreadableCount.Load() }

// unreadable reports a batch compaction cannot decode: logged at ERROR and
// counted once per pass. Compaction goes on and keeps the batch unchanged:
// one bad batch must not take the partition offline (and it would again
// after every restart, as the same pass meets the same batch).
func (l *Log) unreadable(st *compactState, h *record.BatchHeader, err error) {
	if st.bad[h.BaseOffset] {
		return
	}
	if st.bad == nil {
		st.bad = map[int64]bool{}
	}
	st.bad[h.BaseOffset] = true
	l.unreadableCount.Add(1)
	l.log.Error("compaction kept a batch it cannot decode", "dir", l.dir, "offset", h.BaseOffset,
		"last_offset", h.LastOffset(), "err", err)
}

func (st *compactState) outcome(pid, offset int64) txnOutcome {
	spans := st.txns[pid]
	i := sort.Search(len(spans), func(i int) bool { return spans[i].first > offset }) - 1
	if i >= 0 && offset <= spans[i].last {
		return spans[i].outcome
	}
	return txnUndecided
}

// Compact runs one compaction pass if the topic's cleanup.policy includes
// compact and the log is dirty enough (min.cleanable.dirty.ratio), or a
// tombstone's delete horizon has passed, or force is set. It never blocks
// appends or reads for longer than a segment-list splice.
func (l *Log) Compact(ctx context.Context, force bool) (CompactionResult, error) {
	if err := l.check(); err != nil {
		return CompactionResult{}, err
	}
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	cfg := l.conf()
	if !cfg.CleanupPolicy.Compact() {
		return CompactionResult{}, nil
	}
	// Compaction rewrites only durable data; on a topic that does not
	// fsync on its own, make the sealed segments durable first.
	l.mu.RLock()
	sealedEnd := l.segs[len(l.segs)-1].base
	l.mu.RUnlock()
	if l.durable.Load() < sealedEnd {
		if err := l.Flush(); err != nil {
			return CompactionResult{}, err
		}
	}
	now := l.clock.Now().UnixMilli()
	segs, ok := l.planCompaction(cfg, now, force)
	if !ok {
		return CompactionResult{CleanedTo: l.cleanedOffset()}, nil
	}
	st := &compactState{
		nowMs: now, horizon: satAdd(now, cfg.DeleteRetentionMs),
		keys: make(map[keyHash]int64), txns: make(map[int64][]txnSpan), lastBatch: make(map[int64]int64),
		minHorizon: maxInt64,
	}
	st.it.DecompressLimit = l.opts.DecompressLimit
	if err := l.scanTransactions(segs, st); err != nil {
		return st.res, err
	}
	end, err := l.buildKeyMap(ctx, segs, st)
	if err != nil {
		return st.res, err
	}
	segs = segs[:end]
	for _, g := range groupSegments(segs, cfg.SegmentBytes) {
		c, err := l.cleanGroup(ctx, g, st)
		if err != nil {
			return st.res, err
		}
		swapped, err := l.swapIn(g, c)
		if err != nil {
			return st.res, err
		}
		if !swapped {
			// The log changed under us (truncated or retention removed a
			// segment): stop; the next pass starts afresh.
			return st.res, nil
		}
		st.res.Segments += len(g)
	}
	cleanedTo := segs[len(segs)-1].next
	l.mu.Lock()
	l.cleanedTo = max(l.cleanedTo, cleanedTo)
	l.horizonDue = st.minHorizon
	l.mu.Unlock()
	if err := l.writeCleanerCheckpoint(cleanedTo); err != nil {
		return st.res, l.fail("writing cleaner checkpoint", err)
	}
	st.res.CleanedTo = cleanedTo
	l.log.Info("compacted log", "segments", st.res.Segments, "bytes_before", st.res.BytesBefore,
		"bytes_after", st.res.BytesAfter, "records_removed", st.res.RecordsRemoved, "cleaned_to", cleanedTo)
	return st.res, nil
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (l *Log) cleanedOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cleanedTo
}

// planCompaction returns the cleanable segments, and whether a pass is due.
func (l *Log) planCompaction(cfg *Config, nowMs int64, force bool) ([]*segment, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, false
	}
	durable := l.durable.Load()
	var segs []*segment
	var total, dirty int64
	for _, s := range l.segs[:len(l.segs)-1] {
		if !s.sealed || s.next > durable || (s.maxTS >= 0 && nowMs-s.maxTS < cfg.MinCompactionLagMs) {
			break
		}
		segs = append(segs, s)
		total += s.size
		if s.next > l.cleanedTo {
			dirty += s.size
		}
	}
	if len(segs) == 0 {
		return nil, false
	}
	due := force || l.horizonDue <= nowMs || (total > 0 && float64(dirty)/float64(total) >= cfg.MinCleanableDirtyRatio && dirty > 0)
	return segs, due
}

// pin returns a segment's bytes with a map reference, if it is still a
// sealed part of the log.
func (l *Log) pin(s *segment) ([]byte, *segMap, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !s.sealed || !slices.Contains(l.segs, s) {
		return nil, nil, errSegmentGone
	}
	m, err := s.acquireMap(s.size)
	if err != nil {
		return nil, nil, l.fail("mapping "+s.log.Name(), err)
	}
	return m.data[:s.size], m, nil
}

var errSegmentGone = errors.New("segment left the log during compaction")

// scanTransactions reads batch headers and control records: the outcome of
// every transaction that starts in the range and the last batch of every
// producer.
func (l *Log) scanTransactions(segs []*segment, st *compactState) error {
	open := map[int64]int64{}
	for _, s := range segs {
		data, m, err := l.pin(s)
		if err != nil {
			return ignoreGone(err)
		}
		for it := record.Batches(data); it.Next(); {
			h := it.Header()
			if h.ProducerID >= 0 {
				st.lastBatch[h.ProducerID] = h.BaseOffset
			}
			switch {
			case h.Attributes.Control():
				first, ok := open[h.ProducerID]
				if !ok {
					continue
				}
				delete(open, h.ProducerID)
				outcome := txnAborted
				st.it.Reset(it.Bytes())
				if st.it.Next() {
					if t, err := record.ParseControlKey(st.it.Record().Key); err == nil && t == record.ControlCommit {
						outcome = txnCommitted
					}
				} else if err := st.it.Err(); err != nil {
					// An unreadable marker decides nothing: the
					// transaction's batches stay as they are.
					l.unreadable(st, &h, err)
					outcome = txnUndecided
				}
				st.txns[h.ProducerID] = append(st.txns[h.ProducerID], txnSpan{first: first, last: h.BaseOffset, outcome: outcome})
			case h.Attributes.Transactional():
				if _, ok := open[h.ProducerID]; !ok {
					open[h.ProducerID] = h.BaseOffset
				}
			}
		}
		m.release()
	}
	for pid, first := range open {
		st.txns[pid] = append(st.txns[pid], txnSpan{first: first, last: math.MaxInt64, outcome: txnUndecided})
	}
	return nil
}

func ignoreGone(err error) error {
	if errors.Is(err, errSegmentGone) {
		return nil
	}
	return err
}

// buildKeyMap maps every key in the range to its latest offset and returns
// how many segments the pass can clean within the key budget.
func (l *Log) buildKeyMap(ctx context.Context, segs []*segment, st *compactState) (int, error) {
	for i, s := range segs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		data, m, err := l.pin(s)
		if err != nil {
			if errors.Is(err, errSegmentGone) {
				return i, nil
			}
			return 0, err
		}
		for it := record.Batches(data); it.Next(); {
			h := it.Header()
			if h.Attributes.Control() || (h.Attributes.Transactional() && st.outcome(h.ProducerID, h.BaseOffset) != txnCommitted) {
				continue
			}
			st.it.Reset(it.Bytes())
			for st.it.Next() {
				if r := st.it.Record(); r.Key != nil {
					st.keys[hashKey(r.Key)] = r.Offset
				}
			}
			if err := st.it.Err(); err != nil {
				// Keys read before the fault stay mapped: they are real
				// records, and the batch itself is kept whole.
				l.unreadable(st, &h, err)
			}
		}
		m.release()
		// Keys of segment i are mapped; records it supersedes earlier are
		// correctly dropped even if segment i itself waits for the next pass.
		if len(st.keys) > l.opts.CompactionMaxKeys {
			return max(i, 1), nil
		}
	}
	return len(segs), nil
}

// groupSegments groups consecutive segments whose total size fits
// segment.bytes (and the 32-bit index range), so compaction also merges
// segments that shrank.
func groupSegments(segs []*segment, maxBytes int64) [][]*segment {
	var groups [][]*segment
	for i := 0; i < len(segs); {
		j, size := i+1, segs[i].size
		for j < len(segs) && size+segs[j].size <= maxBytes && segs[j].next-1-segs[i].base <= math.MaxUint32 {
			size += segs[j].size
			j++
		}
		groups = append(groups, segs[i:j])
		i = j
	}
	return groups
}

// cleanGroup writes the compacted form of a group of segments to .cleaned
// files and returns it as a sealed, durable segment named after the group's
// first segment.
func (l *Log) cleanGroup(ctx context.Context, g []*segment, st *compactState) (_ *segment, err error) {
	base := g[0].base
	// c is not the named result: every failing return sets that to nil
	// before the cleanup below needs c.
	c := &segment{base: base, dir: l.dir, next: base, maxTS: -1, maxTSOff: -1, created: l.clock.Now()}
	open := func(suffix string) vfs.File {
		if err != nil {
			return nil
		}
		var f vfs.File
		f, err = l.fs.OpenFile(filepath.Join(l.dir, segmentFileName(base, suffix+cleanedSuffix)), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
		return f
	}
	lf, oi, ti := open(logSuffix), open(indexSuffix), open(timeIndexSuffix)
	if err != nil {
		for _, f := range []vfs.File{lf, oi, ti} {
			if f != nil {
				_ = f.Close() // reporting the open error
			}
		}
		return nil, l.fail("creating compaction output", err)
	}
	c.log = lf
	c.offIdx = &index{entrySize: offsetEntrySize, base: base, file: oi}
	c.timeIdx = &index{entrySize: timeEntrySize, base: base, file: ti}
	defer func() {
		if err != nil {
			_ = c.close() // reporting the cleaning error
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				_ = removeIfExists(l.fs, filepath.Join(l.dir, segmentFileName(base, suffix+cleanedSuffix)))
			}
		}
	}()

	var wbuf []byte
	flushBuf := func() error {
		if len(wbuf) == 0 {
			return nil
		}
		_, werr := lf.WriteAt(wbuf, c.size-int64(len(wbuf)))
		wbuf = wbuf[:0]
		return werr
	}
	for _, s := range g {
		if err = ctx.Err(); err != nil {
			return nil, err
		}
		data, m, perr := l.pin(s)
		if perr != nil {
			err = perr
			return nil, err
		}
		st.res.BytesBefore += s.size
		for it := record.Batches(data); it.Next(); {
			out, keep, cerr := l.compactBatch(it.Bytes(), st)
			if cerr != nil {
				m.release()
				err = cerr
				return nil, err
			}
			if !keep {
				continue
			}
			h, _ := record.ParseBatchHeader(out)
			l.indexBatch(c, &h, c.size)
			c.next = h.NextOffset()
			wbuf = append(wbuf, out...)
			c.size += int64(len(out))
			if len(wbuf) >= scanWindow {
				if err = flushBuf(); err != nil {
					m.release()
					return nil, l.fail("writing compaction output", err)
				}
			}
		}
		m.release()
	}
	if err = flushBuf(); err != nil {
		return nil, l.fail("writing compaction output", err)
	}
	c.next = g[len(g)-1].next
	c.addTimeEntry()
	if err = c.offIdx.persist(); err == nil {
		err = c.timeIdx.persist()
	}
	for _, f := range []vfs.File{lf, oi, ti} {
		if err == nil {
			err = f.Sync()
		}
	}
	if err == nil {
		if err = c.offIdx.seal(); err == nil {
			err = c.timeIdx.seal()
		}
	}
	if err != nil {
		return nil, l.fail("writing compaction output", err)
	}
	c.sealed = true
	st.res.BytesAfter += c.size
	return c, nil
}

// compactBatch decides what of one batch survives and returns the bytes to
// write (the batch itself when nothing changes).
func (l *Log) compactBatch(batch []byte, st *compactState) ([]byte, bool, error) {
	h, _ := record.ParseBatchHeader(batch)
	horizon, hasHorizon := h.DeleteHorizon()
	expired := hasHorizon && horizon <= st.nowMs
	lastOfProducer := h.ProducerID >= 0 && st.lastBatch[h.ProducerID] == h.BaseOffset
	note := func() {
		if hasHorizon {
			st.minHorizon = min(st.minHorizon, horizon)
		} else {
			st.minHorizon = min(st.minHorizon, st.horizon)
		}
	}

	if h.Attributes.Control() {
		switch {
		case expired && !lastOfProducer:
			st.res.RecordsRemoved += int64(h.RecordCount)
			return nil, false, nil
		case hasHorizon:
			note()
			return batch, true, nil
		}
		note()
		return l.rewrite(batch, h, st, st.horizon, true, func(*record.Record) bool { return true })
	}
	if h.Attributes.Transactional() {
		switch st.outcome(h.ProducerID, h.BaseOffset) {
		case txnUndecided:
			return batch, true, nil
		case txnAborted:
			return l.rewrite(batch, h, st, h.BaseTimestamp, hasHorizon, func(*record.Record) bool { return false })
		}
	}

	// Does anything change? Decide per record first; rewrite only if so.
	st.it.Reset(batch)
	changed, tombstones := false, false
	for st.it.Next() {
		r := st.it.Record()
		if !l.keepRecord(r, expired, st) {
			changed = true
		} else if r.Value == nil {
			tombstones = true
		}
	}
	if err := st.it.Err(); err != nil {
		l.unreadable(st, &h, err)
		return batch, true, nil
	}
	needHorizon := tombstones && !hasHorizon
	if tombstones {
		note()
	}
	if !changed && !needHorizon {
		return batch, true, nil
	}
	base, withHorizon := h.BaseTimestamp, hasHorizon
	if needHorizon {
		base, withHorizon = st.horizon, true
	}
	return l.rewrite(batch, h, st, base, withHorizon, func(r *record.Record) bool { return l.keepRecord(r, expired, st) })
}

// keepRecord is the survival rule for a data record.
func (l *Log) keepRecord(r *record.Record, horizonPassed bool, st *compactState) bool {
	if r.Key == nil {
		// Kafka rejects keyless records on compacted topics and its cleaner
		// drops any it finds; so do we.
		return false
	}
	if latest, ok := st.keys[hashKey(r.Key)]; ok && latest > r.Offset {
		return false
	}
	return r.Value != nil || !horizonPassed
}

// rewrite re-encodes batch with the records keep accepts. A batch left
// empty is dropped, unless it is its producer's last.
func (l *Log) rewrite(batch []byte, h record.BatchHeader, st *compactState, baseTS int64, horizon bool, keep func(*record.Record) bool) ([]byte, bool, error) {
	st.rw.Reset(h, baseTS, horizon)
	st.it.Reset(batch)
	before := st.res
	for st.it.Next() {
		r := st.it.Record()
		if !keep(r) {
			st.res.RecordsRemoved++
			if r.Value == nil {
				st.res.TombstonesRemoved++
			}
			continue
		}
		if err := st.rw.Add(r); err != nil {
			return nil, false, err
		}
	}
	if err := st.it.Err(); err != nil {
		st.res = before // nothing of it is removed after all
		l.unreadable(st, &h, err)
		return batch, true, nil
	}
	if st.rw.Len() == 0 && !(h.ProducerID >= 0 && st.lastBatch[h.ProducerID] == h.BaseOffset) {
		return nil, false, nil
	}
	out, err := st.rw.Build()
	if err != nil {
		return nil, false, errs.New(errs.StorageError, "re-encoding a compacted batch: %w", err)
	}
	return out, true, nil
}

// swapIn replaces the group g with the cleaned segment c, crash-safely.
// It returns false, discarding c, if the log changed since the pass began.
func (l *Log) swapIn(g []*segment, c *segment) (bool, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	base := c.base
	name := func(suffix string) string { return filepath.Join(l.dir, segmentFileName(base, suffix)) }
	l.mu.RLock()
	i := slices.Index(l.segs, g[0])
	valid := !l.closed && i >= 0 && i+len(g) < len(l.segs)
	for j := 0; valid && j < len(g); j++ {
		valid = l.segs[i+j] == g[j] && g[j].sealed
	}
	l.mu.RUnlock()
	if !valid {
		_ = c.close() // discarding the output
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			_ = removeIfExists(l.fs, name(suffix+cleanedSuffix))
		}
		return false, nil
	}
	// The .log.swap rename is the commit point: from then on, Open finishes
	// the swap if we crash.
	for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if err := l.fs.Rename(name(suffix+cleanedSuffix), name(suffix+swapSuffix)); err != nil {
			return false, l.fail("renaming compaction output", err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return false, l.fail("syncing log directory", err)
	}
	// Appends read the segment list under appendMu alone, so the splice
	// takes it too.
	l.appendMu.Lock()
	l.mu.Lock()
	i = slices.Index(l.segs, g[0])
	segs := make([]*segment, 0, len(l.segs)-len(g)+1)
	segs = append(append(append(segs, l.segs[:i]...), c), l.segs[i+len(g):]...)
	l.segs = segs
	l.needSync = slices.DeleteFunc(l.needSync, func(s *segment) bool { return slices.Contains(g, s) })
	l.mu.Unlock()
	l.appendMu.Unlock()
	// No reader can reach the old segments now; readers that still hold
	// chunks of them keep their maps until they release.
	for _, s := range g {
		if err := s.remove(l.fs); err != nil {
			return true, l.fail("deleting compacted segment", err)
		}
	}
	for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if err := l.fs.Rename(name(suffix+swapSuffix), name(suffix)); err != nil {
			return true, l.fail("renaming compacted segment", err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return true, l.fail("syncing log directory", err)
	}
	// The output was written fresh and synced; below the page-cache drop
	// point its pages count as dropped, so they are.
	if l.opts.PageCache != nil && (base < l.cacheSeg || base == l.cacheSeg && l.cachePos > 0) {
		if d, ok := c.log.(vfs.CacheDropper); ok {
			_ = d.DropCache(0, c.size) // only the budget's accuracy depends on it
		}
	}
	return true, l.repairCheckpointLocked()
}
