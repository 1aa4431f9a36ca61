package replication

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// batchesField is FollowerFetchResponse.batches.
var batchesField = wire.FieldNumber(&replicationv1.FollowerFetchResponse{}, "batches")

// chunkCodec is the codec of a follower fetch stream: wire's pass-through
// codec, except that a chunk (chunkIn) is decoded from the buffers it
// arrived in (one per HTTP/2 frame), its batches left there.
type chunkCodec struct{ encoding.CodecV2 }

func newChunkCodec() chunkCodec { return chunkCodec{wire.PassThroughCodec()} }

// Unmarshal implements encoding.CodecV2.
func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if in, ok := v.(*chunkIn); ok {
		return in.decode(data)
	}
	return c.CodecV2.Unmarshal(data, v)
}

// chunkIn receives one FollowerFetchResponse without copying its batches:
// they stay in the received buffers (pieces) until the chunk is applied
// and released. On a follower every replicated byte passed through each
// copy this avoids: first the protobuf decoder's, then the gathering of a
// chunk's frames into one buffer.
type chunkIn struct {
	msg replicationv1.FollowerFetchResponse
	// pieces are the batches, as concatenated pieces of the buffers held.
	pieces [][]byte
	// held is the received message while pieces point into it; gathered
	// is the one buffer of a message decoded whole (see decode).
	held     mem.BufferSlice
	gathered wire.Held
	head     []byte
}

// maxChunkHead bounds the fields before the batches that decode reads
// from a copy; a chunk's are a few dozen bytes (topic, offsets, a trace
// context).
const maxChunkHead = 4 << 10

// decode decodes data, keeping a reference to it while pieces point into
// it. A chunk as the leader sends it (wire.Frame: the other fields, then
// the batches last) is decoded in place; any other encoding of the message
// is gathered into one buffer first and decoded with the aliasing decoder.
func (c *chunkIn) decode(data mem.BufferSlice) error {
	c.Release()
	c.msg.Reset()
	total := data.Len()
	c.head = c.head[:0]
	for _, b := range data {
		if len(c.head) == maxChunkHead {
			break
		}
		d := b.ReadOnlyData()
		c.head = append(c.head, d[:min(len(d), maxChunkHead-len(c.head))]...)
	}
	if fields, start, ok := batchesAtEnd(c.head, total); ok {
		if err := proto.Unmarshal(c.head[:fields], &c.msg); err != nil {
			return err
		}
		data.Ref()
		c.held = data
		skip := start
		for _, b := range data {
			d := b.ReadOnlyData()
			if skip >= len(d) {
				skip -= len(d)
				continue
			}
			c.pieces = append(c.pieces, d[skip:])
			skip = 0
		}
		return nil
	}
	buf := data.MaterializeToBuffer(wire.BufferPool())
	c.gathered.Hold(buf)
	return wire.UnmarshalAliasing(buf.ReadOnlyData(), &c.msg, batchesField, func(b []byte) {
		c.pieces = append(c.pieces[:0], b)
	})
}

// batchesAtEnd walks the fields at the start of an encoded chunk of total
// bytes (head is its first bytes). When the batches are the last field, a
// non-empty one, and every field before them lies in head, it reports
// where those fields end and where the batches' value starts.
func batchesAtEnd(head []byte, total int) (fields, start int, ok bool) {
	pos := 0
	for pos < len(head) {
		num, typ, n := protowire.ConsumeTag(head[pos:])
		if n < 0 {
			return 0, 0, false
		}
		if num == batchesField && typ == protowire.BytesType {
			l, m := protowire.ConsumeVarint(head[pos+n:])
			if m < 0 {
				return 0, 0, false
			}
			start = pos + n + m
			return pos, start, l > 0 && uint64(start)+l == uint64(total)
		}
		v := protowire.ConsumeFieldValue(num, typ, head[pos+n:])
		if v < 0 {
			return 0, 0, false
		}
		pos += n + v
	}
	return 0, 0, false
}

// Release frees the received buffers; nothing may point into them after.
func (c *chunkIn) Release() {
	if c.held != nil {
		c.held.Free()
		c.held = nil
	}
	c.gathered.Release()
	clear(c.pieces)
	c.pieces = c.pieces[:0]
}
