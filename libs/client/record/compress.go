package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// DefaultDecompressLimit caps how large one batch's records may grow when
// decompressed. A hostile producer can send a 1 MiB batch that inflates to
// gigabytes; every decompression in Sluice is bounded so such a batch costs
// at most this much memory before it is rejected.
const DefaultDecompressLimit = 64 << 20

// xerialHeader starts a snappy payload in the framing of the xerial
// snappy-java library, which Kafka's Java producer writes: the magic, then
// version 1 and minimum compatible version 1, then blocks each prefixed with
// its compressed length.
var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}

// xerialBlock is the uncompressed size of one xerial block; snappy-java uses
// 32 KiB.
const xerialBlock = 32 << 10

// appendWriter is an io.Writer that appends to a slice, so that streaming
// compressors can write straight into a caller's reusable buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Streaming compressors and decompressors are pooled together with the
// reader and writer they are attached to: their state is tens of KiB to MiB,
// far too much to allocate per batch, and keeping the adapters in the same
// pooled object keeps the steady path free of allocations.
type gzipEnc struct {
	w  *gzip.Writer
	aw appendWriter
}

type lz4Enc struct {
	w  *lz4.Writer
	aw appendWriter
}

type gzipDec struct {
	r  gzip.Reader
	br bytes.Reader
}

type lz4Dec struct {
	r  *lz4.Reader
	br bytes.Reader
}

type zstdDec struct {
	r  *zstd.Decoder
	br bytes.Reader
}

var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
		return &gzipEnc{w: w}
	}}
	lz4Writers = sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// Kafka's Java client writes 64 KiB blocks; the library default of
		// 4 MiB would make every small batch pay for a 4 MiB buffer.
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb))
		return &lz4Enc{w: w}
	}}
	gzipReaders = sync.Pool{New: func() any { return new(gzipDec) }}
	lz4Readers  = sync.Pool{New: func() any { return &lz4Dec{r: lz4.NewReader(nil)} }}
	zstdReaders = sync.Pool{New: func() any {
		// One block in flight: decoding is synchronous and starts no
		// goroutines, and memory stays bounded per decoder.
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			panic(err) // only invalid options fail
		}
		return &zstdDec{r: d}
	}}

	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
)

func zstdEncoder() *zstd.Encoder {
	zstdOnce.Do(func() {
		var err error
		// EncodeAll is safe for concurrent use; the encoder keeps a small
		// pool of block encoders and starts no goroutines for it.
		zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(2), zstd.WithWindowSize(1<<20))
		if err != nil {
			panic(err) // only invalid options fail
		}
	})
	return zstdEnc
}

// Compress appends src compressed with codec c to dst and returns the
// extended slice. Output is what Kafka's clients produce: a gzip member, an
// xerial-framed snappy stream, an LZ4 frame, a zstd frame.
func Compress(dst, src []byte, c Codec) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		e := gzipWriters.Get().(*gzipEnc)
		defer gzipWriters.Put(e)
		e.aw.b = dst
		defer func() { e.aw.b = nil }()
		e.w.Reset(&e.aw)
		if _, err := e.w.Write(src); err != nil {
			return dst, err
		}
		if err := e.w.Close(); err != nil {
			return dst, err
		}
		return e.aw.b, nil
	case CodecSnappy:
		return appendXerial(dst, src), nil
	case CodecLZ4:
		e := lz4Writers.Get().(*lz4Enc)
		defer lz4Writers.Put(e)
		e.aw.b = dst
		defer func() { e.aw.b = nil }()
		e.w.Reset(&e.aw)
		if _, err := e.w.Write(src); err != nil {
			return dst, err
		}
		if err := e.w.Close(); err != nil {
			return dst, err
		}
		return e.aw.b, nil
	case CodecZstd:
		return zstdEncoder().EncodeAll(src, dst), nil
	}
	return dst, errs.New(errs.UnsupportedCompressionType, "unknown compression codec %d", c)
}

// appendXerial appends src as an xerial snappy stream.
func appendXerial(dst, src []byte) []byte {
	dst = append(dst, xerialHeader...)
	for len(src) > 0 {
		chunk := src
		if len(chunk) > xerialBlock {
			chunk = chunk[:xerialBlock]
		}
		src = src[len(chunk):]
		need := 4 + s2.MaxEncodedLen(len(chunk))
		dst = grow(dst, need)
		start := len(dst)
		enc := s2.EncodeSnappy(dst[start+4:start+need], chunk)
		binary.BigEndian.PutUint32(dst[start:start+4], uint32(len(enc)))
		dst = dst[:start+4+len(enc)]
	}
	return dst
}

// grow makes room for n more bytes after len(b) without changing len(b).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// errTooLarge is the decompression-bomb error.
func errTooLarge(c Codec, limit int) error {
	return errs.New(errs.MessageTooLarge, "%s batch decompresses to more than the limit of %d bytes", c, limit)
}

// Decompress appends the decompression of src to dst. It fails with
// MessageTooLarge as soon as the output would exceed limit bytes (limit <= 0
// means DefaultDecompressLimit), and with CorruptMessage on malformed input.
// Snappy input may be xerial-framed (Java clients) or a raw block (some
// other clients).
func Decompress(dst, src []byte, c Codec, limit int) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultDecompressLimit
	}
	var err error
	switch c {
	case CodecNone:
		if len(src) > limit {
			return dst, errTooLarge(c, limit)
		}
		return append(dst, src...), nil
	case CodecGzip:
		d := gzipReaders.Get().(*gzipDec)
		defer gzipReaders.Put(d)
		d.br.Reset(src)
		defer d.br.Reset(nil)
		if err = d.r.Reset(&d.br); err == nil {
			dst, err = readLimited(dst, &d.r, limit, c)
		}
	case CodecSnappy:
		dst, err = decodeSnappy(dst, src, limit)
	case CodecLZ4:
		d := lz4Readers.Get().(*lz4Dec)
		defer lz4Readers.Put(d)
		d.br.Reset(src)
		defer d.br.Reset(nil)
		d.r.Reset(&d.br)
		dst, err = readLimited(dst, d.r, limit, c)
	case CodecZstd:
		d := zstdReaders.Get().(*zstdDec)
		defer zstdReaders.Put(d)
		d.br.Reset(src)
		defer d.br.Reset(nil)
		if err = d.r.Reset(&d.br); err == nil {
			dst, err = readLimited(dst, d.r, limit, c)
		}
	default:
		return dst, errs.New(errs.UnsupportedCompressionType, "unknown compression codec %d", c)
	}
	if err != nil {
		var se *errs.Error
		if errors.As(err, &se) {
			return dst, err
		}
		return dst, errs.New(errs.CorruptMessage, "decompressing %s batch: %w", c, err)
	}
	return dst, nil
}

// readLimited reads r to EOF into dst, failing once more than limit bytes
// arrive. It reads at most limit+1 bytes, so a bomb costs limit bytes.
func readLimited(dst []byte, r io.Reader, limit int, c Codec) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = grow(dst, max(4096, min(cap(dst), limit+1-(len(dst)-start))))
		}
		room := cap(dst) - len(dst)
		if left := limit + 1 - (len(dst) - start); room > left {
			room = left
		}
		n, err := r.Read(dst[len(dst) : len(dst)+room])
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			return dst[:start], errTooLarge(c, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:start], err
		}
		if n == 0 && room == 0 {
			return dst[:start], errTooLarge(c, limit)
		}
	}
}

// decodeSnappy decodes an xerial stream or a raw snappy block, checking each
// block's declared size against the limit before decoding it.
func decodeSnappy(dst, src []byte, limit int) ([]byte, error) {
	start := len(dst)
	if !bytes.HasPrefix(src, xerialHeader[:8]) {
		return decodeSnappyBlock(dst, src, limit)
	}
	if len(src) < len(xerialHeader) {
		return dst, errors.New("truncated xerial header")
	}
	src = src[len(xerialHeader):]
	for len(src) > 0 {
		if len(src) < 4 {
			return dst[:start], errors.New("truncated xerial block length")
		}
		n := int(binary.BigEndian.Uint32(src))
		src = src[4:]
		if n < 0 || n > len(src) {
			return dst[:start], errors.New("xerial block overruns the payload")
		}
		var err error
		dst, err = decodeSnappyBlock(dst, src[:n], limit-(len(dst)-start))
		if err != nil {
			return dst[:start], err
		}
		src = src[n:]
	}
	return dst, nil
}

func decodeSnappyBlock(dst, block []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return dst, err
	}
	if n > limit {
		return dst, errTooLarge(CodecSnappy, limit)
	}
	dst = grow(dst, n)
	start := len(dst)
	out, err := s2.Decode(dst[start:start+n], block)
	if err != nil {
		return dst, err
	}
	if len(out) != n {
		return dst, errors.New("snappy block decoded to an unexpected size")
	}
	return dst[:start+n], nil
}
