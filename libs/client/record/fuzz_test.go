package record

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// FuzzBatchDecode feeds arbitrary bytes to the validator and the record
// iterator. Neither may panic, hang or allocate without bound, every error
// must be a typed Sluice error, and what the validator accepts must agree
// with what the iterator finds.
func FuzzBatchDecode(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, origin := range []Origin{FromClient, FromCoordinator, FromReplica} {
			sum, err := Validate(data, ValidateOptions{Origin: origin, MaxBatchBytes: 1 << 20})
			if err != nil {
				requireTyped(t, err)
				continue
			}
			require.Equal(t, len(data), sum.Bytes)
			batches := 0
			for it := Batches(data); it.Next(); {
				batches++
			}
			require.Equal(t, sum.Batches, batches)
			if origin == FromReplica {
				continue
			}
			// Client batches were decoded by the validator: every record
			// of them must read back.
			// A leader assigns offsets before anything reads them.
			stored := bytes.Clone(data)
			AssignOffsets(stored, 0, 0)
			it := Iterator{DecompressLimit: DefaultDecompressLimit}
			it.Reset(stored)
			var records int64
			for it.Next() {
				records++
			}
			require.NoError(t, it.Err())
			require.Equal(t, sum.Records, records)
		}
		it := Iterator{DecompressLimit: 1 << 20}
		it.Reset(data)
		for it.Next() {
			r := it.Record()
			require.GreaterOrEqual(t, r.Offset, it.Batch().BaseOffset)
			require.LessOrEqual(t, r.Offset, it.Batch().LastOffset())
		}
		if err := it.Err(); err != nil {
			requireTyped(t, err)
		}
	})
}

func requireTyped(t *testing.T, err error) {
	t.Helper()
	code := errs.From(err).Code
	switch code {
	case errs.CorruptMessage, errs.MessageTooLarge, errs.InvalidRecord, errs.UnsupportedCompressionType:
	default:
		t.Fatalf("untyped or unexpected error %v (%s)", err, errs.Name(code))
	}
}

// fuzzSeeds are valid batches of every codec and shape, a few classic
// near-misses, and batches whose header and CRC are valid but whose records
// are not.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for i, c := range allCodecs {
		b := NewBuilder(c)
		if i%2 == 1 {
			b.SetProducer(int64(i), 1, 0)
		}
		for _, r := range testRecords(3+i, uint64(i)) {
			_ = b.Append(&r)
		}
		batch, _ := b.Build()
		seeds = append(seeds, bytes.Clone(batch))
	}
	two := append(bytes.Clone(seeds[0]), seeds[3]...)
	AssignOffsets(two, 100, 4)
	seeds = append(seeds, two)
	seeds = append(seeds, AppendEndTxnMarker(nil, 5, 1, ControlAbort, 2, 10))
	seeds = append(seeds, seeds[0][:BatchHeaderSize+3])
	empty := NewBuilder(CodecNone)
	_ = empty.AppendKV(0, nil, nil)
	b, _ := empty.Build()
	seeds = append(seeds, bytes.Clone(b))
	// Batches with a valid header and CRC whose records do not decode.
	for _, c := range allCodecs {
		for _, bad := range badRecordPayloads() {
			seeds = append(seeds, mustRawBatch(c, bad.count, bad.records))
		}
	}
	return seeds
}

// TestWriteFuzzCorpus regenerates the checked-in seed corpus of
// FuzzBatchDecode when SLUICE_WRITE_FUZZ_CORPUS=1; plain `go test` replays
// the files in testdata/fuzz.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("SLUICE_WRITE_FUZZ_CORPUS") != "1" {
		t.Skip("set SLUICE_WRITE_FUZZ_CORPUS=1 to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzBatchDecode")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i, s := range fuzzSeeds() {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644))
	}
}
