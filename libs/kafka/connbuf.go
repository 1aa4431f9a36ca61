package kafka

import (
	"bufio"
	"io"
	"sync"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// Buffers of a connection, held only while it reads or writes. Each
// connection used to keep a 32 KiB reader and a 64 KiB writer for its
// life, and an idle connection spends its life waiting: 5,000 idle
// clients held 480 MiB of buffers holding nothing. Now the reader takes
// its buffer from readPool once the socket has bytes to read and gives
// it back when they are read (wire.ReadyReader), and the writer takes a
// bufio.Writer from writerPool for the responses queued at a time and
// gives it back after their flush. A busy connection keeps both from one
// request to the next as long as requests keep coming; each change of
// hands is a pool Get and Put, no copy.

// readBufferSize is the reader's buffer: a read system call moves up to
// this much, and a Read of at least this much (the rest of a large
// Produce frame) goes straight into the frame.
const readBufferSize = 32 << 10

// writeBufferSize is the writer's buffer: the responses queued together
// leave in writes of up to this much; a larger one is written from its
// own memory.
const writeBufferSize = 64 << 10

// readPool holds the readers' buffers; tests count what it hands out.
var readPool = wire.BufferPool()

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// getWriter and putWriter take and give back a connection's writer; tests
// replace them to count writers held.
var (
	getWriter = func(w io.Writer) *bufio.Writer {
		bw := writerPool.Get().(*bufio.Writer)
		bw.Reset(w)
		return bw
	}
	putWriter = func(bw *bufio.Writer) {
		bw.Reset(nil) // drops what a failed write left, and the connection
		writerPool.Put(bw)
	}
)
