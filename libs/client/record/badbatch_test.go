package record

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// rawRecord encodes one record field by field, so a test can get any field
// wrong. body is what follows the offset delta (key, value, headers).
func rawRecord(offsetDelta int64, body []byte) []byte {
	var r []byte
	r = append(r, 0)              // attributes
	r = binary.AppendVarint(r, 0) // timestamp delta
	r = binary.AppendVarint(r, offsetDelta)
	r = append(r, body...)
	return append(binary.AppendVarint(nil, int64(len(r))), r...)
}

// kv is the body of a record with key k, value v and no headers.
func kv(k, v string) []byte {
	b := binary.AppendVarint(nil, int64(len(k)))
	b = append(b, k...)
	b = binary.AppendVarint(b, int64(len(v)))
	b = append(b, v...)
	return binary.AppendVarint(b, 0)
}

// rawBatch wraps records (uncompressed bytes) in a client batch with a
// valid header and CRC: count records in offsets 0..count-1, compressed
// with c. Only a decoder of the records can find what is wrong with them.
func rawBatch(t testing.TB, c Codec, count int32, records []byte) []byte {
	t.Helper()
	return mustRawBatch(c, count, records)
}

func mustRawBatch(c Codec, count int32, records []byte) []byte {
	payload, err := Compress(nil, records, c)
	if err != nil {
		panic(err)
	}
	b := make([]byte, BatchHeaderSize, BatchHeaderSize+len(payload))
	b = append(b, payload...)
	PutBatchHeader(b, &BatchHeader{
		BatchLength: int32(len(b) - LogOverhead), PartitionLeaderEpoch: -1, Magic: Magic,
		Attributes: Attributes(c), LastOffsetDelta: count - 1, BaseTimestamp: 1, MaxTimestamp: 1,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: count,
	})
	UpdateCRC(b)
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// badRecordPayloads are record sections that decode wrongly, each with the
// record count its batch header claims. Every one passes the header and
// CRC checks.
func badRecordPayloads() []struct {
	name    string
	count   int32
	records []byte
} {
	rng := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	good := func(i int64) []byte { return rawRecord(i, kv("k", "a value of some thirty bytes")) }
	hdr := func(count int64, parts ...[]byte) []byte {
		b := binary.AppendVarint(kv("k", "v")[:4], count) // key, value, then the count
		return cat(append([][]byte{b}, parts...)...)
	}
	return []struct {
		name    string
		count   int32
		records []byte
	}{
		{"random bytes", 10, random},
		{"zeros", 3, make([]byte, 64)},
		{"count exceeds records present", 4, cat(good(0), good(1), good(2))},
		{"trailing bytes after the last record", 2, cat(good(0), good(1), []byte{1, 2, 3})},
		{"offset deltas out of order", 3, cat(good(0), good(2), good(1))},
		{"offset deltas not from zero", 2, cat(good(1), good(2))},
		{"repeated offset delta", 2, cat(good(0), good(0))},
		{"record length beyond the payload", 1, cat(binary.AppendVarint(nil, 500), good(0)[1:])},
		{"negative record length", 1, binary.AppendVarint(nil, -3)},
		{"record longer than its fields", 1, rawRecord(0, append(kv("k", "v"), 9, 9))},
		{"key length beyond the record", 1, rawRecord(0, cat(binary.AppendVarint(nil, 40), []byte("k")))},
		{"key length below -1", 1, rawRecord(0, cat(binary.AppendVarint(nil, -2), kv("", "v")[1:]))},
		{"value length beyond the record", 1, rawRecord(0, cat([]byte{2, 'k'}, binary.AppendVarint(nil, 99), []byte{0}))},
		{"negative header count", 1, rawRecord(0, hdr(-1))},
		{"header count beyond the record", 1, rawRecord(0, hdr(5, []byte{2, 'a', 0}))},
		{"negative header key length", 1, rawRecord(0, hdr(1, binary.AppendVarint(nil, -1), []byte{0}))},
		{"header value length beyond the record", 1, rawRecord(0, hdr(1, []byte{2, 'a'}, binary.AppendVarint(nil, 30)))},
		{"truncated varint", 1, cat(rawRecord(0, kv("k", "v"))[:3], []byte{0xff})},
		{"empty record", 1, []byte{0}},
	}
}

// Every record-level defect is refused with INVALID_RECORD (not retriable:
// the same bytes can never pass) for client and coordinator batches,
// whatever the codec; replicated batches are checked by header only (their
// leader decoded them).
func TestValidateDecodesRecords(t *testing.T) {
	for _, c := range allCodecs {
		for _, tc := range badRecordPayloads() {
			t.Run(c.String()+"/"+tc.name, func(t *testing.T) {
				batch := rawBatch(t, c, tc.count, tc.records)
				for _, origin := range []Origin{FromClient, FromCoordinator} {
					_, err := Validate(batch, ValidateOptions{Origin: origin})
					requireCode(t, err, errs.InvalidRecord)
					require.Contains(t, err.Error(), "batch at offset 0")
				}
			})
		}
	}
	// The well-formed versions of the same shapes pass.
	for _, c := range allCodecs {
		ok := rawBatch(t, c, 3, cat(rawRecord(0, kv("k", "v")), rawRecord(1, kv("", "")),
			rawRecord(2, cat([]byte{1, 1, 4}, []byte{2, 'h', 2, 'x'}, []byte{2, 'i', 1})))) // null key and value, two headers
		_, err := Validate(ok, ValidateOptions{})
		require.NoError(t, err, c.String())
	}
}

// A length field claiming more bytes than are present is a corrupt batch,
// not an oversized one.
func TestLengthBeyondBufferIsCorrupt(t *testing.T) {
	b := make([]byte, 200)
	binary.BigEndian.PutUint32(b[offBatchLength:], 762212212)
	_, err := Validate(b, ValidateOptions{})
	requireCode(t, err, errs.CorruptMessage)
	require.Contains(t, err.Error(), "truncated")
	require.NotContains(t, err.Error(), "max.message.bytes")
}

// A compressed batch's records are checked as they are decompressed, so a
// bomb fails at its first bad record, and valid records beyond the
// decompression cap fail with MESSAGE_TOO_LARGE; neither allocates its
// decompressed size.
func TestValidateBombs(t *testing.T) {
	// 1 GiB of zeros, zstd-compressed to about 32 KiB.
	var comp bytes.Buffer
	enc, err := zstd.NewWriter(&comp, zstd.WithEncoderLevel(zstd.SpeedFastest))
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for range 1024 {
		_, err := enc.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, enc.Close())
	bomb := make([]byte, BatchHeaderSize, BatchHeaderSize+comp.Len())
	bomb = append(bomb, comp.Bytes()...)
	PutBatchHeader(bomb, &BatchHeader{BatchLength: int32(len(bomb) - LogOverhead), Magic: Magic, Attributes: Attributes(CodecZstd),
		LastOffsetDelta: 999, RecordCount: 1000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})
	UpdateCRC(bomb)
	start := time.Now()
	_, err = Validate(bomb, ValidateOptions{})
	requireCode(t, err, errs.InvalidRecord)
	t.Logf("1 GiB zstd bomb of %d bytes refused in %v: %v", len(bomb), time.Since(start), err)

	for _, c := range allCodecs[1:] {
		b := NewBuilder(c)
		require.NoError(t, b.AppendKV(0, []byte("k"), make([]byte, 2<<20)))
		batch, err := b.Build()
		require.NoError(t, err)
		_, err = Validate(batch, ValidateOptions{DecompressLimit: 1 << 20})
		requireCode(t, err, errs.MessageTooLarge)
		require.Contains(t, err.Error(), "1048576", c.String())
		_, err = Validate(batch, ValidateOptions{DecompressLimit: 3 << 20})
		require.NoError(t, err, c.String())
	}
}

// Records larger than the read window stream through it.
func TestValidateLargeCompressedRecords(t *testing.T) {
	recs := []Record{{Key: []byte("a"), Value: bytes.Repeat([]byte("x"), 3*streamWindow),
		Headers: []Header{{Key: "h", Value: bytes.Repeat([]byte("y"), streamWindow)}}}, {Key: []byte("b")}}
	for _, c := range allCodecs {
		_, err := Validate(build(t, c, recs), ValidateOptions{})
		require.NoError(t, err, c.String())
	}
}

var _ io.Reader = (*limitReader)(nil)
