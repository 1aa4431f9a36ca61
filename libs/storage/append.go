package storage

import (
	"context"
	"math"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// AppendResult describes an append.
type AppendResult struct {
	// FirstOffset and LastOffset are the offsets of the first and last
	// record slots of the appended batches.
	FirstOffset, LastOffset int64
	// LogAppendTime is the time the leader stamped on the batches (Unix
	// ms) for message.timestamp.type=LogAppendTime, else -1.
	LogAppendTime int64
	// MaxTimestamp is the largest batch timestamp appended.
	MaxTimestamp int64
	// Batches, Records and Bytes count what was appended.
	Batches int
	Records int64
	Bytes   int
	// LogStartOffset is the log start offset after the append.
	LogStartOffset int64
	// Duplicate says the batch was a producer's retry of a batch the log
	// already holds: nothing was appended, and the offsets are the
	// original's.
	Duplicate bool
}

// AppendAsLeader validates a buffer of batches from a producer (origin
// record.FromClient) or a coordinator (record.FromCoordinator, which may
// write control batches), assigns them the next offsets, stamps the leader
// epoch, and appends them. Validation reads only batch headers and CRCs;
// the bytes are stored as they came. Nothing is appended unless every batch
// is valid. The buffer is modified in place (offsets, epoch, and for
// LogAppendTime topics the timestamp and CRC) and may be reused by the
// caller once AppendAsLeader returns.
//
// The append is in the page cache when AppendAsLeader returns; use
// AppendSync, Durable or WaitDurable for durability.
func (l *Log) AppendAsLeader(batches []byte, leaderEpoch int32, origin record.Origin) (AppendResult, error) {
	if origin == record.FromReplica {
		return AppendResult{}, errs.New(errs.InvalidRequest, "leader appends come from clients or coordinators, not replicas")
	}
	if leaderEpoch < 0 {
		return AppendResult{}, errs.New(errs.InvalidRequest, "leader epoch %d is negative", leaderEpoch)
	}
	cfg := l.conf()
	sum, err := record.Validate(batches, record.ValidateOptions{MaxBatchBytes: cfg.MaxMessageBytes, Origin: origin})
	if err != nil {
		return AppendResult{}, err
	}
	if err := l.check(); err != nil {
		return AppendResult{}, err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return AppendResult{}, errClosed
	}
	if latest, ok := l.epochs.latest(); ok && leaderEpoch < latest.Epoch {
		return AppendResult{}, errs.New(errs.FencedLeaderEpoch, "leader epoch %d is older than the log's latest epoch %d", leaderEpoch, latest.Epoch)
	}
	dup, err := l.checkProducers(batches, &sum, origin)
	if err != nil {
		return AppendResult{}, err
	}
	if dup != nil {
		// A retry of a batch the log has: answered with its offsets, so
		// the producer sees one append (KIP-98 idempotence).
		l.mu.RLock()
		start := l.logStart
		l.mu.RUnlock()
		return AppendResult{FirstOffset: dup.FirstOffset, LastOffset: dup.LastOffset, LogAppendTime: -1, MaxTimestamp: -1,
			LogStartOffset: start, Duplicate: true}, nil
	}
	first := l.leo
	record.AssignOffsets(batches, first, leaderEpoch)
	res := AppendResult{FirstOffset: first, LastOffset: first + sum.Offsets - 1, LogAppendTime: -1, MaxTimestamp: sum.MaxTimestamp}
	if cfg.MessageTimestampType == record.LogAppendTime {
		now := l.clock.Now().UnixMilli()
		for it := record.Batches(batches); it.Next(); {
			record.SetLogAppendTime(it.Bytes(), now)
		}
		res.LogAppendTime, res.MaxTimestamp = now, now
	}
	return l.appendLocked(batches, &sum, res, leaderEpoch)
}

// AppendSync is AppendAsLeader followed, when the topic sets
// sluice.fsync.before.ack, by a wait for durability. Concurrent callers share
// fdatasyncs (group commit).
func (l *Log) AppendSync(ctx context.Context, batches []byte, leaderEpoch int32, origin record.Origin) (AppendResult, error) {
	res, err := l.AppendAsLeader(batches, leaderEpoch, origin)
	if err != nil || !l.conf().FsyncBeforeAck {
		return res, err
	}
	return res, l.WaitDurable(ctx, res.LastOffset+1)
}

// AppendAsFollower appends batches copied from the leader, keeping their
// offsets and leader epochs. The batches must be valid, start at or after
// the log end offset, increase in offset and never go back in epoch; gaps
// between batches are allowed because a compacted leader log has them. New
// epochs enter the epoch cache at their first batch (KIP-101).
func (l *Log) AppendAsFollower(batches []byte) (AppendResult, error) {
	sum, err := record.Validate(batches, replicaChecks)
	if err != nil {
		return AppendResult{}, err
	}
	if err := l.check(); err != nil {
		return AppendResult{}, err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return AppendResult{}, errClosed
	}
	if sum.FirstOffset < l.leo {
		return AppendResult{}, errs.New(errs.InvalidRecord, "replicated batch starts at offset %d, below the log end offset %d", sum.FirstOffset, l.leo)
	}
	if latest, ok := l.epochs.latest(); ok && sum.FirstEpoch < latest.Epoch {
		return AppendResult{}, errs.New(errs.InvalidRecord, "replicated batch has leader epoch %d, older than the log's %d", sum.FirstEpoch, latest.Epoch)
	}
	res := AppendResult{FirstOffset: sum.FirstOffset, LastOffset: sum.LastOffset, LogAppendTime: -1, MaxTimestamp: sum.MaxTimestamp}
	return l.appendLocked(batches, &sum, res, -1)
}

// appendLocked writes validated batches with final offsets at the end of
// the log. appendMu must be held. leaderEpoch is the epoch a leader append
// stamped, or -1 for a follower append, whose batches carry their epochs.
func (l *Log) appendLocked(batches []byte, sum *record.Summary, res AppendResult, leaderEpoch int32) (AppendResult, error) {
	n := int64(len(batches))
	// Checked before anything is written, so a refused append changes
	// nothing and the log stays online.
	if err := l.opts.Space.Admit(n); err != nil {
		return AppendResult{}, err
	}
	seg := l.activeSegment()
	now := l.clock.Now()
	if l.shouldRoll(seg, n, res.FirstOffset, res.LastOffset, now) {
		if err := l.roll(res.FirstOffset, now); err != nil {
			return AppendResult{}, err
		}
		seg = l.activeSegment()
	}
	if seg.size+n > math.MaxUint32 || res.LastOffset-seg.base > math.MaxUint32 {
		return AppendResult{}, errs.New(errs.MessageTooLarge, "append of %d bytes does not fit one segment", n)
	}
	if _, err := seg.log.WriteAt(batches, seg.size); err != nil {
		// Undo a partial write so the file ends on a batch boundary; if even
		// that fails, recovery truncates the torn tail on the next open.
		_ = seg.log.Truncate(seg.size) // the write error is the one to report
		return AppendResult{}, l.fail("appending to "+seg.log.Name(), err)
	}

	l.mu.Lock()
	pos := seg.size
	for it := record.Batches(batches); it.Next(); {
		h := it.Header()
		l.indexBatch(seg, &h, pos)
		l.producers.apply(&h, it.Bytes())
		if h.Attributes.Control() && l.verified != nil {
			delete(l.verified, h.ProducerID)
		}
		if leaderEpoch < 0 {
			l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset)
		}
		pos += int64(h.Size())
	}
	if leaderEpoch >= 0 {
		l.epochs.assign(leaderEpoch, res.FirstOffset)
	}
	seg.size = pos
	seg.next = res.LastOffset + 1
	l.leo = res.LastOffset + 1
	if l.unflushed == 0 {
		l.oldestDirt = time.Now()
	}
	l.unflushed += sum.Offsets
	flushNow := l.unflushed >= l.conf().FlushMessages
	res.LogStartOffset = l.logStart
	l.mu.Unlock()

	// Index entries reach the file in chunks; recovery rebuilds whatever a
	// crash kept from getting there.
	if len(seg.offIdx.buf)-seg.offIdx.persisted >= indexWriteChunk {
		if err := seg.offIdx.persist(); err != nil {
			return res, l.fail("writing offset index", err)
		}
	}
	if len(seg.timeIdx.buf)-seg.timeIdx.persisted >= indexWriteChunk {
		if err := seg.timeIdx.persist(); err != nil {
			return res, l.fail("writing time index", err)
		}
	}
	if wb := l.opts.WriteBehindBytes; wb > 0 && (seg.size-seg.wbKicked >= wb || seg.size < seg.wbKicked) && !l.conf().FsyncBeforeAck {
		seg.wbKicked = seg.size
		flushNow = true
	}
	if flushNow {
		l.fl.kick()
	}
	res.Batches = sum.Batches
	res.Records = sum.Records
	res.Bytes = len(batches)
	return res, nil
}

// shouldRoll says whether an append of n bytes spanning offsets first..last
// needs a new segment: segment.bytes or segment.ms reached, or the 32-bit
// relative offsets and positions of the indexes would overflow.
func (l *Log) shouldRoll(seg *segment, n, first, last int64, now time.Time) bool {
	if seg.size == 0 {
		return false
	}
	cfg := l.conf()
	return seg.size+n > cfg.SegmentBytes ||
		now.Sub(seg.created) >= time.Duration(cfg.SegmentMs)*time.Millisecond ||
		last-seg.base > math.MaxUint32 ||
		seg.size+n > math.MaxUint32 ||
		first < seg.base
}

// roll seals the active segment and starts a new one at base. appendMu must
// be held. The sealed segment is fsynced by the next flush round, which also
// makes the new file's directory entry durable.
func (l *Log) roll(base int64, now time.Time) error {
	// Recovery replays producer state from the newest snapshot, so one per
	// segment bounds the replay to about a segment.
	l.snapshotProducers()
	old := l.activeSegment()
	s, err := createSegment(l.fs, l.dir, base, now, l.mapHint())
	if err != nil {
		return l.fail("creating segment", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old.addTimeEntry()
	if err := old.offIdx.seal(); err != nil {
		_ = s.remove(l.fs) // reporting the seal error
		return l.fail("sealing offset index", err)
	}
	if err := old.timeIdx.seal(); err != nil {
		_ = s.remove(l.fs) // reporting the seal error
		return l.fail("sealing time index", err)
	}
	old.sealed = true
	l.segs = append(l.segs, s)
	l.needSync = append(l.needSync, old)
	l.dirDirty = true
	return nil
}
