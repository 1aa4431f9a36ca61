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

// MemRecord is one record of a MemLog.
type MemRecord struct{ Key, Value []byte }

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
func (l *MemLog) Replay(_ context.Context, start, end int64, apply func(key, value []byte, offset int64)) error {
	l.mu.Lock()
	recs := append([]MemRecord(nil), l.recs[start:end]...)
	l.mu.Unlock()
	for i, r := range recs {
		apply(r.Key, r.Value, start+int64(i))
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
		r := it.Record()
		l.recs = append(l.recs, MemRecord{append([]byte(nil), r.Key...), append([]byte(nil), r.Value...)})
	}
	return func(context.Context) (int64, error) { return base, it.Err() }
}

// Close implements Log.
func (l *MemLog) Close() {}
