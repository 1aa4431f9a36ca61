package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// DefaultClientID is the client id of a Client whose Config names none.
const DefaultClientID = "sluice"

// ClientIDHeader is the gRPC metadata key that carries Config.ClientID.
const ClientIDHeader = "sluice-client-id"

// ThrottleHeader is the gRPC header (Produce) or trailer (Fetch) in which a
// node reports how long it held a call because the client was over a
// quota, in milliseconds.
const ThrottleHeader = "sluice-throttle-time-ms"

// clientIDOptions add the client id to every call's metadata.
func clientIDOptions(id string) []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, ClientIDHeader, id), method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(metadata.AppendToOutgoingContext(ctx, ClientIDHeader, id), desc, cc, method, opts...)
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}
