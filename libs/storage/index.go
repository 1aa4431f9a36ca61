package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// Index files use Kafka's entry layouts, big-endian:
//
//	offset index: relative offset uint32, file position uint32        (8 bytes)
//	time index:   timestamp int64, relative offset uint32             (12 bytes)
//
// Both are sparse: an offset entry is added once index.interval.bytes of log
// have been written since the last one, keyed by the base offset of the
// batch that starts at the entry's position. A time entry is added at the
// same moments when the segment's largest timestamp has grown, and records
// that largest timestamp and the base offset of the batch that carries it;
// so every batch before that entry's batch has timestamps at most the
// entry's timestamp.
const (
	offsetEntrySize = 8
	timeEntrySize   = 12
	// indexWriteChunk is how many bytes of new index entries accumulate in
	// memory before the active segment writes them to its index file;
	// recovery rebuilds entries that never reached the file.
	indexWriteChunk = 4096
)

// index is an offset or time index of one segment. The active segment's
// entries live on the heap and reach the file in chunks; a sealed segment's
// entries are a read-only memory map of the file. Entries are read under the
// log's read lock and changed under its write lock.
type index struct {
	entrySize int
	base      int64
	file      vfs.File
	buf       []byte
	mapping   vfs.Mapping // set while buf is mapped
	persisted int         // bytes of buf already written to the file
}

func (x *index) len() int { return len(x.buf) / x.entrySize }

func (x *index) offsetEntry(i int) (offset, pos int64) {
	e := x.buf[i*offsetEntrySize:]
	return x.base + int64(binary.BigEndian.Uint32(e)), int64(binary.BigEndian.Uint32(e[4:]))
}

func (x *index) timeEntry(i int) (ts, offset int64) {
	e := x.buf[i*timeEntrySize:]
	return int64(binary.BigEndian.Uint64(e)), x.base + int64(binary.BigEndian.Uint32(e[8:]))
}

// appendOffset adds an offset entry; the caller keeps entries increasing.
func (x *index) appendOffset(offset, pos int64) {
	var e [offsetEntrySize]byte
	binary.BigEndian.PutUint32(e[:], uint32(offset-x.base))
	binary.BigEndian.PutUint32(e[4:], uint32(pos))
	x.buf = append(x.buf, e[:]...)
}

// appendTime adds a time entry; the caller keeps timestamps increasing.
func (x *index) appendTime(ts, offset int64) {
	var e [timeEntrySize]byte
	binary.BigEndian.PutUint64(e[:], uint64(ts))
	binary.BigEndian.PutUint32(e[8:], uint32(offset-x.base))
	x.buf = append(x.buf, e[:]...)
}

// lookupOffset returns the last entry whose offset is at most target, or
// (base, 0), the segment start, if there is none.
func (x *index) lookupOffset(target int64) (offset, pos int64) {
	n := x.len()
	i := sort.Search(n, func(i int) bool {
		off, _ := x.offsetEntry(i)
		return off > target
	})
	if i == 0 {
		return x.base, 0
	}
	return x.offsetEntry(i - 1)
}

// lookupTime returns the offset of the last entry whose timestamp is below
// target: no record before that entry's batch can have a timestamp of at
// least target. It returns the segment base if there is no such entry.
func (x *index) lookupTime(target int64) int64 {
	n := x.len()
	i := sort.Search(n, func(i int) bool {
		ts, _ := x.timeEntry(i)
		return ts >= target
	})
	if i == 0 {
		return x.base
	}
	_, off := x.timeEntry(i - 1)
	return off
}

// lastTime returns the last time entry, if any.
func (x *index) lastTime() (ts, offset int64, ok bool) {
	if n := x.len(); n > 0 {
		ts, offset = x.timeEntry(n - 1)
		return ts, offset, true
	}
	return -1, -1, false
}

// lastOffset returns the last offset entry, if any.
func (x *index) lastOffset() (offset, pos int64, ok bool) {
	if n := x.len(); n > 0 {
		offset, pos = x.offsetEntry(n - 1)
		return offset, pos, true
	}
	return 0, 0, false
}

// persist writes entries not yet in the file.
func (x *index) persist() error {
	if x.persisted >= len(x.buf) {
		return nil
	}
	if _, err := x.file.WriteAt(x.buf[x.persisted:], int64(x.persisted)); err != nil {
		return err
	}
	x.persisted = len(x.buf)
	return nil
}

// truncateEntries keeps the first n entries, in memory and in the file.
func (x *index) truncateEntries(n int) error {
	if n >= x.len() {
		return nil
	}
	if err := x.toHeap(); err != nil {
		return err
	}
	x.buf = x.buf[:n*x.entrySize]
	if x.persisted > len(x.buf) {
		if err := x.file.Truncate(int64(len(x.buf))); err != nil {
			return err
		}
		x.persisted = len(x.buf)
	}
	return nil
}

// truncateOffsetsFrom drops offset entries at or after position pos.
func (x *index) truncateOffsetsFrom(pos int64) error {
	n := sort.Search(x.len(), func(i int) bool {
		_, p := x.offsetEntry(i)
		return p >= pos
	})
	return x.truncateEntries(n)
}

// truncateTimesFrom drops time entries for offsets at or after offset.
func (x *index) truncateTimesFrom(offset int64) error {
	n := sort.Search(x.len(), func(i int) bool {
		_, o := x.timeEntry(i)
		return o >= offset
	})
	return x.truncateEntries(n)
}

// seal writes every entry, cuts the file to them and replaces the heap
// copy with a read-only map of the file, so sealed segments cost no heap.
func (x *index) seal() error {
	if x.mapping != nil {
		return nil
	}
	if err := x.persist(); err != nil {
		return err
	}
	if err := x.file.Truncate(int64(len(x.buf))); err != nil {
		return err
	}
	if len(x.buf) == 0 {
		x.buf = nil
		return nil
	}
	m, err := x.file.Map(len(x.buf))
	if err != nil {
		return err
	}
	x.mapping = m
	x.buf = m.Bytes()[:len(x.buf)]
	return nil
}

// toHeap copies mapped entries back to the heap, for a sealed segment that
// becomes active again after truncation.
func (x *index) toHeap() error {
	if x.mapping == nil {
		return nil
	}
	heap := make([]byte, len(x.buf), len(x.buf)+indexWriteChunk)
	copy(heap, x.buf)
	x.buf = heap
	m := x.mapping
	x.mapping = nil
	return m.Close()
}

// close unmaps and closes the index file.
func (x *index) close() error {
	var err error
	if x.mapping != nil {
		err = x.mapping.Close()
		x.mapping = nil
	}
	x.buf = nil
	if cerr := x.file.Close(); err == nil {
		err = cerr
	}
	return err
}

// validOffsetEntries returns how many leading entries of an offset index
// are sane for a segment with the given base and size: offsets increasing
// from base and within 32 bits of it, positions increasing and inside the
// segment. A file that fails here is rebuilt from the log.
func validOffsetEntries(buf []byte, base, segSize int64) int {
	n := len(buf) / offsetEntrySize
	prevOff, prevPos := int64(-1), int64(-1)
	for i := 0; i < n; i++ {
		e := buf[i*offsetEntrySize:]
		rel := int64(binary.BigEndian.Uint32(e))
		pos := int64(binary.BigEndian.Uint32(e[4:]))
		if rel <= prevOff || pos <= prevPos || pos >= segSize {
			return i
		}
		prevOff, prevPos = rel, pos
	}
	return n
}

// validTimeEntries returns how many leading entries of a time index are
// sane: timestamps increasing, offsets non-decreasing, inside the segment's
// offset range [base, next).
func validTimeEntries(buf []byte, base, next int64) int {
	n := len(buf) / timeEntrySize
	prevTS, prevOff := int64(math.MinInt64), int64(-1)
	for i := 0; i < n; i++ {
		e := buf[i*timeEntrySize:]
		ts := int64(binary.BigEndian.Uint64(e))
		rel := int64(binary.BigEndian.Uint32(e[8:]))
		if ts <= prevTS || ts < 0 || rel < prevOff || base+rel >= next {
			return i
		}
		prevTS, prevOff = ts, rel
	}
	return n
}

// loadIndex reads an index file. mapped selects a read-only memory map
// (sealed segments) over a heap copy (the active segment). It returns the
// index with every entry the file holds; callers check and trim them.
func loadIndex(f vfs.File, entrySize int, base int64, mapped bool) (*index, error) {
	x := &index{entrySize: entrySize, base: base, file: f}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	size -= size % int64(entrySize)
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("index %s of %d bytes is too large", f.Name(), size)
	}
	if mapped && size > 0 {
		m, err := f.Map(int(size))
		if err != nil {
			return nil, err
		}
		x.mapping = m
		x.buf = m.Bytes()[:size]
	} else {
		x.buf = make([]byte, size, size+indexWriteChunk)
		if _, err := f.ReadAt(x.buf, 0); err != nil {
			return nil, err
		}
	}
	x.persisted = int(size)
	return x, nil
}
