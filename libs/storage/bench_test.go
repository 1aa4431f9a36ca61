package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// The benchmarks measure the log against the machine in the same run and,
// more than that, in the same loop: every iteration does one operation on a
// plain file (same write size, same fdatasync policy, or a read into a
// buffer) and one on the Log, in alternating order, timing each. Disk and
// page-cache conditions drift a lot on a shared virtual machine (fsync
// latency varied 2x between consecutive runs here), so only side-by-side
// operations compare fairly. Each benchmark reports file-MB/s, log-MB/s and
// log/file-% (the log's throughput as a share of the plain file's);
// allocs/op counts only the log (the plain file path allocates nothing).
// docs/storage.md has the figures and the command.
//
// Both sides wrap at wrapBytes so a long run neither fills the disk nor
// measures writeback: the plain file is truncated and rewritten from the
// start, the log deletes its oldest segment (retention.bytes) as it rolls.

const wrapBytes = 256 << 20

func benchBatch(b *testing.B, recSize, batchSize int) []byte {
	b.Helper()
	bl := record.NewBuilder(record.CodecNone)
	value := make([]byte, recSize)
	for i := range value {
		value[i] = byte(i * 31)
	}
	key := make([]byte, 8)
	for bl.Size() < batchSize-recSize-32 {
		if err := bl.AppendKV(1_700_000_000_000, key, value); err != nil {
			b.Fatal(err)
		}
	}
	batch, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	return append([]byte(nil), batch...)
}

func benchConfig(b *testing.B, fsync bool) Config {
	cfg, err := ParseConfig(map[string]string{
		"segment.bytes": fmt.Sprint(wrapBytes / 2), "retention.bytes": fmt.Sprint(wrapBytes / 2), "retention.ms": "-1",
		"max.message.bytes": fmt.Sprint(2 << 20), "sluice.fsync.before.ack": fmt.Sprint(fsync),
	})
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// settle writes back every dirty page in the system before a benchmark
// starts, so one benchmark's page-cache writes are not written back (and
// compete for the disk) during the next one's fsyncs.
func settle() { unix.Sync() }

// pair times two operations side by side and reports their throughputs.
type pair struct {
	fileNs, logNs       int64
	fileBytes, logBytes int64
}

// run times one operation on each side, in an order that alternates with
// the iteration so neither side always follows the other.
func (p *pair) run(i int, file, log func() int64) {
	timed := func(op func() int64, ns, bytes *int64) {
		t := time.Now()
		n := op()
		*ns += time.Since(t).Nanoseconds()
		*bytes += n
	}
	if i%2 == 0 {
		timed(file, &p.fileNs, &p.fileBytes)
		timed(log, &p.logNs, &p.logBytes)
	} else {
		timed(log, &p.logNs, &p.logBytes)
		timed(file, &p.fileNs, &p.fileBytes)
	}
}

func (p *pair) report(b *testing.B) {
	if p.fileNs == 0 || p.logNs == 0 {
		return
	}
	file := float64(p.fileBytes) / (float64(p.fileNs) / 1e9) / 1e6
	log := float64(p.logBytes) / (float64(p.logNs) / 1e9) / 1e6
	b.ReportMetric(file, "file-MB/s")
	b.ReportMetric(log, "log-MB/s")
	b.ReportMetric(100*log/file, "log/file-%")
}

func BenchmarkAppend(b *testing.B) {
	for _, rec := range []int{1024, 100} {
		for _, batchSize := range []int{16 << 10, 1 << 20} {
			for _, sync := range []string{"none", "batch"} {
				name := fmt.Sprintf("rec=%s/batch=%s/sync=%s", sizeName(rec), sizeName(batchSize), sync)
				b.Run(name, func(b *testing.B) { benchAppend(b, rec, batchSize, sync == "batch") })
			}
		}
	}
}

func benchAppend(b *testing.B, recSize, batchSize int, fsync bool) {
	batch := benchBatch(b, recSize, batchSize)
	n := int64(len(batch))
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "plain"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	l, err := Open(b.TempDir(), benchConfig(b, fsync), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var pos int64
	segs := l.NumSegments()
	plain := func() int64 {
		if pos+n > wrapBytes/2 {
			if err := f.Truncate(0); err != nil {
				b.Fatal(err)
			}
			pos = 0
		}
		if _, err := f.WriteAt(batch, pos); err != nil {
			b.Fatal(err)
		}
		pos += n
		if fsync {
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
		return n
	}
	logged := func() int64 {
		var err error
		if fsync {
			_, err = l.AppendSync(ctx, batch, 1, record.FromClient)
		} else {
			_, err = l.AppendAsLeader(batch, 1, record.FromClient)
		}
		if err != nil {
			b.Fatal(err)
		}
		if s := l.NumSegments(); s != segs {
			// A roll: delete the old segment as the plain file is truncated.
			if _, err := l.EnforceRetention(); err != nil {
				b.Fatal(err)
			}
			segs = l.NumSegments()
		}
		return n
	}
	settle()
	var p pair
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.run(i, plain, logged)
	}
	p.report(b)
}

// BenchmarkFetch reads a page-cached segment of 16 KiB batches in 1 MiB
// fetches. The file side reads the file into a buffer (one copy, the
// kernel's). The log side reads through the index: with reads through the
// map (map) it gets chunks of the memory map, which the benchmark copies
// into a buffer as grpc-go copies them into its write buffer; with copied
// reads (copy, Options.Copies) the chunks are that buffer. One copy on
// each side.
func BenchmarkFetch(b *testing.B) {
	b.Run("map", func(b *testing.B) { benchmarkFetch(b, nil) })
	b.Run("copy", func(b *testing.B) { benchmarkFetch(b, NewReadCopies(64<<20, &benchPool{})) })
}

func benchmarkFetch(b *testing.B, copies *ReadCopies) {
	const fetch = 1 << 20
	dir := b.TempDir()
	cfg := benchConfig(b, false)
	cfg.RetentionBytes = -1
	l, err := Open(dir, cfg, Options{Copies: copies})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b, 1024, 16<<10)
	for l.Size() < wrapBytes/2-int64(len(batch)) {
		if _, err := l.AppendAsLeader(batch, 1, record.FromClient); err != nil {
			b.Fatal(err)
		}
	}
	end := l.LogEndOffset()
	size := l.Size()
	f, err := os.Open(l.segs[0].path(logSuffix))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fileBuf := make([]byte, fetch)
	logBuf := make([]byte, fetch+len(batch))
	var pos, offset int64
	plain := func() int64 {
		if pos+fetch > size {
			pos = 0
		}
		if _, err := f.ReadAt(fileBuf, pos); err != nil {
			b.Fatal(err)
		}
		pos += fetch
		return fetch
	}
	logged := func() int64 {
		if offset >= end {
			offset = 0
		}
		res, err := l.Read(offset, end, fetch)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, c := range res.Chunks {
			if copies != nil {
				got += len(c.Data) // the copy is the buffer
			} else {
				got += copy(logBuf[got:], c.Data)
			}
		}
		offset = res.NextOffset
		res.Release()
		return int64(got)
	}
	// Warm both paths once over the whole segment (page cache and page
	// tables), then measure.
	for pos+fetch <= size {
		plain()
	}
	for offset < end {
		logged()
	}
	var p pair
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.run(i, plain, logged)
	}
	p.report(b)
}

// benchPool recycles buffers by capacity, as a node's gRPC pool does.
type benchPool struct{ free []*[]byte }

func (p *benchPool) Get(n int) *[]byte {
	for i, b := range p.free {
		if cap(*b) >= n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]byte, n, max(n, 2<<20))
	return &b
}

func (p *benchPool) Put(b *[]byte) { p.free = append(p.free, b) }

// BenchmarkGroupCommit appends 16 KiB batches with AppendSync from 32
// goroutines at once, as many producers do: group commit lets one
// fdatasync cover every batch waiting at that moment, so throughput is far
// above one fsync per batch (compare Append/.../sync=batch).
func BenchmarkGroupCommit(b *testing.B) {
	batch := benchBatch(b, 1024, 16<<10)
	fs := vfs.NewFaultFS(vfs.OS, 1) // only to count fsyncs
	l, err := Open(b.TempDir(), benchConfig(b, true), Options{FS: fs})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	syncs := fs.Count(vfs.OpSync)
	settle()
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		own := append([]byte(nil), batch...) // appends rewrite offsets in place
		for pb.Next() {
			if _, err := l.AppendSync(context.Background(), own, 1, record.FromClient); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if n := fs.Count(vfs.OpSync) - syncs; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "batches/fsync")
	}
	if _, err := l.EnforceRetention(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSpaceGuardAdmit is the reserve check every append pays: a mutex
// and a clock read, with statfs once per refresh interval.
func BenchmarkSpaceGuardAdmit(b *testing.B) {
	g := NewSpaceGuard(SpaceGuardOptions{Dir: b.TempDir(), ReserveBytes: 1 << 20})
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Admit(16 << 10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendBesideColdReads appends 16 KiB batches while another
// goroutine reads 1 MiB fetches of older segments whose pages it drops
// from the cache before each read, as a consumer catching up from disk
// does. An append must not wait for a read's disk time: the log's append
// latency is reported (p50, p99 in µs) beside a plain file's write of the
// same size, timed in the same loop.
func BenchmarkAppendBesideColdReads(b *testing.B) {
	const (
		fetch   = 1 << 20
		segSize = 16 << 20
		filled  = 128 << 20
	)
	cfg, err := ParseConfig(map[string]string{
		"segment.bytes": fmt.Sprint(segSize), "retention.bytes": "-1", "retention.ms": "-1",
		"max.message.bytes": fmt.Sprint(2 << 20),
	})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	l, err := Open(filepath.Join(dir, "log"), cfg, Options{Copies: NewReadCopies(64<<20, &benchPool{})})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b, 1024, 16<<10)
	for l.Size() < filled {
		if _, err := l.AppendAsLeader(batch, 1, record.FromClient); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	readEnd := l.LogEndOffset()
	var cold []*os.File
	for _, s := range l.segs[:len(l.segs)-1] {
		f, err := os.Open(s.path(logSuffix))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		cold = append(cold, f)
	}
	plain, err := os.Create(filepath.Join(dir, "plain"))
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()

	ctx, cancel := context.WithCancel(context.Background())
	readerDone := make(chan int)
	go func() {
		reads := 0
		defer func() { readerDone <- reads }()
		var offset int64
		for ctx.Err() == nil {
			if offset >= readEnd {
				offset = 0
			}
			for _, f := range cold {
				_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) // best effort: the read is then mostly cold
			}
			res, err := l.Read(offset, readEnd, fetch)
			if err != nil {
				b.Error(err)
				return
			}
			offset = res.NextOffset
			res.Release()
			reads++
		}
	}()
	var logLat, fileLat []time.Duration
	var pos int64
	for i := 0; b.Loop(); i++ {
		appendLog := func() {
			t0 := time.Now()
			if _, err := l.AppendAsLeader(batch, 1, record.FromClient); err != nil {
				b.Fatal(err)
			}
			logLat = append(logLat, time.Since(t0))
		}
		writeFile := func() {
			t0 := time.Now()
			if _, err := plain.WriteAt(batch, pos); err != nil {
				b.Fatal(err)
			}
			fileLat = append(fileLat, time.Since(t0))
			if pos += int64(len(batch)); pos >= filled {
				pos = 0
			}
		}
		if i%2 == 0 {
			appendLog()
			writeFile()
		} else {
			writeFile()
			appendLog()
		}
	}
	cancel()
	reads := <-readerDone
	q := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds())
	}
	b.ReportMetric(q(logLat, 0.5), "log-p50-µs")
	b.ReportMetric(q(logLat, 0.99), "log-p99-µs")
	b.ReportMetric(q(fileLat, 0.5), "file-p50-µs")
	b.ReportMetric(q(fileLat, 0.99), "file-p99-µs")
	b.ReportMetric(float64(reads), "cold-reads")
}
