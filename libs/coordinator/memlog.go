package coordinator

import (
	"context"
	"sync"

	"github.com/sluice-io/sluice/libs/client/record"
)

// MemLog is a partition in memory that acknowledges every append at once,
// for tests of what a coordinator writes and of its replay.
type MemLog struct {
	mu   sync.Mutex
	recs []MemRecord
	// Fail, if set, fails every append with its result.
	Fail func() error
}

// MemRecord is one record of a MemLog, with what its batch said of it
// (producer, transactional, control: see LogRecord).
type MemRecord struct {
	Key, Value    []byte
	ProducerID    int64
	ProducerEpoch int16
	Transactional bool
	Control       bool
}

// Records returns a copy of the records appended so far.
func (l *MemLog) Records() []MemRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]MemRecord(nil), l.recs...)
}

// Open implements Log.
func (l *MemLog) Open(context.Context) (int64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return 0, int64(len(l.recs)), nil
}

// Replay implements Log.
func (l *MemLog) Replay(ctx context.Context, start, end int64, apply func(key, value []byte, offset int64)) error {
	return l.ReplayAll(ctx, start, end, dataOnly(apply))
}

// ReplayAll implements Log.
func (l *MemLog) ReplayAll(_ context.Context, start, end int64, apply func(r *LogRecord)) error {
	l.mu.Lock()
	recs := append([]MemRecord(nil), l.recs[start:end]...)
	l.mu.Unlock()
	for i, r := range recs {
		apply(&LogRecord{Key: r.Key, Value: r.Value, Offset: start + int64(i), ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch,
			Transactional: r.Transactional, Control: r.Control})
	}
	return nil
}

// Append implements Log.
func (l *MemLog) Append(batch []byte) func(context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Fail != nil {
		if err := l.Fail(); err != nil {
			return func(context.Context) (int64, error) { return 0, err }
		}
	}
	var it record.Iterator
	it.Reset(batch)
	base := int64(len(l.recs))
	for it.Next() {
		r, b := it.Record(), it.Batch()
		l.recs = append(l.recs, MemRecord{Key: append([]byte(nil), r.Key...), Value: append([]byte(nil), r.Value...), ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch,
			Transactional: b.Attributes.Transactional(), Control: b.Attributes.Control()})
	}
	return func(context.Context) (int64, error) { return base, it.Err() }
}

// Close implements Log.
func (l *MemLog) Close() {}
