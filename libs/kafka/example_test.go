package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/kafka"
)

// A role registers the API keys it serves on the process's mux; the
// listener answers ApiVersions from them and routes every request.
func Example() {
	mux := kafka.NewMux()
	mux.Handle(12, 0, 4, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		hb := req.Msg.(*kmsg.HeartbeatRequest)
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		if hb.Group == "" {
			resp.ErrorCode = 24 // INVALID_GROUP_ID: per-request errors go in the response
		}
		return kafka.Now(resp), nil
	})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{})
	_ = srv.Start(context.Background())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	}()

	// What a Kafka client sends first.
	conn, _ := net.Dial("tcp", lis.Addr().String())
	defer conn.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "example", "1.0"
	req.SetVersion(3)
	_, _ = conn.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("example")).AppendRequest(nil, req, 1))

	var size [4]byte
	_, _ = io.ReadFull(conn, size[:])
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, _ = io.ReadFull(conn, frame)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	_ = resp.ReadFrom(frame[4:]) // after the correlation id: ApiVersions' header is always v0
	for _, k := range resp.ApiKeys {
		fmt.Printf("%s v%d-v%d\n", kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion)
	}
	// Output:
	// Heartbeat v0-v4
	// ApiVersions v0-v4
}
