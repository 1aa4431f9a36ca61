package record

import (
	"fmt"
	"testing"
)

// benchBatch builds a batch of roughly size bytes from records of recSize
// value bytes.
func benchBatch(b *testing.B, c Codec, size, recSize int) ([]byte, []Record) {
	var recs []Record
	value := make([]byte, recSize)
	for i := range value {
		value[i] = byte(i * 7)
	}
	for n := 0; n < size; n += recSize + 20 {
		recs = append(recs, Record{Timestamp: 1_700_000_000_000, Key: []byte(fmt.Sprintf("k%07d", len(recs))), Value: value})
	}
	return build(b, c, recs), recs
}

func BenchmarkValidate(b *testing.B) {
	for _, size := range []int{16 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("batch=%dKiB", size>>10), func(b *testing.B) {
			batch, _ := benchBatch(b, CodecNone, size, 100)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(batch, ValidateOptions{MaxBatchBytes: 2 << 20}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			_, recs := benchBatch(b, CodecNone, 16<<10, 100)
			bl := NewBuilder(c)
			b.SetBytes(16 << 10)
			b.ReportAllocs()
			for b.Loop() {
				bl.Reset()
				for i := range recs {
					if err := bl.Append(&recs[i]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := bl.Build(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkIterate(b *testing.B) {
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			batch, _ := benchBatch(b, c, 16<<10, 100)
			var it Iterator
			b.SetBytes(16 << 10)
			b.ReportAllocs()
			for b.Loop() {
				it.Reset(batch)
				for it.Next() {
				}
				if it.Err() != nil {
					b.Fatal(it.Err())
				}
			}
		})
	}
}

// BenchmarkValidateRecords measures what decoding every record costs a
// leader: Validate of a client batch (records decoded) against the same
// batch read as a replica's (header and CRC only). Throughput is counted in
// uncompressed record bytes, 1 MiB per batch, for every codec.
func BenchmarkValidateRecords(b *testing.B) {
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		for _, recSize := range []int{100, 1024} {
			batch, _ := benchBatch(b, c, 1<<20, recSize)
			for _, check := range []struct {
				name   string
				origin Origin
			}{{"records", FromClient}, {"crc", FromReplica}} {
				b.Run(fmt.Sprintf("codec=%s/rec=%d/check=%s", c, recSize, check.name), func(b *testing.B) {
					opts := ValidateOptions{MaxBatchBytes: 2 << 20, Origin: check.origin}
					b.SetBytes(1 << 20)
					b.ReportAllocs()
					for b.Loop() {
						if _, err := Validate(batch, opts); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
