package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// figures are the named values one measurement produces.
type figures map[string]float64

func printFigures(f figures) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}

// rawCodec passes []byte messages through gRPC untouched, so the ceiling
// measured is grpc-go's transport, not protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = data
	return nil
}

func (rawCodec) Name() string { return "bench-raw" }

// sinkService is a client-streaming method that counts what it receives.
var sinkService = grpc.ServiceDesc{
	ServiceName: "bench.Sink",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Push", ClientStreams: true, Handler: func(_ any, st grpc.ServerStream) error {
		var n int64
		for {
			var b []byte
			if err := st.RecvMsg(&b); err != nil {
				if errors.Is(err, io.EOF) {
					out := fmt.Appendf(nil, "%d", n)
					return st.SendMsg(&out)
				}
				return err
			}
			n += int64(len(b))
		}
	}}},
}

// limitGRPC measures one client stream of raw messages over loopback with
// the grpc-go version Sluice uses: the ceiling of a gRPC data path.
func limitGRPC(args []string) error {
	fs := flag.NewFlagSet("limit-grpc", flag.ExitOnError)
	size := fs.Int("size", 1<<20, "message bytes")
	dur := fs.Duration("dur", 3*time.Second, "duration")
	_ = fs.Parse(args) // ExitOnError
	encoding.RegisterCodec(rawCodec{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(64<<20),
		grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(16<<20),
		grpc.ReadBufferSize(1<<20), grpc.WriteBufferSize(1<<20))
	s.RegisterService(&sinkService, nil)
	go func() { _ = s.Serve(ln) }() // ends with Stop
	defer s.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20),
		grpc.WithReadBufferSize(1<<20), grpc.WithWriteBufferSize(1<<20))
	if err != nil {
		return err
	}
	defer cc.Close()
	st, err := cc.NewStream(context.Background(), &sinkService.Streams[0], "/bench.Sink/Push")
	if err != nil {
		return err
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte(i)
	}
	// Warm up the connection and its windows.
	for range 16 {
		if err := st.SendMsg(&payload); err != nil {
			return err
		}
	}
	start := time.Now()
	var n int64
	for time.Since(start) < *dur {
		if err := st.SendMsg(&payload); err != nil {
			return err
		}
		n += int64(len(payload))
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	var ack []byte
	if err := st.RecvMsg(&ack); err != nil {
		return err
	}
	sec := time.Since(start).Seconds()
	return printFigures(figures{"mb_per_s": float64(n) / sec / 1e6, "msgs_per_s": float64(n) / float64(*size) / sec, "msg_bytes": float64(*size)})
}

// limitFsync writes 1 MiB chunks to a new file and fdatasyncs after each:
// group commit's bound on this disk.
func limitFsync(args []string) error {
	fs := flag.NewFlagSet("limit-fsync", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
	chunk := fs.Int("chunk", 1<<20, "bytes between fdatasyncs")
	total := fs.Int64("size", 1<<30, "most bytes to write")
	dur := fs.Duration("dur", 4*time.Second, "longest run")
	_ = fs.Parse(args) // ExitOnError
	path := filepath.Join(*dir, "fdatasync.dat")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, *chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	h := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	start := time.Now()
	var n int64
	for n < *total && time.Since(start) < *dur {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		t := time.Now()
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		_ = h.RecordValue(max(time.Since(t).Microseconds(), 1)) // in range unless a sync takes 10 s
		n += int64(len(buf))
	}
	sec := time.Since(start).Seconds()
	return printFigures(figures{
		"mb_per_s":    float64(n) / sec / 1e6,
		"sync_p50_ms": float64(h.ValueAtQuantile(50)) / 1000,
		"sync_p99_ms": float64(h.ValueAtQuantile(99)) / 1000,
		"syncs":       float64(h.TotalCount()),
	})
}

// limitRead reads a file that is in the page cache, in 1 MiB chunks.
func limitRead(args []string) error {
	fs := flag.NewFlagSet("limit-read", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "directory for the file")
	size := fs.Int64("size", 512<<20, "file bytes")
	passes := fs.Int("passes", 4, "timed reads of the whole file")
	_ = fs.Parse(args) // ExitOnError
	path := filepath.Join(*dir, "pagecache.dat")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 3)
	}
	for w := int64(0); w < *size; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	readAll := func() (int64, error) {
		var n int64
		for off := int64(0); ; {
			k, err := f.ReadAt(buf, off)
			n += int64(k)
			off += int64(k)
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			if err != nil {
				return n, err
			}
		}
	}
	if _, err := readAll(); err != nil { // the file is now surely cached
		return err
	}
	start := time.Now()
	var n int64
	for range *passes {
		k, err := readAll()
		if err != nil {
			return err
		}
		n += k
	}
	return printFigures(figures{"mb_per_s": float64(n) / time.Since(start).Seconds() / 1e6})
}
