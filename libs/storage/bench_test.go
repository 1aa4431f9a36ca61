package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/libs/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// The benchmarks measure the log against the machine in the same run:
// impl=file is a plain file written with the same write sizes (and the same
// fdatasync policy) or read into a buffer, impl=log is the Log. Compare with
// `benchstat -col /impl`; docs/storage.md has the figures and the command.
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

func BenchmarkAppend(b *testing.B) {
	for _, rec := range []int{1024, 100} {
		for _, batchSize := range []int{16 << 10, 1 << 20} {
			for _, sync := range []string{"none", "batch"} {
				name := fmt.Sprintf("rec=%s/batch=%s/sync=%s", sizeName(rec), sizeName(batchSize), sync)
				b.Run(name+"/impl=file", func(b *testing.B) { benchPlainWrite(b, rec, batchSize, sync == "batch") })
				b.Run(name+"/impl=log", func(b *testing.B) { benchLogAppend(b, rec, batchSize, sync == "batch") })
			}
		}
	}
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

func benchPlainWrite(b *testing.B, recSize, batchSize int, fsync bool) {
	batch := benchBatch(b, recSize, batchSize)
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "plain"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	var pos int64
	for b.Loop() {
		if pos+int64(len(batch)) > wrapBytes/2 {
			if err := f.Truncate(0); err != nil {
				b.Fatal(err)
			}
			pos = 0
		}
		if _, err := f.WriteAt(batch, pos); err != nil {
			b.Fatal(err)
		}
		pos += int64(len(batch))
		if fsync {
			if err := fdatasyncFile(f); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchLogAppend(b *testing.B, recSize, batchSize int, fsync bool) {
	batch := benchBatch(b, recSize, batchSize)
	l, err := Open(b.TempDir(), benchConfig(b, fsync), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	segs := l.NumSegments()
	for b.Loop() {
		if fsync {
			_, err = l.AppendSync(ctx, batch, 1, record.FromClient)
		} else {
			_, err = l.AppendAsLeader(batch, 1, record.FromClient)
		}
		if err != nil {
			b.Fatal(err)
		}
		if n := l.NumSegments(); n != segs {
			// A roll: delete the old segment as the plain file is truncated.
			if _, err := l.EnforceRetention(); err != nil {
				b.Fatal(err)
			}
			segs = l.NumSegments()
		}
	}
}

// fdatasyncFile syncs a plain file with the system call the log uses.
func fdatasyncFile(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// BenchmarkFetch reads a page-cached segment of 16 KiB batches in 1 MiB
// fetches. impl=file reads the file into a buffer (one copy, the kernel's);
// impl=log reads through the index and hands out chunks of the memory map,
// which the benchmark copies into a buffer as gRPC copies them into its
// write buffer: one copy on each side.
func BenchmarkFetch(b *testing.B) {
	const fetch = 1 << 20
	dir := b.TempDir()
	cfg := benchConfig(b, false)
	cfg.RetentionBytes = -1
	l, err := Open(dir, cfg, Options{})
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
	path := l.segs[0].path(logSuffix)
	size := l.Size()
	buf := make([]byte, fetch+len(batch))

	b.Run("impl=file", func(b *testing.B) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(fetch)
		b.ReportAllocs()
		var pos int64
		for b.Loop() {
			if pos+fetch > size {
				pos = 0
			}
			if _, err := f.ReadAt(buf[:fetch], pos); err != nil {
				b.Fatal(err)
			}
			pos += fetch
		}
	})
	b.Run("impl=log", func(b *testing.B) {
		var offset, bytes int64
		b.ReportAllocs()
		for b.Loop() {
			if offset >= end {
				offset = 0
			}
			res, err := l.Read(offset, end, fetch)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, c := range res.Chunks {
				n += copy(buf[n:], c.Data)
			}
			bytes += int64(n)
			offset = res.NextOffset
			res.Release()
		}
		b.SetBytes(bytes / int64(b.N))
	})
}

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
