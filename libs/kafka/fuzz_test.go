package kafka

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// frameOf is req at version as a request frame without its size prefix.
func frameOf(req kmsg.Request, version int16) []byte {
	req.SetVersion(version)
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, 7)[4:]
}

// rawFrame is a request header (v1) for key and version followed by body.
func rawFrame(key, version int16, body ...byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, 7)
	b = append(b, 0xff, 0xff) // null client id
	return append(b, body...)
}

// claimingFrame is a Produce v3 request whose topic array claims as many
// elements as its zero-filled rest could hold at two bytes each, the most
// kmsg lets an array claim: the decoder allocates the element structs
// before it reads them.
func claimingFrame(size int) []byte {
	body := []byte{0xff, 0xff, 0, 1, 0, 0, 0x75, 0x30} // null transactional id, acks 1, timeout 30 s
	body = binary.BigEndian.AppendUint32(body, uint32((size-len(body)-4-10)/2))
	return append(rawFrame(0, 3, body...), make([]byte, size-len(body)-10)...)
}

func seedFrames() [][]byte {
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks, produce.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "orders"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = make([]byte, 61) // shape of an empty record batch; content is the handler's to check
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	meta.Topics = append(meta.Topics, mt)
	api := kmsg.NewPtrApiVersionsRequest()
	api.ClientSoftwareName, api.ClientSoftwareVersion = "fuzz", "1"
	return [][]byte{
		frameOf(api, 0), frameOf(api, 3), frameOf(api, 4), frameOf(api, 5),
		frameOf(produce, 3), frameOf(produce, 9), frameOf(produce, 11),
		frameOf(meta, 1), frameOf(meta, 12),
		frameOf(kmsg.NewPtrFetchRequest(), 16),
		frameOf(kmsg.NewPtrHeartbeatRequest(), 4),
		// Array lengths: the largest int32, negative, a compact one of
		// 2^32 (flexible Produce v9: uvarint 0xffffffff).
		rawFrame(0, 3, 0xff, 0xff, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff),
		rawFrame(0, 3, 0xff, 0xff, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe),
		rawFrame(0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		rawFrame(3, 1, 0x7f, 0xff, 0xff, 0xff),
		rawFrame(3, 12, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		// Header tagged fields: a huge count, a huge size.
		rawFrame(3, 12, 0xff, 0xff, 0xff, 0xff, 0x0f),
		rawFrame(3, 12, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		// Unknown key, negative key and version, a version no one has.
		rawFrame(999, 0), rawFrame(-1, 0), rawFrame(3, -1), rawFrame(3, 0x7fff), rawFrame(18, 0x7fff),
		// Client id longer than the frame, and negative.
		{0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0xff},
		{0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xfb, 0, 0, 0, 0},
		{}, {0}, {0, 18, 0, 0, 0, 0, 0},
		claimingFrame(64 << 10),
	}
}

// maxDecodeBytes bounds what handling one frame may allocate: kmsg's
// element structs are at most a few dozen times the two or more wire
// bytes it demands per claimed element; measured worst about 40x.
func maxDecodeBytes(frameLen int) uint64 { return 64*uint64(frameLen) + 256<<10 }

// FuzzRequestDecode feeds frames through a connection's whole request
// path (header, key and version lookup, kmsg decode, handler, response
// encoding): nothing may panic out of it, and no frame may make it
// allocate more than a bounded multiple of its size (KAFKA-14063).
func FuzzRequestDecode(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	mux := NewMux()
	echo := func(_ context.Context, req *Request) (Reply, error) { return Now(req.Msg.ResponseKind()), nil }
	mux.Handle(0, 3, 11, echo)
	mux.Handle(1, 4, 16, echo)
	mux.Handle(3, 1, 12, echo)
	mux.Handle(12, 0, 4, echo)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(f, err)
	s := NewServer(Config{MaxPendingResponses: 1}, mux, lis, ServerOptions{})
	f.Cleanup(func() { _ = lis.Close() }) // never started: nothing else to stop
	f.Fuzz(func(t *testing.T, frame []byte) {
		server, client := net.Pipe()
		defer client.Close()
		c := newConn(s, server)
		defer c.close()
		// The frame is pooled as Produce frames are, so the fuzzer also
		// checks that nothing reads a frame after it is freed (freed
		// frames are overwritten in tests).
		buf := wire.BufferPool().Get(len(frame))
		copy(*buf, frame)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		require.NoError(t, s.queued.acquire(context.Background(), nil, int64(len(frame))))
		if c.handle(requestFrame{b: *buf, buf: buf}) {
			select {
			case sl := <-c.pending:
				<-sl.done
			default: // no response wanted
			}
		}
		runtime.ReadMemStats(&after)
		require.LessOrEqual(t, after.TotalAlloc-before.TotalAlloc, maxDecodeBytes(len(frame)),
			"bytes allocated handling a %d-byte frame", len(frame))
	})
}

func TestClaimedArrayAllocationIsBounded(t *testing.T) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		frame := claimingFrame(size)
		h, rest, err := parseHeader(frame)
		require.NoError(t, err)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = decodeBody(h.key, h.version, rest)
		runtime.ReadMemStats(&after)
		// An empty topic takes 6 bytes, so the zeros hold a third of the
		// topics claimed: the decoder allocated them all, then ran out.
		require.Error(t, err)
		used := after.TotalAlloc - before.TotalAlloc
		require.LessOrEqual(t, used, maxDecodeBytes(size))
		require.Greater(t, used, uint64(size), "the claim was not allocated: this test no longer measures the worst case")
		t.Logf("%d-byte frame claiming %d topics: %d bytes allocated (%.0fx)", size, (size-22)/2, used, float64(used)/float64(size))
	}
}
