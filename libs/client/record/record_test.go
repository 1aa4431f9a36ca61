package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

func testRecords(n int, seed uint64) []Record {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]Record, n)
	for i := range out {
		r := Record{Timestamp: 1_700_000_000_000 + int64(rng.IntN(10_000)) - 5_000}
		switch rng.IntN(4) {
		case 0: // null key
		case 1:
			r.Key = []byte{}
		default:
			r.Key = []byte(fmt.Sprintf("key-%d", rng.IntN(50)))
		}
		if rng.IntN(5) > 0 {
			r.Value = bytes.Repeat([]byte{byte(i)}, rng.IntN(300))
		}
		for h := rng.IntN(3); h > 0; h-- {
			hv := []byte("v")
			if rng.IntN(2) == 0 {
				hv = nil
			}
			r.Headers = append(r.Headers, Header{Key: fmt.Sprintf("h%d", h), Value: hv})
		}
		out[i] = r
	}
	return out
}

func build(t testing.TB, c Codec, recs []Record) []byte {
	t.Helper()
	b := NewBuilder(c)
	for i := range recs {
		require.NoError(t, b.Append(&recs[i]))
	}
	batch, err := b.Build()
	require.NoError(t, err)
	return bytes.Clone(batch)
}

func requireCode(t *testing.T, err error, code errs.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, errs.Name(code), errs.Name(errs.From(err).Code), "error: %v", err)
}

func TestRoundTripAllCodecs(t *testing.T) {
	recs := testRecords(200, 1)
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			batch := build(t, c, recs)
			sum, err := Validate(batch, ValidateOptions{Origin: FromClient})
			require.NoError(t, err)
			require.Equal(t, 1, sum.Batches)
			require.EqualValues(t, len(recs), sum.Offsets)
			require.Equal(t, c != CodecNone, sum.Compressed)
			h, ok := ParseBatchHeader(batch)
			require.True(t, ok)
			require.Equal(t, c, h.Attributes.Codec())
			require.Equal(t, NoPartitionLeaderEpoch, h.PartitionLeaderEpoch)
			require.EqualValues(t, -1, h.ProducerID)

			next := AssignOffsets(batch, 1000, 3)
			require.EqualValues(t, 1000+len(recs), next)
			_, err = Validate(batch, ValidateOptions{Origin: FromReplica})
			require.NoError(t, err, "offsets and epoch are outside the CRC")

			var it Iterator
			it.Reset(batch)
			i := 0
			for it.Next() {
				r := it.Record()
				want := recs[i]
				require.EqualValues(t, 1000+i, r.Offset)
				require.Equal(t, want.Timestamp, r.Timestamp)
				require.Equal(t, want.Key == nil, r.Key == nil, "key nullness of record %d", i)
				require.Equal(t, want.Value == nil, r.Value == nil, "value nullness of record %d", i)
				require.True(t, bytes.Equal(want.Key, r.Key))
				require.True(t, bytes.Equal(want.Value, r.Value))
				require.Len(t, r.Headers, len(want.Headers))
				for j := range want.Headers {
					require.Equal(t, want.Headers[j].Key, r.Headers[j].Key)
					require.Equal(t, want.Headers[j].Value == nil, r.Headers[j].Value == nil)
				}
				require.EqualValues(t, 3, it.Batch().PartitionLeaderEpoch)
				i++
			}
			require.NoError(t, it.Err())
			require.Equal(t, len(recs), i)
		})
	}
}

// Batches Sluice builds must read the same through franz-go's kmsg, and
// batches kmsg builds must read the same through Sluice.
func TestKmsgInterop(t *testing.T) {
	recs := testRecords(20, 2)
	batch := build(t, CodecNone, recs)

	var kb kmsg.RecordBatch
	require.NoError(t, kb.ReadFrom(batch))
	require.EqualValues(t, len(recs), kb.NumRecords)
	require.Equal(t, uint32(kb.CRC), ComputeCRC(batch))
	rest := kb.Records
	for i := range recs {
		var kr kmsg.Record
		length, n := binary.Varint(rest)
		require.NoError(t, kr.ReadFrom(rest[:n+int(length)]))
		require.Equal(t, recs[i].Key, kr.Key)
		require.Equal(t, recs[i].Value, kr.Value)
		rest = rest[n+int(length):]
	}
	require.Empty(t, rest)

	// Now the other way: a batch encoded by hand with kmsg.
	var payload []byte
	for i := int32(0); i < 3; i++ {
		kr := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: i, Key: []byte{'k', byte('0' + i)}, Value: []byte("v")}
		kr.Length = int32(recordBodySize(kr.TimestampDelta64, kr.OffsetDelta, kr.Key, kr.Value, kr.Headers))
		payload = kr.AppendTo(payload)
	}
	kb = kmsg.RecordBatch{FirstOffset: 5, PartitionLeaderEpoch: 1, Magic: 2, LastOffsetDelta: 2, FirstTimestamp: 100,
		MaxTimestamp: 102, ProducerID: 9, ProducerEpoch: 1, FirstSequence: 0, NumRecords: 3, Records: payload}
	kb.Length = int32(BatchHeaderSize - LogOverhead + len(payload))
	raw := kb.AppendTo(nil)
	UpdateCRC(raw)
	h, err := CheckBatch(raw, ValidateOptions{Origin: FromClient})
	require.NoError(t, err)
	require.EqualValues(t, 9, h.ProducerID)
	require.EqualValues(t, 2, h.LastSequence())
	k := h.ToKmsg(raw)
	require.Equal(t, payload, k.Records)
	var it Iterator
	it.Reset(raw)
	var got []string
	for it.Next() {
		got = append(got, fmt.Sprintf("%d:%s@%d", it.Record().Offset, it.Record().Key, it.Record().Timestamp))
	}
	require.NoError(t, it.Err())
	require.Equal(t, []string{"5:k0@100", "6:k1@101", "7:k2@102"}, got)
}

func TestCheckBatchRejects(t *testing.T) {
	good := build(t, CodecNone, testRecords(5, 3))
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		buf  []byte
		opts ValidateOptions
		code errs.Code
	}{
		{"short", good[:10], ValidateOptions{}, errs.CorruptMessage},
		{"truncated", good[:len(good)-1], ValidateOptions{}, errs.CorruptMessage},
		{"length below header", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offBatchLength:], 10)
			return b
		}), ValidateOptions{}, errs.CorruptMessage},
		{"too large", good, ValidateOptions{MaxBatchBytes: len(good) - 1}, errs.MessageTooLarge},
		{"magic", mutate(func(b []byte) []byte { b[offMagic] = 1; return b }), ValidateOptions{}, errs.CorruptMessage},
		{"crc", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ValidateOptions{}, errs.CorruptMessage},
		{"codec", mutate(func(b []byte) []byte { b[offAttributes+1] |= 7; UpdateCRC(b); return b }), ValidateOptions{}, errs.UnsupportedCompressionType},
		{"count vs delta", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 9)
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromClient}, errs.InvalidRecord},
		{"more records than offsets", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 1)
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromReplica}, errs.InvalidRecord},
		{"count too big for payload", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offRecordCount:], 1_000_000)
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 999_999)
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromReplica}, errs.InvalidRecord},
		{"control from client", mutate(func(b []byte) []byte {
			b[offAttributes+1] |= controlBit | transactionalBit
			binary.BigEndian.PutUint64(b[offProducerID:], 1)
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromClient}, errs.InvalidRecord},
		{"delete horizon from client", mutate(func(b []byte) []byte {
			b[offAttributes+1] |= deleteHorizonBit
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromClient}, errs.InvalidRecord},
		{"transactional without producer", mutate(func(b []byte) []byte {
			b[offAttributes+1] |= transactionalBit
			UpdateCRC(b)
			return b
		}), ValidateOptions{Origin: FromClient}, errs.InvalidRecord},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.buf, tc.opts)
			requireCode(t, err, tc.code)
		})
	}
}

func TestValidateAllOrNothing(t *testing.T) {
	a := build(t, CodecNone, testRecords(3, 4))
	b := build(t, CodecLZ4, testRecords(4, 5))
	buf := append(append([]byte{}, a...), b...)
	sum, err := Validate(buf, ValidateOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, sum.Batches)
	require.EqualValues(t, 7, sum.Offsets)

	_, err = Validate(append(bytes.Clone(buf), 1, 2, 3), ValidateOptions{})
	requireCode(t, err, errs.CorruptMessage)
	_, err = Validate(nil, ValidateOptions{})
	requireCode(t, err, errs.InvalidRecord)

	bad := bytes.Clone(buf)
	bad[len(a)+BatchHeaderSize] ^= 0xff
	_, err = Validate(bad, ValidateOptions{})
	requireCode(t, err, errs.CorruptMessage)

	// Replica batches must keep increasing offsets and epochs.
	AssignOffsets(buf[:len(a)], 10, 2)
	AssignOffsets(buf[len(a):], 13, 2)
	_, err = Validate(buf, ValidateOptions{Origin: FromReplica})
	require.NoError(t, err)
	SetBaseOffset(buf[len(a):], 12)
	_, err = Validate(buf, ValidateOptions{Origin: FromReplica})
	requireCode(t, err, errs.CorruptMessage)
	SetBaseOffset(buf[len(a):], 20)
	SetPartitionLeaderEpoch(buf[len(a):], 1)
	_, err = Validate(buf, ValidateOptions{Origin: FromReplica})
	requireCode(t, err, errs.CorruptMessage)
}

func TestBatchIterAndLogAppendTime(t *testing.T) {
	var buf []byte
	for i := range 3 {
		buf = append(buf, build(t, allCodecs[i], testRecords(2+i, uint64(i)))...)
	}
	AssignOffsets(buf, 0, 1)
	var bases []int64
	for it := Batches(buf); it.Next(); {
		h := it.Header()
		bases = append(bases, h.BaseOffset)
		require.Equal(t, h.Size(), len(it.Bytes()))
		SetLogAppendTime(it.Bytes(), 42)
	}
	require.Equal(t, []int64{0, 2, 5}, bases)
	sum, err := Validate(buf, ValidateOptions{})
	require.NoError(t, err, "CRC recomputed")
	require.EqualValues(t, 42, sum.MaxTimestamp)
	var it Iterator
	it.Reset(buf)
	for it.Next() {
		require.EqualValues(t, 42, it.Record().Timestamp)
		require.Equal(t, LogAppendTime, it.Batch().Attributes.TimestampType())
	}
	require.NoError(t, it.Err())
}

func TestProducerFieldsAndControl(t *testing.T) {
	b := NewBuilder(CodecSnappy)
	b.SetProducer(77, 3, 1<<31-1)
	b.SetTransactional(true)
	require.NoError(t, b.AppendKV(1, []byte("a"), []byte("1")))
	require.NoError(t, b.AppendKV(2, []byte("b"), []byte("2")))
	batch, err := b.Build()
	require.NoError(t, err)
	h, err := CheckBatch(batch, ValidateOptions{})
	require.NoError(t, err)
	require.True(t, h.Attributes.Transactional())
	require.False(t, h.Attributes.Control())
	require.EqualValues(t, 77, h.ProducerID)
	require.EqualValues(t, 3, h.ProducerEpoch)
	require.EqualValues(t, 1<<31-1, h.BaseSequence)
	require.EqualValues(t, 0, h.LastSequence(), "sequences wrap")

	marker := AppendEndTxnMarker(nil, 77, 3, ControlCommit, 5, 99)
	_, err = Validate(marker, ValidateOptions{Origin: FromClient})
	requireCode(t, err, errs.InvalidRecord)
	h, err = CheckBatch(marker, ValidateOptions{Origin: FromCoordinator})
	require.NoError(t, err)
	require.True(t, h.Attributes.Control())
	require.True(t, h.Attributes.Transactional())
	var it Iterator
	it.Reset(marker)
	require.True(t, it.Next())
	ct, err := ParseControlKey(it.Record().Key)
	require.NoError(t, err)
	require.Equal(t, ControlCommit, ct)
	require.EqualValues(t, 5, binary.BigEndian.Uint32(it.Record().Value[2:]))
	require.False(t, it.Next())
	require.NoError(t, it.Err())
}

func TestBuilderLimits(t *testing.T) {
	b := NewBuilder(CodecNone)
	_, err := b.Build()
	requireCode(t, err, errs.InvalidRecord)
	b.SetMaxBytes(200)
	require.NoError(t, b.AppendKV(0, nil, make([]byte, 100)))
	requireCode(t, b.AppendKV(0, nil, make([]byte, 100)), errs.MessageTooLarge)
	require.Equal(t, 1, b.Len())
	b.Reset()
	require.Equal(t, 0, b.Len())
	require.Equal(t, BatchHeaderSize, b.Size())
}

func TestDecompressionBombs(t *testing.T) {
	zeros := make([]byte, 8<<20)
	for _, c := range allCodecs[1:] {
		t.Run(c.String(), func(t *testing.T) {
			comp, err := Compress(nil, zeros, c)
			require.NoError(t, err)
			out, err := Decompress(nil, comp, c, len(zeros))
			require.NoError(t, err)
			require.Len(t, out, len(zeros))
			_, err = Decompress(nil, comp, c, 1<<20)
			requireCode(t, err, errs.MessageTooLarge)

			// The same through the iterator: one record with the big value.
			b := NewBuilder(c)
			require.NoError(t, b.AppendKV(0, nil, zeros))
			batch, err := b.Build()
			require.NoError(t, err)
			require.Less(t, len(batch), 1<<20, "compresses well")
			it := Iterator{DecompressLimit: 1 << 20}
			it.Reset(batch)
			require.False(t, it.Next())
			requireCode(t, it.Err(), errs.MessageTooLarge)
		})
	}
}

func TestSnappyRawAndCorrupt(t *testing.T) {
	src := bytes.Repeat([]byte("sluice "), 20_000) // several xerial blocks
	x, err := Compress(nil, src, CodecSnappy)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(x, xerialHeader))
	out, err := Decompress(nil, x, CodecSnappy, 0)
	require.NoError(t, err)
	require.Equal(t, src, out)
	// A raw snappy block, as some non-Java clients write.
	raw := appendXerial(nil, src[:1000])[len(xerialHeader)+4:]
	out, err = Decompress(nil, raw, CodecSnappy, 0)
	require.NoError(t, err)
	require.Equal(t, src[:1000], out)

	for _, c := range allCodecs[1:] {
		comp, err := Compress(nil, src, c)
		require.NoError(t, err)
		_, err = Decompress(nil, comp[:len(comp)/2], c, 0)
		require.Error(t, err, c.String())
	}
	_, err = Decompress(nil, []byte{1}, Codec(6), 0)
	requireCode(t, err, errs.UnsupportedCompressionType)
}

func TestIteratorRejectsCorruptRecords(t *testing.T) {
	batch := build(t, CodecNone, testRecords(3, 9))
	// Claim one more record than the payload holds; fix the CRC so only the
	// record decoder can notice.
	bad := bytes.Clone(batch)
	binary.BigEndian.PutUint32(bad[offRecordCount:], 4)
	binary.BigEndian.PutUint32(bad[offLastOffsetDelta:], 3)
	UpdateCRC(bad)
	var it Iterator
	it.Reset(bad)
	for it.Next() {
	}
	requireCode(t, it.Err(), errs.CorruptMessage)

	// One record fewer than the payload holds: trailing bytes.
	bad = bytes.Clone(batch)
	binary.BigEndian.PutUint32(bad[offRecordCount:], 2)
	UpdateCRC(bad)
	it.Reset(bad)
	for it.Next() {
	}
	requireCode(t, it.Err(), errs.CorruptMessage)
}

func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	recs := testRecords(64, 10)
	for _, c := range allCodecs {
		b := NewBuilder(c)
		var it Iterator
		run := func() {
			b.Reset()
			for i := range recs {
				if err := b.Append(&recs[i]); err != nil {
					panic(err)
				}
			}
			batch, err := b.Build()
			if err != nil {
				panic(err)
			}
			if _, err := Validate(batch, ValidateOptions{}); err != nil {
				panic(err)
			}
			AssignOffsets(batch, 5, 1)
			it.Reset(batch)
			for it.Next() {
			}
			if it.Err() != nil {
				panic(it.Err())
			}
		}
		run()
		allocs := testing.AllocsPerRun(50, run)
		require.Zero(t, allocs, "codec %s", c)
	}
}

// BuildUnsealed leaves the CRC to the caller: the same batch as Build once
// UpdateCRC has run, and rejected before.
func TestBuildUnsealedLeavesCRC(t *testing.T) {
	for _, codec := range allCodecs {
		sealed, unsealed := NewBuilder(codec), NewBuilder(codec)
		recs := testRecords(20, 7)
		for _, b := range []*Builder{sealed, unsealed} {
			for i := range recs {
				require.NoError(t, b.Append(&recs[i]))
			}
		}
		want, err := sealed.Build()
		require.NoError(t, err)
		got, err := unsealed.BuildUnsealed()
		require.NoError(t, err)
		_, err = CheckBatch(got, ValidateOptions{})
		require.True(t, errs.Is(err, errs.CorruptMessage), "%v: unsealed batch accepted: %v", codec, err)
		UpdateCRC(got)
		require.Equal(t, want, got, "%v", codec)
	}
}
