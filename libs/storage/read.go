package storage

import (
	"io"
	"sync"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// Chunk is a run of whole batches, a slice of a segment's memory map: the
// page cache itself, with no copy and no decode. It stays valid until
// Release, even if the segment is deleted, compacted away or the log closed
// meanwhile. Release it promptly: truncating a segment waits for the
// readers of its map.
type Chunk struct {
	// Data is the batches' bytes. Do not write to it.
	Data []byte
	m    *segMap
	// file and pos locate Data in the segment's log file, for CopyTo.
	file vfs.File
	pos  int64
}

// CopyTo copies the chunk's bytes into dst, which must be at least as long,
// with a positional read of the segment file: the kernel copies them out
// of the page cache. That is cheaper than reading them through the map
// wherever touching mapped pages is dear: on a virtual machine whose
// hypervisor shadows the guest's page tables, copying 1 GiB of cached
// segment through its map ran at 2.3-2.5 GB/s, through pread at 17-21 GB/s
// (docs/performance.md, "Copying fetched chunks"). A read that fails or
// comes up short (a deletion closed the file meanwhile) copies from the
// map, which stays valid while the chunk is held.
func (c *Chunk) CopyTo(dst []byte) {
	dst = dst[:len(c.Data)]
	if c.file != nil {
		if n, err := c.file.ReadAt(dst, c.pos); n == len(dst) && (err == nil || err == io.EOF) {
			return
		}
	}
	copy(dst, c.Data)
}

// Release gives the chunk's bytes back. Calling it twice is a no-op.
func (c *Chunk) Release() {
	if c.m != nil {
		c.m.release()
		c.m = nil
	}
	c.Data, c.file = nil, nil
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
// cache through the segments' memory maps: no record is decoded or copied.
//
// An offset below the log start or above the log end fails with
// OffsetOutOfRange; an offset at the log end or at or above maxOffset
// returns no chunks. The caller must Release the result.
func (l *Log) Read(offset, maxOffset int64, maxBytes int) (*ReadResult, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, errClosed
	}
	if offset < l.logStart || offset > l.leo {
		return nil, errs.New(errs.OffsetOutOfRange, "offset %d is outside the log [%d, %d)", offset, l.logStart, l.leo)
	}
	res := readResults.Get().(*ReadResult)
	res.NextOffset, res.Bytes, res.LogStartOffset, res.LogEndOffset = offset, 0, l.logStart, l.leo
	maxOffset = min(maxOffset, l.leo)
	if offset >= maxOffset {
		return res, nil
	}
	hr := headerReaders.Get().(*headerReader)
	defer hr.done()
	for si := max(l.segmentFor(offset), 0); si < len(l.segs); si++ {
		s := l.segs[si]
		if s.size == 0 {
			continue
		}
		m, err := s.acquireMap(s.size)
		if err != nil {
			res.Release()
			return nil, l.fail("mapping "+s.log.Name(), err)
		}
		data := m.data[:s.size]
		hr.reset(s.log, data)
		start := int64(0)
		if s.base <= offset {
			var ok bool
			if start, ok = s.startPosition(offset, hr.at); !ok {
				l.log.Warn("offset index entry does not match the log; scanning the segment instead", "segment", s.base)
			}
		}
		from, to, next, done := scanRange(hr.at, s.size, start, res.NextOffset, maxOffset, maxBytes-res.Bytes, res.Bytes == 0)
		if to > from {
			res.Chunks = append(res.Chunks, Chunk{Data: data[from:to:to], m: m, file: s.log, pos: from})
			res.Bytes += int(to - from)
			res.NextOffset = next
		} else {
			m.release()
		}
		if done {
			break
		}
	}
	return res, nil
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

// headerReader gives Read the batch headers of a segment through
// positional reads of a page-sized window instead of the segment's map. A
// map is fresh for every segment (and after every remap of the active one),
// and on a virtual machine that shadows page tables the first touch of a
// mapped page is dear: touching one page per 256 KiB of a fresh map of a
// cached segment cost 16-21 µs a page, a pread of the page 2.3 µs
// (docs/performance.md, "Copying fetched chunks"). A walk over the headers
// of 256 KiB batches touches a page per batch. A read that fails or comes
// up short falls back to the map.
type headerReader struct {
	f    vfs.File
	data []byte // the segment's map, as long as the segment
	win  []byte
	from int64 // file position of win[0]
}

const headerWindow = 4 << 10

var headerReaders = sync.Pool{New: func() any { return &headerReader{win: make([]byte, 0, headerWindow)} }}

// reset points the reader at a segment's file and map.
func (h *headerReader) reset(f vfs.File, data []byte) {
	h.f, h.data, h.win = f, data, h.win[:0]
}

// done recycles the reader.
func (h *headerReader) done() {
	h.reset(nil, nil)
	headerReaders.Put(h)
}

// at returns the bytes from position pos on, at least a batch header's
// worth when the segment has them (nil past its end). They are valid until
// the next call.
func (h *headerReader) at(pos int64) []byte {
	size := int64(len(h.data))
	if pos < 0 || pos >= size {
		return nil
	}
	if pos >= h.from && pos+record.BatchHeaderSize <= h.from+int64(len(h.win)) {
		return h.win[pos-h.from:]
	}
	w := h.win[:min(int64(cap(h.win)), size-pos)]
	if n, err := h.f.ReadAt(w, pos); n != len(w) || (err != nil && err != io.EOF) {
		h.win = h.win[:0]
		return h.data[pos:]
	}
	h.win, h.from = w, pos
	return w
}
