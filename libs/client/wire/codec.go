package wire

import (
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Frame is a message whose wire encoding was prepared by hand, so bytes can
// go from the page cache to the socket without a copy into a protobuf
// message: Head holds protobuf fields already encoded, and Body is appended
// as one length-delimited field numbered Field, made of several slices.
// Each slice's Release (if set) runs once the transport has written it, so
// a memory-mapped segment stays mapped exactly as long as needed.
//
// On the wire a Frame is an ordinary protobuf message (fields may come in
// any order), so every client decodes it with its generated code.
type Frame struct {
	Head    []byte
	Field   protowire.Number
	Body    [][]byte
	Release []func()
}

// HeadOf encodes m as the head of a frame.
func HeadOf(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{}.Marshal(m)
}

// Free runs the releases of a frame that will not be sent.
func (f *Frame) Free() {
	for _, r := range f.Release {
		if r != nil {
			r()
		}
	}
	f.Release = nil
}

// codec marshals Frames by reference and every other message with the
// standard protobuf codec, so health, reflection and every other service
// keep working on a server that uses it.
type codec struct{ proto encoding.CodecV2 }

// PassThroughCodec returns the server codec that sends Frames without
// copying their bodies.
func PassThroughCodec() encoding.CodecV2 {
	return codec{proto: encoding.GetCodecV2(protoenc.Name)}
}

func (c codec) Name() string { return protoenc.Name }

// BufferDecoder is a message holder that decodes from a buffer it keeps:
// a handler that receives into one (RecvMsg) can point into the received
// bytes instead of copying them, and frees the buffer when done with them.
type BufferDecoder interface {
	// DecodeBuffer decodes buf and takes ownership of it, including when
	// it fails.
	DecodeBuffer(buf mem.Buffer) error
}

// Held keeps the received buffer of a BufferDecoder until Release.
type Held struct{ buf mem.Buffer }

// Hold releases the buffer held so far and keeps buf.
func (h *Held) Hold(buf mem.Buffer) {
	h.Release()
	h.buf = buf
}

// Release frees the held buffer; nothing may point into it after.
func (h *Held) Release() {
	if h.buf != nil {
		h.buf.Free()
		h.buf = nil
	}
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if d, ok := v.(BufferDecoder); ok {
		// The message arrives in several buffers (one per HTTP/2 frame);
		// gathering them is the one copy on this path.
		return d.DecodeBuffer(data.MaterializeToBuffer(sharedPool))
	}
	return c.proto.Unmarshal(data, v)
}

// Encoded is a message already in its wire encoding, in pieces that are
// sent by reference: a client puts large bytes fields (record batches) on
// the wire without first copying them into one marshalled buffer. The
// pieces must not change until the call that sends them is answered.
type Encoded [][]byte

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(Encoded); ok {
		out := make(mem.BufferSlice, 0, len(e))
		for _, b := range e {
			out = append(out, mem.SliceBuffer(b))
		}
		return out, nil
	}
	f, ok := v.(*Frame)
	if !ok {
		return c.proto.Marshal(v)
	}
	total := 0
	for _, b := range f.Body {
		total += len(b)
	}
	head := make([]byte, 0, len(f.Head)+protowire.SizeTag(f.Field)+protowire.SizeVarint(uint64(total)))
	head = append(head, f.Head...)
	if len(f.Body) > 0 {
		head = protowire.AppendTag(head, f.Field, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(total))
	}
	out := make(mem.BufferSlice, 0, 1+len(f.Body))
	out = append(out, mem.SliceBuffer(head))
	for i, b := range f.Body {
		var rel func()
		if i < len(f.Release) {
			rel = f.Release[i]
		}
		if rel == nil {
			out = append(out, mem.SliceBuffer(b))
			continue
		}
		if mem.IsBelowBufferPoolingThreshold(cap(b)) {
			// grpc-go does not track buffers this small: copy and release
			// now.
			out = append(out, mem.SliceBuffer(append([]byte(nil), b...)))
			rel()
			continue
		}
		data := b
		out = append(out, mem.NewBuffer(&data, releaser(rel)))
	}
	f.Release = nil // owned by the buffers now
	return out, nil
}

// releaser is a BufferPool of one buffer: putting it back runs the release.
type releaser func()

func (r releaser) Get(int) *[]byte {
	panic("grpcx: releaser used as an allocating pool") // never called: buffers come from mmap
}

func (r releaser) Put(*[]byte) { r() }
