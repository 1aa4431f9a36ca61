package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/kafka"
)

// payload is the record batches field of request corr on connection conn:
// a size and a fill byte of their own, so a frame reused for another
// request, or overwritten when freed, never reads back as this one.
func payload(conn, corr int) []byte {
	// At most 32 KiB: the response's error message, a string with an
	// int16 length, carries it back.
	return bytes.Repeat([]byte{byte(conn*61 + corr)}, 512+(conn*7919+corr*1237)%(31<<10))
}

// A Produce frame is a pooled buffer its record batches point into. It
// must stay the request's until the response is encoded: the handler reads
// the batches during the call and again in Reply.Wait, after the reader
// has gone on to the next frame, and the response itself points into
// them (its error message is the batches' bytes, not a copy). Freed frames
// are overwritten in tests (reqframe_internal_test.go) and reused by later
// requests, so a frame freed early shows up as a wrong byte.
func TestProduceFrameLivesUntilItsResponseIsEncoded(t *testing.T) {
	const conns, requests = 4, 40
	// handled[conn][corr] is closed once request corr's handler has run.
	handled := make([][]chan struct{}, conns)
	for i := range handled {
		handled[i] = make([]chan struct{}, requests+2)
		for j := range handled[i] {
			handled[i][j] = make(chan struct{})
		}
	}
	var mu sync.Mutex
	var wrong []string
	check := func(where string, conn, corr int, got []byte) {
		if !bytes.Equal(got, payload(conn, corr)) {
			mu.Lock()
			wrong = append(wrong, fmt.Sprintf("conn %d request %d, %s: the batches changed", conn, corr, where))
			mu.Unlock()
		}
	}
	mux := kafka.NewMux()
	mux.Handle(0, 3, 11, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		r := req.Msg.(*kmsg.ProduceRequest)
		var conn int
		if _, err := fmt.Sscanf(r.Topics[0].Topic, "conn-%d", &conn); err != nil {
			return kafka.Reply{}, err
		}
		corr := int(req.CorrelationID)
		records := r.Topics[0].Partitions[0].Records
		check("in the handler", conn, corr, records)
		answer := func() kmsg.Response {
			resp := r.ResponseKind().(*kmsg.ProduceResponse)
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = r.Topics[0].Topic
			rp := kmsg.NewProduceResponseTopicPartition()
			msg := unsafe.String(&records[0], len(records)) // encoded from the frame itself
			rp.ErrorMessage = &msg
			rt.Partitions = append(rt.Partitions, rp)
			resp.Topics = append(resp.Topics, rt)
			return resp
		}
		close(handled[conn][corr])
		if corr%2 == 0 || corr == requests+1 {
			return kafka.Now(answer()), nil
		}
		return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
			// Answered only once the next request has been read and
			// handled (the last one sent is answered at once).
			select {
			case <-handled[conn][corr+1]:
			case <-ctx.Done():
			}
			check("in Reply.Wait", conn, corr, records)
			return answer()
		}}, nil
	})
	s := startServer(t, kafka.Config{}, mux)
	var wg sync.WaitGroup
	for conn := range conns {
		c := dial(t, s)
		wg.Go(func() {
			for corr := 1; corr <= requests+1; corr++ {
				req := kmsg.NewPtrProduceRequest()
				req.Acks, req.TimeoutMillis = -1, 1000
				rt := kmsg.NewProduceRequestTopic()
				rt.Topic = fmt.Sprintf("conn-%d", conn)
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Records = payload(conn, corr)
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				c.send(req, 8)
			}
		})
		wg.Go(func() {
			for corr := 1; corr <= requests; corr++ {
				resp := kmsg.NewPtrProduceResponse()
				resp.Version = 8
				got := c.recv(resp, false)
				if int(got) != corr || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("conn %d: response %d has correlation id %d or the wrong shape", conn, corr, got))
					mu.Unlock()
					return
				}
				msg := resp.Topics[0].Partitions[0].ErrorMessage
				check("in the response", conn, corr, []byte(*msg))
			}
		})
	}
	wg.Wait()
	require.Empty(t, wrong[:min(len(wrong), 5)], "%d wrong reads in all", len(wrong))
}
