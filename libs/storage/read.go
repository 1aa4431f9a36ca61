package storage

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// Chunk is a run of whole batches, read with no decode: a slice of a
// segment's memory map (the page cache itself), or, when the log copies
// reads (Options.Copies), a buffer the bytes were read into with one
// positional read. It stays valid until Release, even if the segment is
// deleted, compacted away or the log closed meanwhile. Release it
// promptly: truncating a segment waits for the readers of its map, and a
// copy holds memory.
type Chunk struct {
	// Data is the batches' bytes. Do not write to it.
	Data []byte
	m    *segMap
	// buf is the copy Data is in, from copies.
	buf    *[]byte
	copies *ReadCopies
}

// Release gives the chunk's bytes back. Calling it twice is a no-op.
func (c *Chunk) Release() {
	if c.m != nil {
		c.m.release()
		c.m = nil
	}
	if c.buf != nil {
		c.copies.put(c.buf)
		c.buf, c.copies = nil, nil
	}
	c.Data = nil
}

// Take moves the chunk out of its ReadResult: it returns a chunk that holds
// the bytes and the map reference, and empties c, so a later
// ReadResult.Release skips it. The gRPC fetch path takes each chunk and
// hands its Release to the buffer that carries it to the wire.
func (c *Chunk) Take() Chunk {
	out := *c
	*c = Chunk{}
	return out
}

// ReadResult is what Read returns: chunks of whole batches in offset order.
type ReadResult struct {
	// Chunks hold the batches, one chunk per segment touched.
	Chunks []Chunk
	// NextOffset is the offset to read next: one past the last batch
	// returned, or the requested offset if nothing was returned.
	NextOffset int64
	// Bytes is the total size of the chunks.
	Bytes int
	// LogStartOffset and LogEndOffset are the log's bounds at the time of
	// the read.
	LogStartOffset, LogEndOffset int64
}

// Release releases every chunk not taken, and recycles the result: it must
// not be used afterwards.
func (r *ReadResult) Release() {
	for i := range r.Chunks {
		r.Chunks[i].Release()
	}
	r.Chunks = r.Chunks[:0]
	readResults.Put(r)
}

// AppendTo appends the bytes of every chunk to dst (a copy, for tests and
// callers that need one buffer).
func (r *ReadResult) AppendTo(dst []byte) []byte {
	for _, c := range r.Chunks {
		dst = append(dst, c.Data...)
	}
	return dst
}

// WriteTo writes the chunks to w.
func (r *ReadResult) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, c := range r.Chunks {
		m, err := w.Write(c.Data)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

var readResults = sync.Pool{New: func() any { return &ReadResult{Chunks: make([]Chunk, 0, 4)} }}

// Read returns whole batches starting with the one that holds offset, up to
// maxBytes (but always at least one batch, so a consumer can make progress
// past a batch larger than its fetch size, as KIP-74 requires) and only
// batches that end before maxOffset, the caller's visibility bound: the high
// watermark for consumers, the last stable offset for read-committed ones,
// the log end offset for followers. The bytes come straight from the page
// cache, through the segments' memory maps or, with Options.Copies, by
// positional reads into buffers: no record is decoded.
//
// An offset below the log start or above the log end fails with
// OffsetOutOfRange; an offset at the log end or at or above maxOffset
// returns no chunks. The caller must Release the result.
func (l *Log) Read(offset, maxOffset int64, maxBytes int) (*ReadResult, error) {
	var buf [maxReadSegments]segmentRead
	slack := l.conf().IndexIntervalBytes // the most a read walks before its offset
	for attempt := 0; ; attempt++ {
		res, plan, bound, err := l.planRead(buf[:0], offset, maxOffset, maxBytes+slack, attempt > 0)
		if err != nil || len(plan) == 0 {
			return res, err
		}
		if done := l.readPlan(res, plan, bound, maxBytes, slack); done || res.Bytes > 0 || attempt > 0 {
			return res, nil
		}
		// The segment holding offset had nothing from it on below its next
		// segment's base (a compacted gap, its end known only as that
		// base after a restart), and the plan stopped there: plan again
		// with the segments after it.
		res.Release()
	}
}

// readPlan walks and reads the planned segments into res, within maxBytes
// and below bound; done reports that the read reached its budget or bound.
// It releases every map the plan holds that no chunk took.
//
// The bytes below each planned size no longer change: appends write after
// them, and a truncation or compaction waits for, or leaves alone, the maps
// the plan holds. So the walk and the copies need no lock, and an append
// never waits for a read's preads or page faults.
func (l *Log) readPlan(res *ReadResult, plan []segmentRead, bound int64, maxBytes, slack int) (done bool) {
	var win copyWindow
	for i := range plan {
		sr := &plan[i]
		s, m := sr.seg, sr.m
		sr.m = nil
		data := m.data[:sr.size]
		header := func(p int64) []byte { return tail(data, p) }
		if win.reset(l.opts.Copies, s.log, data, maxBytes-res.Bytes+slack) {
			header = win.at
		}
		start, ok := s.checkPosition(sr.idxOff, sr.idxPos, sr.size, header)
		if !ok {
			l.log.Warn("offset index entry does not match the log; scanning the segment instead", "segment", s.base)
		}
		var from, to, next int64
		from, to, next, done = scanRange(header, sr.size, start, res.NextOffset, bound, maxBytes-res.Bytes, res.Bytes == 0)
		if to > from {
			if c, ok := win.chunk(from, to); ok {
				res.Chunks = append(res.Chunks, c)
				m.release()
			} else {
				res.Chunks = append(res.Chunks, Chunk{Data: data[from:to:to], m: m})
			}
			res.Bytes += int(to - from)
			res.NextOffset = next
		} else {
			m.release()
		}
		win.free()
		if done {
			break
		}
	}
	releasePlan(plan)
	return done
}

// releasePlan releases the maps of a plan that no chunk took.
func releasePlan(plan []segmentRead) {
	for i := range plan {
		if plan[i].m != nil {
			plan[i].m.release()
			plan[i].m = nil
		}
	}
}

// maxReadSegments bounds the segments one Read covers (a read returns less
// when they are smaller than its budget; the next read goes on).
const maxReadSegments = 4

// segmentRead is one segment a Read covers, as planRead took it under the
// log's lock: its map (a reference the read releases or hands to a
// chunk), its size then, and for the segment holding the read's offset the
// offset index's entry for it (position 0 when none).
type segmentRead struct {
	seg            *segment
	m              *segMap
	size           int64
	idxOff, idxPos int64
}

// planRead checks the read's offset and, under the log's read lock, takes
// the segments that hold offsets from it on, until they hold want bytes
// past the start position: enough for the read's budget, since the walk
// skips at most an index interval before its offset. past leaves the
// segment holding offset out of that count. It returns the result to fill
// (its bounds set) and the visibility bound capped at the log end.
func (l *Log) planRead(plan []segmentRead, offset, maxOffset int64, want int, past bool) (*ReadResult, []segmentRead, int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.check(); err != nil {
		return nil, nil, 0, err // offline
	}
	if l.closed {
		return nil, nil, 0, errClosed
	}
	if offset < l.logStart || offset > l.leo {
		return nil, nil, 0, errs.New(errs.OffsetOutOfRange, "offset %d is outside the log [%d, %d)", offset, l.logStart, l.leo)
	}
	res := readResults.Get().(*ReadResult)
	res.NextOffset, res.Bytes, res.LogStartOffset, res.LogEndOffset = offset, 0, l.logStart, l.leo
	maxOffset = min(maxOffset, l.leo)
	if offset >= maxOffset {
		return res, nil, maxOffset, nil
	}
	covered := int64(0)
	for si := max(l.segmentFor(offset), 0); si < len(l.segs) && len(plan) < cap(plan) && covered < int64(want); si++ {
		s := l.segs[si]
		if s.size == 0 || s.next <= offset {
			continue // nothing at or after offset (a compacted gap, or offset at its end)
		}
		if s.base >= maxOffset {
			break
		}
		m, err := s.acquireMap(s.size)
		if err != nil {
			releasePlan(plan)
			res.Release()
			return nil, nil, 0, l.fail("mapping "+s.log.Name(), err)
		}
		sr := segmentRead{seg: s, m: m, size: s.size, idxOff: s.base}
		if s.base <= offset {
			sr.idxOff, sr.idxPos = s.indexPosition(offset)
		}
		plan = append(plan, sr)
		if !past || s.base > offset {
			covered += sr.size - sr.idxPos
		}
	}
	return res, plan, maxOffset, nil
}

// scanRange walks batch headers from position start of a segment of size
// bytes, as header returns them, and returns the byte range of the batches
// to return and the offset after the last of them: it skips batches that
// end before offset and stops before a batch that reaches maxOffset or
// would exceed budget bytes (unless it would be the read's first batch,
// when first is set). done reports that the read is complete: bound or
// budget reached, or bytes that are not a whole batch.
func scanRange(header func(pos int64) []byte, size, start, offset, maxOffset int64, budget int, first bool) (from, to, next int64, done bool) {
	pos := start
	from = -1
	for pos+record.BatchHeaderSize <= size {
		b := header(pos)
		n := int64(record.BatchSize(b))
		if n < record.BatchHeaderSize || pos+n > size {
			done = true
			break
		}
		last := record.BaseOffset(b) + int64(record.LastOffsetDelta(b))
		if last < offset {
			pos += n
			continue
		}
		if last >= maxOffset {
			done = true
			break
		}
		taken := int64(0)
		if from >= 0 {
			taken = pos - from
		}
		if taken+n > int64(budget) && !(first && from < 0) {
			done = true
			break
		}
		if from < 0 {
			from = pos
		}
		pos += n
		next = last + 1
	}
	if from < 0 {
		return pos, pos, offset, done
	}
	return from, pos, next, done
}

// OffsetForTimestamp returns the offset and timestamp of the first record
// whose timestamp is at least ts (ListOffsets by time). It finds the first
// segment whose largest timestamp reaches ts, narrows the position with the
// time and offset indexes, walks batch headers to the first batch whose max
// timestamp reaches ts, and decodes only that batch. found is false if no
// record is that recent.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	if err := l.check(); err != nil {
		return 0, 0, false, err
	}
	l.mu.RLock()
	var (
		m      *segMap
		batch  []byte
		minOff int64
	)
	for _, s := range l.segs {
		if s.maxTS < ts || s.size == 0 {
			continue
		}
		startOff := max(s.timeIdx.lookupTime(ts), l.logStart)
		if m, err = s.acquireMap(s.size); err != nil {
			l.mu.RUnlock()
			return 0, 0, false, l.fail("mapping "+s.log.Name(), err)
		}
		data := m.data[:s.size]
		pos, _ := s.startPosition(startOff, func(p int64) []byte { return tail(data, p) })
		for pos+record.BatchHeaderSize <= s.size {
			n := int64(record.BatchSize(data[pos:]))
			if n < record.BatchHeaderSize || pos+n > s.size {
				break
			}
			b := data[pos : pos+n]
			h, _ := record.ParseBatchHeader(b)
			if h.MaxTimestamp >= ts && h.LastOffset() >= l.logStart {
				batch = b
				break
			}
			pos += n
		}
		if batch != nil {
			break
		}
		m.release()
		m = nil
	}
	minOff = l.logStart
	l.mu.RUnlock()
	if batch == nil {
		return 0, 0, false, nil
	}
	defer m.release()
	it := record.Iterator{DecompressLimit: l.opts.DecompressLimit}
	it.Reset(batch)
	for it.Next() {
		r := it.Record()
		if r.Timestamp >= ts && r.Offset >= minOff {
			return r.Offset, r.Timestamp, true, nil
		}
	}
	if it.Err() != nil {
		return 0, 0, false, it.Err()
	}
	// Every record left in the batch was compacted away or is older; the
	// batch's max timestamp still reached ts, so answer its last offset.
	h, _ := record.ParseBatchHeader(batch)
	return h.LastOffset(), h.MaxTimestamp, true, nil
}

// tail returns data[p:], or nil if p is past the end.
func tail(data []byte, p int64) []byte {
	if p < 0 || p >= int64(len(data)) {
		return nil
	}
	return data[p:]
}

// ReadCopies makes a node's logs read with positional reads into pooled
// buffers instead of handing out slices of their segments' maps, within a
// budget of bytes held by unreleased copies; beyond it reads go through the
// map. A fetch that sends the bytes on copies them anyway (grpc-go into its
// write buffer, or the kernel into a socket), and on a virtual machine that
// shadows page tables reading a page through a map made for it is dear:
// copying a cached 1 GiB segment through a fresh map ran at 2.3-2.5 GB/s,
// and touching one page per 256 KiB of it cost 16-21 µs a page, against
// 17-21 GB/s and 2.3 µs for pread (docs/performance.md, "Copying fetched
// chunks"). A copy also lets its segment's map go at once. The walk over
// batch headers reads them from the copy too, so a read costs no more
// system calls than the chunks it returns, plus one to find the start.
type ReadCopies struct {
	limit     int64
	pool      BufferPool
	inFlight  atomic.Int64
	fallbacks [2]atomic.Int64 // by FallbackReason
}

// FallbackReason says why a segment's read went through its map.
type FallbackReason int

const (
	// FallbackBudget: the copies held at once had reached the budget.
	FallbackBudget FallbackReason = iota
	// FallbackReadFailed: the positional read failed or came up short
	// (the segment was deleted meanwhile, or an I/O error).
	FallbackReadFailed
)

// String names the reason for metrics.
func (r FallbackReason) String() string {
	if r == FallbackBudget {
		return "budget"
	}
	return "read_failed"
}

// BufferPool hands out byte buffers (mem.BufferPool has this shape).
type BufferPool interface {
	// Get returns a buffer of length size.
	Get(size int) *[]byte
	// Put recycles a buffer from Get.
	Put(*[]byte)
}

// NewReadCopies returns a budget of limit bytes of copies drawn from pool,
// or nil (reads through the maps) when limit is 0 or less.
func NewReadCopies(limit int64, pool BufferPool) *ReadCopies {
	if limit <= 0 {
		return nil
	}
	return &ReadCopies{limit: limit, pool: pool}
}

// InFlight returns the bytes of buffers handed out and not yet released.
func (c *ReadCopies) InFlight() int64 { return c.inFlight.Load() }

// Limit returns the budget: the most bytes of copies held at once.
func (c *ReadCopies) Limit() int64 { return c.limit }

// Fallbacks returns how many segment reads went through the map for
// reason instead of copying.
func (c *ReadCopies) Fallbacks(reason FallbackReason) int64 { return c.fallbacks[reason].Load() }

// get returns a buffer of length n, or nil when the budget has no room
// and force is false.
func (c *ReadCopies) get(n int, force bool) *[]byte {
	if c.inFlight.Add(int64(n)) > c.limit && !force {
		c.inFlight.Add(-int64(n))
		return nil
	}
	b := c.pool.Get(n)
	c.inFlight.Add(int64(cap(*b) - n)) // count what the pool handed out
	return b
}

func (c *ReadCopies) put(b *[]byte) {
	c.inFlight.Add(-int64(cap(*b)))
	c.pool.Put(b)
}

// growStep is the least a copy window grows by: room for the next headers
// without reading much past what the read returns.
const growStep = 64 << 10

// copyWindow is the part of one segment a copying Read has read: bytes
// [from, from+len(buf)) of the file. It is placed by the first header the
// read asks for (the offset index's position, or the segment's start) and
// grows as the walk and the chunk need, so the batches are read once and
// their headers walked in the copy.
type copyWindow struct {
	copies *ReadCopies
	f      vfs.File
	data   []byte // the segment's map, as long as the segment
	want   int    // bytes to read when placed
	buf    *[]byte
	from   int64
	failed bool // a read failed: the rest of the segment goes through the map
}

// reset starts a window over a segment for a read of about want bytes; it
// reports whether the read copies (copies set).
func (w *copyWindow) reset(copies *ReadCopies, f vfs.File, data []byte, want int) bool {
	w.free()
	*w = copyWindow{copies: copies, f: f, data: data, want: max(want, record.BatchHeaderSize)}
	return copies != nil
}

// free gives back a buffer no chunk took.
func (w *copyWindow) free() {
	if w.buf != nil {
		w.copies.put(w.buf)
		w.buf = nil
	}
}

// at returns the segment's bytes from pos on, at least a batch header's
// worth where the segment has them (nil past its end): from the copy, or
// from the map when copying failed or the budget has no room. They are
// valid until the next call.
func (w *copyWindow) at(pos int64) []byte {
	size := int64(len(w.data))
	if pos < 0 || pos >= size {
		return nil
	}
	if !w.ensure(pos, min(pos+record.BatchHeaderSize, size)) {
		return w.data[pos:]
	}
	return (*w.buf)[pos-w.from:]
}

// chunk moves the copy of [from, to) into a chunk; false if there is none
// (the read goes through the map).
func (w *copyWindow) chunk(from, to int64) (Chunk, bool) {
	if w.copies == nil || !w.ensure(from, to) {
		return Chunk{}, false
	}
	b := (*w.buf)[from-w.from : to-w.from : to-w.from]
	c := Chunk{Data: b, buf: w.buf, copies: w.copies}
	w.buf = nil
	return c, true
}

// ensure makes the window hold [pos, end): placed at pos if it holds
// nothing before pos, else grown to end (and a little beyond, for the
// headers that follow).
func (w *copyWindow) ensure(pos, end int64) bool {
	if w.copies == nil || w.failed {
		return false
	}
	if w.buf != nil && pos >= w.from && end <= w.from+int64(len(*w.buf)) {
		return true
	}
	size := int64(len(w.data))
	if w.buf == nil || pos < w.from {
		w.free()
		n := min(max(int64(w.want), end-pos), size-pos)
		if w.buf = w.copies.get(int(n), false); w.buf == nil {
			w.failed = true
			w.copies.fallbacks[FallbackBudget].Add(1)
			return false
		}
		w.from = pos
		return w.read(0)
	}
	// Grow: a walk past the first read (a gap before the offset longer
	// than the index interval, or a first batch larger than the read's
	// budget, KIP-74). The budget may overshoot by that batch.
	have := len(*w.buf)
	n := min(max(end-w.from, int64(have)+growStep), size-w.from)
	nb := w.copies.get(int(n), true)
	copy(*nb, *w.buf)
	w.copies.put(w.buf)
	w.buf = nb
	return w.read(have)
}

// read fills the window from its byte at.
func (w *copyWindow) read(at int) bool {
	b := (*w.buf)[at:]
	if n, err := w.f.ReadAt(b, w.from+int64(at)); n != len(b) || (err != nil && err != io.EOF) {
		w.free()
		w.failed = true
		w.copies.fallbacks[FallbackReadFailed].Add(1)
		return false
	}
	return true
}
