package storage

import (
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// DefaultProducerIDExpiration is Kafka's producer.id.expiration.ms default:
// one day.
const DefaultProducerIDExpiration = 24 * time.Hour

// ProducerInfo describes one producer id's state on a partition.
type ProducerInfo struct {
	ProducerID int64
	Epoch      int16
	// LastSequence is the sequence of the producer's latest batch, or -1.
	LastSequence int32
	// LastTimestamp is the largest timestamp of its latest batch (Unix ms).
	LastTimestamp int64
	// CoordinatorEpoch is the coordinator epoch of its latest marker.
	CoordinatorEpoch int32
	// TxnStartOffset is the first offset of its open transaction, or -1.
	TxnStartOffset int64
}

// Producers returns the partition's producer state, by producer id.
func (l *Log) Producers() []ProducerInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]ProducerInfo, 0, len(l.producers.producers))
	for id, e := range l.producers.producers {
		out = append(out, ProducerInfo{ProducerID: id, Epoch: e.Epoch, LastSequence: e.lastSeq(), LastTimestamp: e.LastTimestamp,
			CoordinatorEpoch: e.CoordinatorEpoch, TxnStartOffset: e.TxnFirstOffset})
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return int(min(max(a.ProducerID-b.ProducerID, -1), 1)) })
	return out
}

// FirstUnstableOffset returns the first offset of the oldest transaction
// still open on this log, or false if none is. The last stable offset is
// the smaller of it and the high watermark.
func (l *Log) FirstUnstableOffset() (int64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.producers.firstUnstable()
}

// AbortedTransactions returns the aborted transactions with batches that may
// lie in [from, to), for read_committed readers to drop.
func (l *Log) AbortedTransactions(from, to int64) []AbortedTxn {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.producers.abortedIn(from, to)
}

// ExpireProducers forgets the producer ids silent for longer than the
// expiration (producer.id.expiration.ms) with no open transaction, and
// returns how many it forgot. A producer that comes back later is accepted
// at any sequence, as a new one.
func (l *Log) ExpireProducers() int {
	d := l.opts.ProducerIDExpiration
	if d <= 0 {
		d = DefaultProducerIDExpiration
	}
	cutoff := l.clock.Now().Add(-d).UnixMilli()
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.producers.expire(cutoff)
}

// checkProducers runs the leader's idempotence checks on a buffer of client
// batches. appendMu must be held. A retry of one of a producer's latest
// batches returns that batch (nothing is to be appended).
func (l *Log) checkProducers(batches []byte, sum *record.Summary, origin record.Origin) (*producerBatch, error) {
	for it := record.Batches(batches); it.Next(); {
		h := it.Header()
		if h.ProducerID < 0 {
			continue
		}
		if sum.Batches > 1 {
			// A retry must be recognised as a whole: one batch per
			// partition and request, as Kafka requires.
			return nil, errs.New(errs.InvalidRecord, "%s: a produce request carries %d batches for the partition; an idempotent or transactional producer sends one",
				filepath.Base(l.dir), sum.Batches)
		}
		if origin == record.FromCoordinator && h.Attributes.Transactional() && !h.Attributes.Control() && h.BaseSequence < 0 {
			// Offsets committed in a transaction: the group coordinator
			// writes them as a transactional batch of the producer with no
			// sequence (Kafka's coordinator does the same), so only the
			// epoch is checked; the batch opens or joins the producer's
			// transaction on the partition until a marker ends it.
			if e := l.producers.producers[h.ProducerID]; e != nil && h.ProducerEpoch < e.Epoch {
				return nil, errs.New(errs.InvalidProducerEpoch, "%s: producer %d epoch %d is older than the partition's current epoch %d for it",
					filepath.Base(l.dir), h.ProducerID, h.ProducerEpoch, e.Epoch)
			}
			return nil, nil
		}
		dup, err := l.producers.checkLeader(filepath.Base(l.dir), &h, it.Bytes())
		if err != nil || dup != nil {
			return dup, err
		}
		if origin == record.FromClient && h.Attributes.Transactional() && !h.Attributes.Control() && !l.inTransaction(h.ProducerID, h.ProducerEpoch) &&
			!l.verified[h.ProducerID].confirms(h.ProducerEpoch) {
			// KIP-890: the first batch of a transaction on a partition is
			// appended only after the coordinator confirmed the partition
			// is in the producer's open transaction (VerifiedTxn), and no
			// marker for the producer came in between. A late batch of a
			// finished transaction would otherwise open a transaction no
			// one ever ends.
			return nil, errs.New(errs.InvalidTxnState, "%s: producer %d epoch %d has no transaction open on this partition that its coordinator confirmed; add the partition to the transaction first",
				filepath.Base(l.dir), h.ProducerID, h.ProducerEpoch)
		}
		return nil, nil
	}
	return nil, nil
}

// inTransaction reports whether the producer has a transaction open on the
// log at this epoch. appendMu must be held.
func (l *Log) inTransaction(pid int64, epoch int16) bool {
	e := l.producers.producers[pid]
	return e != nil && e.Epoch == epoch && e.TxnFirstOffset >= 0
}

// InTransaction reports whether the producer has a transaction open on the
// log at this epoch: its further transactional batches need no
// verification.
func (l *Log) InTransaction(pid int64, epoch int16) bool {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	return l.inTransaction(pid, epoch)
}

// TxnCheck is one check with the transaction coordinator that a producer's
// open transaction includes this partition (Kafka's verification guard).
// It is started before the coordinator is asked, so that a marker for the
// producer written while the question is out withdraws it: the answer,
// given before the transaction ended, then no longer lets a late batch open
// a transaction here.
type TxnCheck struct {
	epoch     int16
	confirmed bool
}

func (c *TxnCheck) confirms(epoch int16) bool {
	return c != nil && c.confirmed && c.epoch == epoch
}

// BeginTxnCheck starts a check of the producer's transaction on this
// partition, replacing any earlier one; VerifiedTxn completes it.
func (l *Log) BeginTxnCheck(pid int64) *TxnCheck {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.verified == nil {
		l.verified = map[int64]*TxnCheck{}
	}
	c := &TxnCheck{}
	l.verified[pid] = c
	return c
}

// VerifiedTxn records that the transaction coordinator confirmed the
// partition is part of the producer's open transaction at epoch, in answer
// to check: the next transactional batch of the producer at that epoch may
// open it here. It reports false, and records nothing, when a marker for
// the producer (or a newer check) came after check began. Only the leader
// keeps these.
func (l *Log) VerifiedTxn(check *TxnCheck, pid int64, epoch int16) bool {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.verified[pid] != check {
		return false
	}
	check.epoch, check.confirmed = epoch, true
	return true
}

// snapshotProducers writes the producer state as of its end offset. A failed
// snapshot only makes the next recovery replay more of the log, so it is
// logged, not fatal. appendMu must be held.
func (l *Log) snapshotProducers() {
	ps := l.producers
	name := filepath.Join(l.dir, segmentFileName(ps.end, snapshotSuffix))
	if err := vfs.WriteFileAtomic(l.fs, name, ps.encode()); err != nil {
		l.log.Warn("writing producer state snapshot failed; recovery will replay more of the log", slog.Int64("offset", ps.end), slog.Any("err", err))
	}
}

// snapshotOffsets lists the offsets of the snapshot files, ascending.
func (l *Log) snapshotOffsets() []int64 {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil
	}
	var offs []int64
	for _, name := range names {
		if off, ok := parseSegmentFileName(name, snapshotSuffix); ok {
			offs = append(offs, off)
		}
	}
	slices.Sort(offs)
	return offs
}

// removeSnapshots deletes the snapshots for which drop is true.
func (l *Log) removeSnapshots(drop func(off int64) bool) {
	for _, off := range l.snapshotOffsets() {
		if drop(off) {
			if err := removeIfExists(l.fs, filepath.Join(l.dir, segmentFileName(off, snapshotSuffix))); err != nil {
				l.log.Warn("deleting producer state snapshot failed", slog.Int64("offset", off), slog.Any("err", err))
			}
		}
	}
}

// loadProducers rebuilds the producer state: the newest readable snapshot
// at or below the log end, then every batch after it (Kafka's way). Newer
// snapshots describe offsets the log no longer has and are deleted. It runs
// with the log quiet: in Open, or under appendMu after a truncation.
func (l *Log) loadProducers() (*producerState, error) {
	offs := l.snapshotOffsets()
	var ps *producerState
	for i := len(offs) - 1; i >= 0 && ps == nil; i-- {
		off := offs[i]
		if off > l.leo {
			continue
		}
		data, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, segmentFileName(off, snapshotSuffix)))
		if err == nil {
			ps, err = decodeProducerState(data)
		}
		if err == nil && ps.end != off {
			ps, err = nil, errSnapshot
		}
		if err != nil {
			l.log.Warn("producer state snapshot unreadable; using an older one", slog.Int64("offset", off), slog.Any("err", err))
		}
	}
	l.removeSnapshots(func(off int64) bool { return off > l.leo })
	if ps == nil {
		ps = newProducerState(l.logStart)
	}
	if first := l.segs[0].base; ps.end < first {
		// The batches between the snapshot and the log start are gone;
		// the producers it holds stay until they expire, as in Kafka.
		ps.end = first
	}
	if err := l.replayProducers(ps); err != nil {
		return nil, err
	}
	ps.pruneAborted(l.logStart)
	return ps, nil
}

// replayProducers applies to ps every batch from ps.end to the log end,
// reading batch headers only (and whole control batches).
func (l *Log) replayProducers(ps *producerState) error {
	from := ps.end
	i := max(l.segmentFor(from), 0)
	var hdr [record.BatchHeaderSize]byte
	for ; i < len(l.segs); i++ {
		s := l.segs[i]
		pos := int64(0)
		if s.base < from {
			pos, _ = s.startPosition(from, func(p int64) []byte {
				if _, err := s.log.ReadAt(hdr[:], p); err != nil {
					return nil
				}
				return hdr[:]
			})
		}
		for pos+record.BatchHeaderSize <= s.size {
			if _, err := s.log.ReadAt(hdr[:], pos); err != nil {
				return storageErr("reading "+s.log.Name(), err)
			}
			h, _ := record.ParseBatchHeader(hdr[:])
			if h.Size() < record.BatchHeaderSize || pos+int64(h.Size()) > s.size {
				break // recovery cut torn tails; what is past this is not the log's
			}
			if h.LastOffset() >= from {
				var batch []byte
				if h.Attributes.Control() {
					batch = make([]byte, h.Size())
					if _, err := s.log.ReadAt(batch, pos); err != nil {
						return storageErr("reading "+s.log.Name(), err)
					}
				}
				ps.apply(&h, batch)
			}
			pos += int64(h.Size())
		}
	}
	ps.end = max(ps.end, l.leo)
	return nil
}

// reloadProducersLocked rebuilds the producer state after a truncation:
// snapshots past the new end go, and the state is loaded again from an
// older one. appendMu must be held.
func (l *Log) reloadProducersLocked() error {
	ps, err := l.loadProducers()
	if err != nil {
		return l.fail("rebuilding producer state", err)
	}
	l.mu.Lock()
	l.producers = ps
	l.mu.Unlock()
	return nil
}
