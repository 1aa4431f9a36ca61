package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
)

// fuzzTemplate writes a small log of three segments, closed cleanly, and
// returns its files and the records it holds.
func fuzzTemplate(t testing.TB) (files map[string][]byte, end int64) {
	t.Helper()
	dir := t.TempDir()
	cfg := fuzzConfig(t)
	l, err := Open(dir, cfg, Options{})
	require.NoError(t, err)
	for i := 0; i < 30; i++ {
		_, err := l.AppendAsLeader(simpleBatch(t, 4, int64(1000+i*10)), int32(i/10), record.FromClient)
		require.NoError(t, err)
	}
	end = l.LogEndOffset()
	require.NoError(t, l.Close())
	files = map[string][]byte{}
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		require.NoError(t, err)
		files[n.Name()] = b
	}
	return files, end
}

func fuzzConfig(t testing.TB) Config {
	return testConfig(t, map[string]string{"segment.bytes": "1024", "index.interval.bytes": "100"})
}

func writeFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
}

// requireAllOffsets reads [0, end) and checks every offset is there once.
func requireAllOffsets(t *testing.T, l *Log, end int64) {
	t.Helper()
	require.Equal(t, end, l.LogEndOffset())
	offs, _ := readAll(t, l, 0, end)
	require.Len(t, offs, int(end))
	for i, o := range offs {
		require.EqualValues(t, i, o)
	}
	// Every offset is found through the index at its batch.
	for o := int64(0); o < end; o++ {
		res, err := l.Read(o, end, 1)
		require.NoError(t, err)
		h, _ := record.ParseBatchHeader(res.Chunks[0].Data)
		require.True(t, h.BaseOffset <= o && o <= h.LastOffset(), "offset %d read batch %d-%d", o, h.BaseOffset, h.LastOffset())
		res.Release()
	}
}

// FuzzIndexLoad replaces the offset and time index of a sealed segment of a
// cleanly closed log with arbitrary bytes. Open trusts the segment (it is
// below the recovery point) but must check the indexes, rebuild them if they
// are damaged, and then find every offset.
func FuzzIndexLoad(f *testing.F) {
	files, end := fuzzTemplate(f)
	idxName := segmentFileName(0, indexSuffix)
	tidxName := segmentFileName(0, timeIndexSuffix)
	for _, s := range indexSeeds(files[idxName], files[tidxName]) {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, idx, tidx []byte) {
		dir := t.TempDir()
		writeFiles(t, dir, files)
		require.NoError(t, os.WriteFile(filepath.Join(dir, idxName), idx, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, tidxName), tidx, 0o644))
		l, err := Open(dir, fuzzConfig(t), Options{})
		require.NoError(t, err)
		defer l.Close()
		requireAllOffsets(t, l, end)
		_, _, _, err = l.OffsetForTimestamp(1005)
		require.NoError(t, err)
	})
}

func indexSeeds(idx, tidx []byte) [][2][]byte {
	var seeds [][2][]byte
	seeds = append(seeds, [2][]byte{idx, tidx}, [2][]byte{nil, nil}, [2][]byte{idx[:len(idx)-3], tidx[:len(tidx)/2]})
	swapped := bytes.Clone(idx)
	if len(swapped) >= 16 {
		copy(swapped[0:8], idx[8:16])
		copy(swapped[8:16], idx[0:8])
	}
	seeds = append(seeds, [2][]byte{swapped, tidx})
	huge := bytes.Clone(idx)
	binary.BigEndian.PutUint32(huge[4:], 1<<30)
	seeds = append(seeds, [2][]byte{huge, bytes.Repeat([]byte{0xff}, 24)})
	return seeds
}

// FuzzRecoveryScan puts arbitrary bytes where recovery has to scan: after
// the last durable batch of a log that crashed (mode 0), or as the whole
// active segment of a log with no recovery point (mode 1). Open must
// succeed, keep every durable batch, and serve only whole, valid batches
// with increasing offsets.
func FuzzRecoveryScan(f *testing.F) {
	files, end := fuzzTemplate(f)
	var active string
	for name := range files {
		if _, ok := parseSegmentFileName(name, logSuffix); ok && name > active {
			active = name
		}
	}
	for _, s := range recoverySeeds(files[active]) {
		f.Add(s.mode, s.data)
	}
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		dir := t.TempDir()
		writeFiles(t, dir, files)
		require.NoError(t, os.Remove(filepath.Join(dir, cleanShutdownFile)))
		path := filepath.Join(dir, active)
		durable := end
		if mode%2 == 0 {
			fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = fh.Write(data)
			require.NoError(t, err)
			require.NoError(t, fh.Close())
		} else {
			require.NoError(t, os.WriteFile(path, data, 0o644))
			require.NoError(t, os.Remove(filepath.Join(dir, recoveryCheckpointFile)))
			base, _ := parseSegmentFileName(active, logSuffix)
			durable = base
		}
		l, err := Open(dir, fuzzConfig(t), Options{})
		require.NoError(t, err)
		defer l.Close()
		require.GreaterOrEqual(t, l.LogEndOffset(), durable)
		requireLogSound(t, l)
		offs, _ := readAll(t, l, 0, durable)
		require.Len(t, offs, int(durable))
		// The log still takes appends after the recovered end.
		epoch := int32(100)
		if e, ok := l.LatestEpoch(); ok {
			epoch = max(epoch, e)
		}
		res, err := l.AppendAsLeader(simpleBatch(t, 2, 1), epoch, record.FromClient)
		require.NoError(t, err)
		require.Equal(t, l.LogEndOffset()-2, res.FirstOffset)
	})
}

type recoverySeed struct {
	mode uint8
	data []byte
}

func recoverySeeds(activeSeg []byte) []recoverySeed {
	var seeds []recoverySeed
	b := record.NewBuilder(record.CodecNone)
	_ = b.AppendKV(5, []byte("k"), []byte("v"))
	one, _ := b.Build()
	next := bytes.Clone(one)
	record.AssignOffsets(next, 120, 9) // the template ends at 120
	seeds = append(seeds,
		recoverySeed{0, nil},
		recoverySeed{0, next},
		recoverySeed{0, next[:len(next)-1]},
		recoverySeed{0, append(bytes.Clone(next), next...)}, // a repeated offset
		recoverySeed{0, bytes.Repeat([]byte{0}, 100)},
		recoverySeed{1, activeSeg},
		recoverySeed{1, activeSeg[:len(activeSeg)/2]},
		recoverySeed{1, []byte("not a batch at all")},
	)
	flipped := bytes.Clone(next)
	flipped[record.BatchHeaderSize] ^= 1
	seeds = append(seeds, recoverySeed{0, flipped})
	return seeds
}

// TestWriteStorageFuzzCorpus regenerates the checked-in seed corpora when
// SLUICE_WRITE_FUZZ_CORPUS=1; plain `go test` replays the files.
func TestWriteStorageFuzzCorpus(t *testing.T) {
	if os.Getenv("SLUICE_WRITE_FUZZ_CORPUS") != "1" {
		t.Skip("set SLUICE_WRITE_FUZZ_CORPUS=1 to regenerate testdata/fuzz")
	}
	files, _ := fuzzTemplate(t)
	write := func(fuzzName string, i int, args ...string) {
		dir := filepath.Join("testdata", "fuzz", fuzzName)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		content := "go test fuzz v1\n"
		for _, a := range args {
			content += a + "\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644))
	}
	for i, s := range indexSeeds(files[segmentFileName(0, indexSuffix)], files[segmentFileName(0, timeIndexSuffix)]) {
		write("FuzzIndexLoad", i, fmt.Sprintf("[]byte(%q)", s[0]), fmt.Sprintf("[]byte(%q)", s[1]))
	}
	var active string
	for name := range files {
		if _, ok := parseSegmentFileName(name, logSuffix); ok && name > active {
			active = name
		}
	}
	for i, s := range recoverySeeds(files[active]) {
		write("FuzzRecoveryScan", i, fmt.Sprintf("byte(%d)", s.mode), fmt.Sprintf("[]byte(%q)", s.data))
	}
}

// FuzzReadDamagedSegment overwrites bytes of a sealed segment of a cleanly
// closed log, which Open trusts without a scan (it is below the recovery
// point), then reads from every offset, through the maps or through copies
// (mode's low bit) with a small or a large budget. The bytes on disk may
// be anything, say after a bad sector or an operator's mistake: a read
// must not panic, hang or hand out bytes that are not whole batches of the
// segment (every chunk tiles into batches by their own lengths), and every
// copy must go back to its pool.
func FuzzReadDamagedSegment(f *testing.F) {
	files, _ := fuzzTemplate(f)
	seg := segmentFileName(0, logSuffix)
	f.Add(uint8(0), uint16(8), []byte{0x7f, 0xff, 0xff, 0xff})       // a first batch's length: huge
	f.Add(uint8(1), uint16(8), []byte{0, 0, 0, 1})                   // a first batch's length: tiny
	f.Add(uint8(2), uint16(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff}) // a base offset: negative
	f.Add(uint8(3), uint16(61), bytes.Repeat([]byte{0}, 200))        // zeros across a batch boundary
	f.Add(uint8(1), uint16(1000), []byte{1, 2, 3})                   // near the end
	f.Fuzz(func(t *testing.T, mode uint8, pos uint16, data []byte) {
		dir := t.TempDir()
		writeFiles(t, dir, files)
		b := bytes.Clone(files[seg])
		at := int(pos) % len(b)
		copy(b[at:], data)
		require.NoError(t, os.WriteFile(filepath.Join(dir, seg), b, 0o644))
		var copies *ReadCopies
		pool := &countingPool{}
		if mode&1 == 1 {
			copies = NewReadCopies(1<<20, pool)
		}
		l, err := Open(dir, fuzzConfig(t), Options{Copies: copies})
		if err != nil {
			return // refused at open: fine, nothing was served
		}
		budget := 1
		if mode&2 == 2 {
			budget = 64 << 10
		}
		for o := l.LogStartOffset(); o < l.LogEndOffset(); o++ {
			res, err := l.Read(o, l.LogEndOffset(), budget)
			if err != nil {
				continue // a clear error is an answer
			}
			require.GreaterOrEqual(t, res.NextOffset, o)
			total := 0
			for _, c := range res.Chunks {
				total += len(c.Data)
				for rest := c.Data; len(rest) > 0; {
					h, ok := record.ParseBatchHeader(rest)
					require.True(t, ok, "a chunk read from %d ends in a partial batch header", o)
					n := int(h.BatchLength) + 12
					require.True(t, h.BatchLength >= 0 && n <= len(rest), "a chunk read from %d holds a partial batch", o)
					rest = rest[n:]
				}
			}
			require.Equal(t, res.Bytes, total)
			res.Release()
		}
		require.NoError(t, l.Close())
		require.Zero(t, pool.out.Load(), "copies not given back")
		if copies != nil {
			require.Zero(t, copies.InFlight())
		}
	})
}
