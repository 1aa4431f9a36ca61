package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// fetchCodec decodes FetchResponse chunks without copying their batches
// out of the buffers the message arrived in (see fetchChunk). Every other
// message goes through the protobuf codec.
type fetchCodec struct{ proto encoding.CodecV2 }

var chunkCodec = fetchCodec{proto: encoding.GetCodecV2(protoenc.Name)}

func (fetchCodec) Name() string { return protoenc.Name }

func (c fetchCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c fetchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *fetchChunk:
		return m.decode(data)
	case *storagev1.FetchResponse:
		return decodeFetchResponse(data.Materialize(), m)
	}
	return c.proto.Unmarshal(data, v)
}

// fetchChunk is a FetchResponse decoded in the buffers grpc-go received it
// in (one per HTTP/2 frame, 16 KiB), its batches read from there by
// record.Iterator.ResetPieces without gathering the message into one
// buffer. The buffers are referenced on decode (grpc-go frees its own
// references when Unmarshal returns) and go back to the pool on release,
// after detach has copied out what the application gets.
//
// The consumer does not use it: measured with `sluice perf consume`, it
// cost as much consumer CPU per GB as the gather it would replace, or
// more. As long as records belong to the application for as long as it
// keeps them, every fetched byte must land in fresh memory: gathered
// (zeroed, then copied), detached (copied into memory not zeroed, but
// faulted in cache-cold) or left in the frame buffers (each frame then a
// fresh zeroed buffer from the pool); the three cost about the same, and
// decoding in pieces adds per-record work. It pays once records can be
// released (valid until the next poll, or released explicitly), when the
// frame buffers can be reused without any copy. BenchmarkFetchDecode keeps
// the comparison.
type fetchChunk struct {
	resp    storagev1.FetchResponse
	batches [][]byte        // the batches field in pieces, pointing into held
	pieces  [][]byte        // the message's buffers' bytes, reused
	held    mem.BufferSlice // the message's buffers, referenced
	scratch []byte          // a field other than batches that crosses buffers
}

// decode parses data into c.
func (c *fetchChunk) decode(data mem.BufferSlice) error {
	c.drop()
	for _, b := range data {
		c.pieces = append(c.pieces, b.ReadOnlyData())
	}
	batches, err := decodeFetchPieces(c.pieces, &c.resp, &c.scratch, c.batches[:0])
	clear(c.pieces)
	c.pieces = c.pieces[:0]
	c.batches = batches
	if err != nil {
		return err
	}
	if len(batches) > 0 {
		for _, b := range data {
			b.Ref() // grpc-go frees data when decode returns
		}
		c.held = append(c.held, data...)
	}
	return nil
}

// release returns the chunk's buffers to the pool; nothing may point into
// them after.
func (c *fetchChunk) release() {
	c.held.Free()
	c.drop()
}

// drop forgets the held buffers without freeing them.
func (c *fetchChunk) drop() {
	clear(c.held)
	c.held = c.held[:0]
	clear(c.batches)
	c.batches = c.batches[:0]
}

// detach copies the keys and values of records that point into a fetch
// chunk's buffers into one new buffer, so the chunk's buffers go back to
// the pool (fetchChunk.release) while the application keeps the records
// as long as it likes. bytes.Join allocates the buffer without zeroing it:
// this is the one copy of the consume path. parts is scratch space.
func detach(recs []*ConsumedRecord, parts [][]byte) [][]byte {
	if len(recs) == 0 {
		return parts
	}
	parts = parts[:0]
	for _, r := range recs {
		parts = append(parts, r.Key, r.Value)
	}
	buf := bytes.Join(parts, nil)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		out := buf[:len(b):len(b)]
		buf = buf[len(b):]
		return out
	}
	for _, r := range recs {
		r.Key = take(r.Key)
		r.Value = take(r.Value)
	}
	clear(parts)
	return parts
}

// Field numbers of FetchResponse, from its descriptor.
var (
	fetchTopic               = wire.FieldNumber(&storagev1.FetchResponse{}, "topic")
	fetchPartition           = wire.FieldNumber(&storagev1.FetchResponse{}, "partition")
	fetchError               = wire.FieldNumber(&storagev1.FetchResponse{}, "error")
	fetchHighWatermark       = wire.FieldNumber(&storagev1.FetchResponse{}, "high_watermark")
	fetchLastStableOffset    = wire.FieldNumber(&storagev1.FetchResponse{}, "last_stable_offset")
	fetchLogStartOffset      = wire.FieldNumber(&storagev1.FetchResponse{}, "log_start_offset")
	fetchAbortedTransactions = wire.FieldNumber(&storagev1.FetchResponse{}, "aborted_transactions")
	fetchDivergingEpoch      = wire.FieldNumber(&storagev1.FetchResponse{}, "diverging_epoch")
	fetchNextOffset          = wire.FieldNumber(&storagev1.FetchResponse{}, "next_offset")
	fetchRecords             = wire.FieldNumber(&storagev1.FetchResponse{}, "records")
	fetchBatches             = wire.FieldNumber(&storagev1.FetchResponse{}, "batches")
)

// decodeFetchResponse parses b into m; m.Batches aliases b.
func decodeFetchResponse(b []byte, m *storagev1.FetchResponse) error {
	m.Reset()
	for len(b) > 0 {
		var err error
		if b, err = decodeFetchField(b, m); err != nil {
			return err
		}
	}
	return nil
}

// decodeFetchField parses the field at the start of b into m and returns
// the bytes after it.
func decodeFetchField(b []byte, m *storagev1.FetchResponse) ([]byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return nil, fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
	}
	b = b[n:]
	switch {
	case typ == protowire.VarintType:
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case fetchPartition:
			m.Partition = int32(v)
		case fetchHighWatermark:
			m.HighWatermark = int64(v)
		case fetchLastStableOffset:
			m.LastStableOffset = int64(v)
		case fetchLogStartOffset:
			m.LogStartOffset = int64(v)
		case fetchNextOffset:
			m.NextOffset = int64(v)
		}
	case typ == protowire.BytesType:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var err error
		switch num {
		case fetchTopic:
			if !utf8.Valid(v) {
				return nil, errors.New("decoding fetch chunk: the topic is not valid UTF-8")
			}
			m.Topic = string(v)
		case fetchError:
			m.Error = &edpb.Error{}
			err = proto.Unmarshal(v, m.Error)
		case fetchAbortedTransactions:
			a := &storagev1.AbortedTransaction{}
			err = proto.Unmarshal(v, a)
			m.AbortedTransactions = append(m.AbortedTransactions, a)
		case fetchDivergingEpoch:
			m.DivergingEpoch = &storagev1.EpochEndOffset{}
			err = proto.Unmarshal(v, m.DivergingEpoch)
		case fetchRecords:
			m.Records = &commonv1.Records{}
			err = proto.Unmarshal(v, m.Records)
		case fetchBatches:
			m.Batches = v
		}
		if err != nil {
			return nil, fmt.Errorf("decoding fetch chunk field %d: %w", num, err)
		}
	default:
		n := protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return b, nil
}

// decodeFetchPieces parses a message held in pieces (read as if
// concatenated) into m, as decodeFetchResponse does, except that the
// batches field is returned as pieces pointing into the given ones (the
// last occurrence wins; m.Batches stays nil) instead of being gathered.
// Any other field that crosses pieces is gathered into *scratch first.
// The batches' pieces are appended to dst; the elements of pieces are
// consumed (resliced) on the way.
func decodeFetchPieces(pieces [][]byte, m *storagev1.FetchResponse, scratch *[]byte, dst [][]byte) ([][]byte, error) {
	m.Reset()
	sp := newPieceCursor(pieces)
	batches := dst
	for sp.n > 0 {
		// The tag and a varint after it fit in 20 bytes: ConsumeTag and
		// ConsumeVarint judge a varint by its first 10 bytes.
		var w [2 * binary.MaxVarintLen64]byte
		win := w[:sp.peek(w[:])]
		num, typ, tn := protowire.ConsumeTag(win)
		extent := -1 // the field's bytes, tag included, if known
		if tn > 0 {
			switch typ {
			case protowire.VarintType:
				if _, vn := protowire.ConsumeVarint(win[tn:]); vn > 0 {
					extent = tn + vn
				}
			case protowire.Fixed32Type:
				if tn+4 <= sp.n {
					extent = tn + 4
				}
			case protowire.Fixed64Type:
				if tn+8 <= sp.n {
					extent = tn + 8
				}
			case protowire.BytesType:
				if l, ln := protowire.ConsumeVarint(win[tn:]); ln > 0 && l <= uint64(sp.n-tn-ln) {
					extent = tn + ln + int(l)
					if num == fetchBatches {
						sp.skip(tn + ln)
						batches = sp.take(dst[:0], int(l))
						continue
					}
				}
			}
		}
		if extent < 0 {
			// A group, a bad tag or a truncated field: decode the rest
			// gathered, once (gathering it per field would be quadratic).
			*scratch = sp.appendTo((*scratch)[:0], sp.n)
			for rest := *scratch; len(rest) > 0; {
				var err error
				if rest, err = decodeFetchField(rest, m); err != nil {
					return dst[:0], err
				}
				if m.Batches != nil { // the scratch buffer is reused
					batches = append(dst[:0], bytes.Clone(m.Batches))
					m.Batches = nil
				}
			}
			return batches, nil
		}
		field := sp.head()
		if len(field) >= extent {
			field = field[:extent]
		} else {
			*scratch = sp.appendTo((*scratch)[:0], extent)
			field = *scratch
		}
		if _, err := decodeFetchField(field, m); err != nil {
			return dst[:0], err
		}
		sp.skip(extent)
	}
	return batches, nil
}

// pieceCursor reads bytes held in several pieces, from the front.
type pieceCursor struct {
	p [][]byte // p[0] is the current piece, possibly partly consumed
	n int      // bytes left
}

func newPieceCursor(p [][]byte) pieceCursor {
	c := pieceCursor{p: p}
	for _, b := range p {
		c.n += len(b)
	}
	return c
}

// head returns the bytes left in the current piece.
func (c *pieceCursor) head() []byte {
	for len(c.p) > 0 && len(c.p[0]) == 0 {
		c.p = c.p[1:]
	}
	if len(c.p) == 0 {
		return nil
	}
	return c.p[0]
}

// skip consumes k <= c.n bytes.
func (c *pieceCursor) skip(k int) {
	c.n -= k
	for k > 0 {
		if k < len(c.p[0]) {
			c.p[0] = c.p[0][k:]
			return
		}
		k -= len(c.p[0])
		c.p = c.p[1:]
	}
}

// peek copies the first bytes into dst and returns how many.
func (c *pieceCursor) peek(dst []byte) int {
	n := 0
	for _, b := range c.p {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], b)
	}
	return n
}

// appendTo appends the first k <= c.n bytes to dst.
func (c *pieceCursor) appendTo(dst []byte, k int) []byte {
	for _, b := range c.p {
		if k == 0 {
			break
		}
		b = b[:min(k, len(b))]
		dst = append(dst, b...)
		k -= len(b)
	}
	return dst
}

// take consumes k <= c.n bytes and appends them to dst as pieces pointing
// into c's.
func (c *pieceCursor) take(dst [][]byte, k int) [][]byte {
	c.n -= k
	for k > 0 {
		b := c.p[0]
		if k < len(b) {
			dst = append(dst, b[:k:k])
			c.p[0] = b[k:]
			return dst
		}
		if len(b) > 0 {
			dst = append(dst, b)
		}
		k -= len(b)
		c.p = c.p[1:]
	}
	return dst
}

// DecodeError reports a batch of a partition's log that the consumer cannot
// decode: the log holds bytes no reader can use (written before the storage
// node decoded every record of a produced batch, or damaged on disk). Poll
// returns the records before it, then this error, once; the partition is
// not fetched again until Seek moves its position, for example past the
// batch, as with Kafka's "seek past the record to continue consumption".
type DecodeError struct {
	Topic     string
	Partition int32
	// Offset is the base offset of the batch; the partition's position
	// stays there.
	Offset int64
	// Err is the decoder's error (CORRUPT_MESSAGE or MESSAGE_TOO_LARGE).
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s-%d: the batch at offset %d cannot be decoded: %v; Seek past it to continue", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// undecodableAt returns the records of a chunk to deliver before the
// batch at it.ErrOffset() that does not decode, and that batch's offset
// (-1 if its header could not be read and no record came before it).
// Records of the bad batch decoded before the fault stay with it.
func undecodableAt(recs []*ConsumedRecord, it *record.Iterator) ([]*ConsumedRecord, int64) {
	bad := it.ErrOffset()
	if bad < 0 {
		if n := len(recs); n > 0 {
			return recs, recs[n-1].Offset + 1 // the fault is where decoding stopped
		}
		return recs, -1
	}
	for len(recs) > 0 && recs[len(recs)-1].Offset >= bad {
		recs = recs[:len(recs)-1]
	}
	return recs, bad
}
