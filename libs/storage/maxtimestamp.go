package storage

import "github.com/sluice-io/sluice/libs/client/record"

// MaxTimestamp returns the offset and timestamp of the record with the
// largest timestamp in the log (ListOffsets' max-timestamp spec, KIP-734),
// the first such record when several share it; found is false for a log
// with no record. It picks the segment from the segments' largest batch
// timestamps, finds that batch with the offset index, and decodes only it.
func (l *Log) MaxTimestamp() (offset, timestamp int64, found bool, err error) {
	if err := l.check(); err != nil {
		return 0, 0, false, err
	}
	l.mu.RLock()
	var best *segment
	for _, s := range l.segs {
		// Strictly greater: the earliest segment keeps a tie.
		if s.size > 0 && s.maxTS >= 0 && (best == nil || s.maxTS > best.maxTS) {
			best = s
		}
	}
	if best == nil {
		l.mu.RUnlock()
		return 0, 0, false, nil
	}
	target, ts, logStart := best.maxTSOff, best.maxTS, l.logStart
	m, err := best.acquireMap(best.size)
	if err != nil {
		l.mu.RUnlock()
		return 0, 0, false, l.fail("mapping "+best.log.Name(), err)
	}
	data := m.data[:best.size]
	pos, _ := best.startPosition(target, func(p int64) []byte { return tail(data, p) })
	var batch []byte
	for pos+record.BatchHeaderSize <= best.size {
		n := int64(record.BatchSize(data[pos:]))
		if n < record.BatchHeaderSize || pos+n > best.size {
			break
		}
		h, _ := record.ParseBatchHeader(data[pos : pos+n])
		if h.BaseOffset <= target && target <= h.LastOffset() && h.MaxTimestamp == ts {
			batch = data[pos : pos+n]
			break
		}
		if h.BaseOffset > target {
			break
		}
		pos += n
	}
	l.mu.RUnlock()
	defer m.release()
	if batch == nil {
		// The segment's record of its largest timestamp names no batch
		// (it was compacted away): answer the timestamp at the offset
		// recorded, as the index knows it.
		return max(target, logStart), ts, true, nil
	}
	it := record.Iterator{DecompressLimit: l.opts.DecompressLimit}
	it.Reset(batch)
	for it.Next() {
		if r := it.Record(); r.Timestamp == ts && r.Offset >= logStart {
			return r.Offset, r.Timestamp, true, nil
		}
	}
	if it.Err() != nil {
		return 0, 0, false, it.Err()
	}
	// No record carries the batch's max timestamp (log-append-time batches
	// stamp only the header): the batch's last offset, as Kafka answers.
	h, _ := record.ParseBatchHeader(batch)
	return max(h.LastOffset(), logStart), ts, true, nil
}
