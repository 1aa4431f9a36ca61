package kafka

import (
	"encoding/binary"
	"math"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Response frames are encoded into pooled buffers, given back once
// written: a busy connection would otherwise allocate (and the GC scan)
// one buffer per response.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooledFrame is the largest buffer kept for reuse: a rare huge
// response (a large Metadata, a Fetch copied whole) is left to the GC
// rather than pinned in the pool.
const maxPooledFrame = 256 << 10

func getFrameBuf() *[]byte { return framePool.Get().(*[]byte) }

func putFrameBuf(b *[]byte) {
	if cap(*b) > maxPooledFrame {
		return
	}
	*b = (*b)[:0]
	framePool.Put(b)
}

// refMinBytes is the smallest record batches field of a Fetch response
// written from its own memory rather than copied into the frame: below
// it a copy costs less than another piece in the write.
const refMinBytes = 8 << 10

// fetchPieces frames a Fetch response with its large record batches by
// reference: the frame is the pieces in order, the encoded response
// around the batches (in the returned pooled buffer) and the batches' own
// slices in between, so batches lent from the page cache go to the socket
// without a copy. It reports false when no batch is large enough, or the
// layout found is not the expected one; the caller then encodes the
// response whole.
//
// Where each batches field sits in the encoding is found without
// encoding anything by hand: the response is encoded twice with a
// one-byte stand-in in every large batches field, 0x00 then 0xff; the
// bytes that differ are exactly the stand-ins, in field order. Only the
// stand-ins' length prefixes are then rewritten for the real lengths.
// Both encodings are of the response without its large batches: small.
func fetchPieces(correlationID int32, flexibleHeader bool, resp *kmsg.FetchResponse) (*[]byte, net.Buffers, bool) {
	var fields []*[]byte
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if rb := &resp.Topics[i].Partitions[j].RecordBatches; len(*rb) >= refMinBytes {
				fields = append(fields, rb)
			}
		}
	}
	if len(fields) == 0 {
		return nil, nil, false
	}
	batches := make([][]byte, len(fields))
	for k, f := range fields {
		batches[k] = *f
	}
	probe := func(buf *[]byte, b byte) []byte {
		stand := []byte{b}
		for _, f := range fields {
			*f = stand
		}
		*buf = appendResponse((*buf)[:0], correlationID, flexibleHeader, resp)
		return *buf
	}
	pa, pb := getFrameBuf(), getFrameBuf()
	defer putFrameBuf(pa)
	a, b := probe(pa, 0x00), probe(pb, 0xff)
	for k, f := range fields {
		*f = batches[k]
	}
	flexible := resp.IsFlexible()
	at, ok := standIns(a, b, len(fields), flexible)
	if !ok {
		putFrameBuf(pb)
		return nil, nil, false
	}
	// The frame's own bytes are rebuilt in b's buffer from a.
	out := b[:0]
	bounds := make([]int, 0, 2*len(at)+2)
	prev, total := 0, 0
	for k, p := range at {
		bounds = append(bounds, len(out))
		out = append(out, a[prev:p-prefixLen(flexible)]...)
		if flexible {
			out = binary.AppendUvarint(out, uint64(len(batches[k]))+1) // compact nullable bytes: length + 1
		} else {
			out = binary.BigEndian.AppendUint32(out, uint32(len(batches[k])))
		}
		bounds = append(bounds, len(out))
		total += len(batches[k])
		prev = p + 1
	}
	bounds = append(bounds, len(out))
	out = append(out, a[prev:]...)
	bounds = append(bounds, len(out))
	*pb = out
	total += len(out) - 4
	if total > math.MaxInt32 {
		putFrameBuf(pb)
		return nil, nil, false
	}
	binary.BigEndian.PutUint32(out, uint32(total))
	pieces := make(net.Buffers, 0, 2*len(at)+1)
	for k := range at {
		pieces = append(pieces, out[bounds[2*k]:bounds[2*k+1]], batches[k])
	}
	pieces = append(pieces, out[bounds[2*len(at)]:bounds[2*len(at)+1]])
	return pb, pieces, true
}

// prefixLen is the length prefix of a one-byte batches field: an int32,
// or for flexible versions the uvarint 2.
func prefixLen(flexible bool) int {
	if flexible {
		return 1
	}
	return 4
}

// standIns returns the positions where a and b differ, which must be n
// stand-in bytes each behind the length prefix of one byte.
func standIns(a, b []byte, n int, flexible bool) ([]int, bool) {
	if len(a) != len(b) {
		return nil, false
	}
	at := make([]int, 0, n)
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		if len(at) == n || a[i] != 0x00 || b[i] != 0xff {
			return nil, false
		}
		pl := prefixLen(flexible)
		if i < pl || flexible && a[i-1] != 2 || !flexible && binary.BigEndian.Uint32(a[i-4:]) != 1 {
			return nil, false
		}
		at = append(at, i)
	}
	return at, len(at) == n
}
