package kafka

import (
	"encoding/binary"
	"io"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// requestFrame is the body of one request frame as read from the socket.
// Produce frames are read into a buffer of the process's shared pool
// (wire.BufferPool: size classes of powers of two, in quarter steps above
// 64 KiB, handed out without zeroing, the pool the gRPC produce path receives into); every other
// frame into memory of its own.
//
// Pooling pays where the bytes are: a Produce frame is the size of its
// record batches, and allocating a fresh one per request was nearly all
// the memory the Kafka produce path allocated (2.9 GB for 3 GB produced)
// and made the collector a quarter of the server's CPU. The other
// requests are small, and kmsg's ReadFrom lets their byte fields (SASL
// tokens, group protocol metadata and member assignments, unknown tagged
// fields) point into the frame: a coordinator that keeps one would keep a
// pooled buffer that is already someone else's. Strings are copied by
// ReadFrom (only UnsafeReadFrom aliases them), so the client id, topic
// names, transactional ids and commit metadata never point into a frame.
//
// A Produce request's record batches point into the frame until it is
// freed, which handle does when the budget of the request is given back:
// once its response is encoded, after Reply.Wait has returned, or once it
// is known there is none (acks=0, a refused or failed request). Nothing
// of a Produce request may be kept past that: the storage node's handler
// copies the batches into the log during the call (Log.AppendAsLeader
// writes them to the segment file before it returns; the producer state,
// the epoch cache, the index and the results keep numbers only), and its
// response, errors, spans and log lines are built from copied strings and
// numbers.
type requestFrame struct {
	b   []byte
	buf *[]byte // the pooled buffer b is in, nil when b is not pooled
}

// free gives a pooled frame back; nothing may read b after.
func (f requestFrame) free() {
	if f.buf != nil {
		releaseRequestFrame(f.buf)
	}
}

// releaseRequestFrame returns a pooled request frame to the pool. Tests
// replace it to overwrite each frame as it is given back, so that a read
// of a freed frame sees garbage rather than, by luck, its old bytes.
var releaseRequestFrame = func(buf *[]byte) { wire.BufferPool().Put(buf) }

// readFrame reads the next frame body of size bytes (already checked
// against Config.MaxRequestBytes and acquired from the request budget).
// The API key, its first two bytes, is read first, to choose where the
// frame goes: a bare SASL token after a v0 handshake has no header and is
// never pooled. (Read, not peeked: the reader holds no buffer once what it
// has is read, so there may be nothing to peek at.)
func (c *conn) readFrame(size int) (requestFrame, error) {
	var key [2]byte
	head := 0
	pooled := false
	if !c.sasl.raw && size >= 2 {
		if _, err := io.ReadFull(c.br, key[:]); err != nil {
			return requestFrame{}, err
		}
		head = 2
		pooled = int16(binary.BigEndian.Uint16(key[:])) == produceKey
	}
	var f requestFrame
	if pooled {
		f.buf = wire.BufferPool().Get(size)
		f.b = *f.buf
	} else {
		f.b = make([]byte, size)
	}
	copy(f.b, key[:head])
	if _, err := io.ReadFull(c.br, f.b[head:]); err != nil {
		f.free()
		return requestFrame{}, err
	}
	return f, nil
}
