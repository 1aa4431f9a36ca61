package storagenode

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/kafka"
)

// Large batches fetched through the listener reach the client byte for
// byte: the response points at the page cache's chunks and the listener
// writes them from there before the fetch gives them back.
func TestKafkaFetchLargeBatchesThroughTheListener(t *testing.T) {
	r := newKafkaNode(t)
	var want []byte
	for i := range 6 {
		b := kafkaBatch(t, record.CodecNone, strings.Repeat(string(rune('a'+i)), 20<<10), strings.Repeat("z", 5<<10))
		rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, bytes.Clone(b))))
		require.Zero(t, rp.ErrorCode, rp.ErrorMessage)
		record.AssignOffsets(b, int64(2*i), 3) // leader epoch 3
		want = append(want, b...)
	}
	mux := kafka.NewMux()
	r.registerKafka(mux)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	nc, err := net.Dial("tcp", lis.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))

	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	for i, version := range []int16{4, 11, 12, 16, 12} {
		req := fetchReq(version, "t", [16]byte{}, 0)
		if version >= 13 {
			id, ok := kafka.TopicID(testTopicID)
			require.True(t, ok)
			req.Topics[0].TopicID = id
		}
		_, err := nc.Write(f.AppendRequest(nil, req, int32(i)))
		require.NoError(t, err)
		var size [4]byte
		_, err = io.ReadFull(nc, size[:])
		require.NoError(t, err)
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		_, err = io.ReadFull(nc, frame)
		require.NoError(t, err)
		require.Equal(t, int32(i), int32(binary.BigEndian.Uint32(frame)))
		body := frame[4:]
		if version >= 12 {
			body = body[1:] // empty header tags
		}
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = version
		require.NoError(t, resp.ReadFrom(body))
		fp := onlyFetch(t, resp)
		require.Zero(t, fp.ErrorCode, "v%d", version)
		require.EqualValues(t, 12, fp.HighWatermark)
		if !bytes.Equal(want, fp.RecordBatches) {
			n := 0
			for n < min(len(want), len(fp.RecordBatches)) && want[n] == fp.RecordBatches[n] {
				n++
			}
			t.Fatalf("v%d: %d vs %d bytes, first difference at %d", version, len(want), len(fp.RecordBatches), n)
		}
	}
}

// A long-poll Fetch waiting through the listener is answered when the
// listener stops, not at its max wait: the listener writes the answers of
// the requests it read before it closes, so it would otherwise stop only
// after the longest wait any client asked for.
func TestKafkaFetchLongPollAnsweredAtStop(t *testing.T) {
	const maxWait = time.Minute
	r := newKafkaNode(t)
	mux := kafka.NewMux()
	waiting := make(chan struct{})
	mux.Handle(int16(kmsg.Fetch), kafkaFetchMin, kafkaFetchMax, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
		rep, err := r.kafkaFetch(ctx, req)
		if rep.Wait != nil {
			close(waiting)
		}
		return rep, err
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
	require.NoError(t, s.Start(context.Background()))
	nc, err := net.Dial("tcp", lis.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(2*maxWait)))

	req := fetchReq(11, "t", [16]byte{}, 0) // an empty partition: the fetch waits
	req.MaxWaitMillis, req.MinBytes = int32(maxWait/time.Millisecond), 1
	_, err = nc.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, 7))
	require.NoError(t, err)
	<-waiting // a stop before the listener read the fetch would not test it

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*maxWait)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
	took := time.Since(start)
	var size [4]byte
	_, err = io.ReadFull(nc, size[:])
	require.NoError(t, err, "the waiting fetch was not answered")
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(nc, frame)
	require.NoError(t, err)
	require.Equal(t, int32(7), int32(binary.BigEndian.Uint32(frame)))
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 11
	require.NoError(t, resp.ReadFrom(frame[4:]))
	require.Zero(t, onlyFetch(t, resp).ErrorCode)
	require.Less(t, took, maxWait/2, "the stop waited for the fetch's max wait")
}
