package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// File names inside a partition directory, after Kafka's.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	// cleanedSuffix marks compaction output being written; swapSuffix marks
	// compaction output that is complete and replaces older segments (see
	// compact.go for the crash-safe swap).
	cleanedSuffix = ".cleaned"
	swapSuffix    = ".swap"

	recoveryCheckpointFile = "recovery-point-checkpoint"
	epochCheckpointFile    = "leader-epoch-checkpoint"
	logStartCheckpointFile = "log-start-offset-checkpoint"
	cleanerCheckpointFile  = "cleaner-offset-checkpoint"
	cleanShutdownFile      = ".clean-shutdown"
)

// segmentFileName is a segment file's name: its base offset in 20 digits so
// names sort in offset order.
func segmentFileName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentFileName returns the base offset of a segment file name with
// the given suffix.
func parseSegmentFileName(name, suffix string) (int64, bool) {
	stem, ok := strings.CutSuffix(name, suffix)
	if !ok || len(stem) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(stem, 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

// segMap is a reference-counted read-only map of a segment's log file. The
// segment holds one reference while the map is current; every chunk handed
// to a reader holds one more. The map is unmapped when the last reference
// goes, so a segment can be deleted or replaced while a fetch is still
// streaming from it; truncation, which would make mapped pages fault, waits
// for the readers of the old map first (see Log.TruncateTo).
type segMap struct {
	m        vfs.Mapping
	data     []byte
	refs     atomic.Int64
	released chan struct{}
}

func (m *segMap) acquire() { m.refs.Add(1) }

func (m *segMap) release() {
	switch n := m.refs.Add(-1); {
	case n == 0:
		_ = m.m.Close() // munmap of a valid mapping only fails on programming errors
		close(m.released)
	case n < 0:
		panic("storage: segment map released more often than acquired")
	}
}

// segment is one <base>.log file with its indexes. Fields other than the
// map are guarded by the log's locks: written under appendMu and mu, read
// under either.
type segment struct {
	base     int64
	dir      string
	log      vfs.File
	offIdx   *index
	timeIdx  *index
	size     int64 // bytes of whole batches
	next     int64 // offset after the last batch; base when empty
	maxTS    int64 // largest batch max timestamp, -1 if none
	maxTSOff int64 // base offset of the batch that has it
	sinceIdx int64 // log bytes since the last offset index entry
	created  time.Time
	sealed   bool
	mapHint  int // map length to use for the active segment
	// wbKicked is where the last append that woke the flusher for
	// write-behind left the segment (guarded by appendMu); wbStarted and
	// wbDone are where the flusher's started and finished writebacks
	// end (guarded by syncMu).
	wbKicked, wbStarted, wbDone int64

	mapMu sync.Mutex
	mp    *segMap
	// older holds maps this segment replaced with longer ones (guarded by
	// mapMu) until their readers release them: truncation must wait for
	// those readers too, since reads walk their map with no lock held.
	older []*segMap

	// badIndex is set when an index entry turned out not to point at the
	// batch it names: a damaged index file that passed the load-time
	// checks, which cannot read the whole segment. Lookups then scan from
	// the segment start; the next Open rebuilds nothing by itself, so the
	// condition is logged.
	badIndex atomic.Bool
}

// startPosition returns where to start walking batches for target: the
// index entry's position if the batch there is the one the entry names,
// else 0. header reads the first bytes of the batch at a position (nil if
// there is none). The log's lock must be held.
func (s *segment) startPosition(target int64, header func(pos int64) []byte) (int64, bool) {
	off, pos := s.indexPosition(target)
	return s.checkPosition(off, pos, s.size, header)
}

// indexPosition returns the offset index's entry for target: the offset
// and position of the last indexed batch at or before it (position 0 when
// there is none, or the index proved bad). The log's lock must be held.
func (s *segment) indexPosition(target int64) (offset, pos int64) {
	if s.badIndex.Load() {
		return s.base, 0
	}
	return s.offIdx.lookupOffset(target)
}

// checkPosition returns pos if the batch there, in a segment of size
// bytes, is the batch at offset the index entry names; else it marks the
// index bad and returns 0 and false. Position 0 needs no check.
func (s *segment) checkPosition(offset, pos, size int64, header func(pos int64) []byte) (int64, bool) {
	if pos == 0 {
		return 0, true
	}
	if h := header(pos); len(h) >= record.BatchHeaderSize && record.BaseOffset(h) == offset &&
		record.BatchSize(h) >= record.BatchHeaderSize && pos+int64(record.BatchSize(h)) <= size {
		return pos, true
	}
	s.badIndex.Store(true)
	return 0, false
}

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentFileName(s.base, suffix))
}

// createSegment creates the files of a new, empty segment.
func createSegment(fs vfs.FS, dir string, base int64, now time.Time, mapHint int) (*segment, error) {
	s := &segment{base: base, dir: dir, next: base, maxTS: -1, maxTSOff: -1, created: now, mapHint: mapHint}
	var err error
	open := func(suffix string) vfs.File {
		if err != nil {
			return nil
		}
		var f vfs.File
		f, err = fs.OpenFile(s.path(suffix), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
		return f
	}
	s.log = open(logSuffix)
	oi := open(indexSuffix)
	ti := open(timeIndexSuffix)
	if err != nil {
		for _, f := range []vfs.File{s.log, oi, ti} {
			if f != nil {
				_ = f.Close() // reporting the open error
			}
		}
		return nil, err
	}
	s.offIdx = &index{entrySize: offsetEntrySize, base: base, file: oi, buf: make([]byte, 0, indexWriteChunk)}
	s.timeIdx = &index{entrySize: timeEntrySize, base: base, file: ti, buf: make([]byte, 0, indexWriteChunk)}
	return s, nil
}

// acquireMap returns the current map, holding a reference, creating it if
// there is none or it is too short to cover need bytes.
func (s *segment) acquireMap(need int64) (*segMap, error) {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.mp != nil && int64(len(s.mp.data)) >= need {
		s.mp.acquire()
		return s.mp, nil
	}
	length := need
	if !s.sealed && int64(s.mapHint) > length {
		// Map the active segment as far as it may grow, so appends do not
		// force a remap; pages past the end of the file are never touched.
		length = int64(s.mapHint)
	}
	if length == 0 {
		length = 1
	}
	m, err := s.log.Map(int(length))
	if err != nil {
		return nil, err
	}
	mp := &segMap{m: m, data: m.Bytes(), released: make(chan struct{})}
	mp.refs.Store(2) // the segment's and the caller's
	if old := s.mp; old != nil {
		s.older = append(liveMaps(s.older), old)
		old.release()
	}
	s.mp = mp
	return mp, nil
}

// liveMaps drops the maps whose readers have all released them.
func liveMaps(ms []*segMap) []*segMap {
	live := ms[:0]
	for _, m := range ms {
		select {
		case <-m.released:
		default:
			live = append(live, m)
		}
	}
	clear(ms[len(live):])
	return live
}

// retireMap drops the segment's reference to its map, so the map goes away
// once readers release it. It returns every map of the segment that readers
// may still hold (the current one and older, shorter ones it replaced), for
// callers that must wait on their released channels before cutting the
// file.
func (s *segment) retireMap() []*segMap {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	held := liveMaps(s.older)
	s.older = nil
	if mp := s.mp; mp != nil {
		s.mp = nil
		held = append(held, mp)
		mp.release()
	}
	return held
}

// close releases the segment's map and closes its files.
func (s *segment) close() error {
	s.retireMap()
	err := s.log.Close()
	if e := s.offIdx.close(); err == nil {
		err = e
	}
	if e := s.timeIdx.close(); err == nil {
		err = e
	}
	return err
}

// remove closes the segment and deletes its files.
func (s *segment) remove(fs vfs.FS) error {
	err := s.close()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if e := fs.Remove(s.path(suffix)); e != nil && !os.IsNotExist(e) && err == nil {
			err = e
		}
	}
	return err
}
