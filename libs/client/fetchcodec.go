package client

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// out of the received message: the message is gathered into one buffer
// (the only copy), and the batches field points into it, so records of
// uncompressed batches need no copy of their own either. Every other
// message goes through the protobuf codec.
type fetchCodec struct{ proto encoding.CodecV2 }

var chunkCodec = fetchCodec{proto: encoding.GetCodecV2(protoenc.Name)}

func (fetchCodec) Name() string { return protoenc.Name }

func (c fetchCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c fetchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*storagev1.FetchResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	return decodeFetchResponse(data.Materialize(), m)
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
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
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
				return fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
			}
			b = b[n:]
			var err error
			switch num {
			case fetchTopic:
				if !utf8.Valid(v) {
					return errors.New("decoding fetch chunk: the topic is not valid UTF-8")
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
				return fmt.Errorf("decoding fetch chunk field %d: %w", num, err)
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("decoding fetch chunk: %w", protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
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

// pooledFetchCodec is fetchCodec for a consumer whose records are valid
// only until its next Poll (ConsumerConfig.RecordsValidUntilNextPoll): it
// gathers each chunk into a recycled buffer instead of fresh memory, and
// leaves that buffer in last for the stream's receive loop, whose Recv
// runs Unmarshal on the loop's own goroutine. Fresh memory for every
// fetched byte made the consumer's garbage collector, and the zeroing and
// returning of that memory, half of a catch-up consumer's CPU.
type pooledFetchCodec struct {
	fetchCodec
	last []byte
}

func (c *pooledFetchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*storagev1.FetchResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := getChunkBuf(data.Len())
	data.CopyTo(buf)
	c.last = buf
	return decodeFetchResponse(buf, m)
}

// take returns the buffer of the chunk just received (nil if none) and
// forgets it.
func (c *pooledFetchCodec) take() []byte {
	if c == nil {
		return nil
	}
	b := c.last
	c.last = nil
	return b
}

// Chunk buffers are pooled by capacity: powers of two from 4 KiB to
// 64 KiB, then multiples of 64 KiB up to 8 MiB, so a chunk of a little over
// 1 MiB (PartitionMaxBytes, 1 MiB by default, plus the response's own
// fields) takes 1.06 MiB, not 2. Larger ones are left to the garbage
// collector.
const (
	smallChunkBufClasses = 5 // 4, 8, 16, 32, 64 KiB
	chunkBufStep         = 64 << 10
	maxChunkBuf          = 8 << 20
)

var (
	chunkBufPools [smallChunkBufClasses + maxChunkBuf/chunkBufStep]sync.Pool
	// chunkBufPuts counts buffers given back to the pools.
	chunkBufPuts atomic.Int64
)

// chunkBufClass is the pool and capacity for a buffer of n bytes; -1 if
// none.
func chunkBufClass(n int) (int, int) {
	for i := range smallChunkBufClasses {
		if c := 4 << (10 + i); n <= c {
			return i, c
		}
	}
	if n > maxChunkBuf {
		return -1, n
	}
	steps := (n + chunkBufStep - 1) / chunkBufStep
	return smallChunkBufClasses + steps - 2, steps * chunkBufStep // 128 KiB is the first step class
}

func getChunkBuf(n int) []byte {
	i, c := chunkBufClass(n)
	if i >= 0 {
		if p, _ := chunkBufPools[i].Get().(*[]byte); p != nil {
			return (*p)[:n]
		}
	}
	return make([]byte, n, c)
}

// putChunkBuf recycles a buffer from getChunkBuf; nothing may use it after.
func putChunkBuf(b []byte) {
	if i, c := chunkBufClass(cap(b)); i >= 0 && c == cap(b) {
		b = b[:c]
		chunkBufPools[i].Put(&b)
		chunkBufPuts.Add(1)
	}
}
