package wire

import (
	"crypto/tls"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
)

// ClientOptions configure Dial.
type ClientOptions struct {
	// Telemetry propagates trace context and records client spans; nil
	// disables it.
	Telemetry *Telemetry
	// MaxRecvMsgBytes bounds one received message; 0 uses 64 MiB.
	MaxRecvMsgBytes int
	// TLS, if set, makes every connection TLS with this configuration (its
	// certificate, if any, is the client certificate); nil is plaintext.
	// A role dialling another role passes the node's reloading
	// configuration, so new connections use the newest certificate.
	TLS *tls.Config
	// Extra dial options.
	Extra []grpc.DialOption
}

// Dial creates a client connection to target (host:port). The connection is
// lazy: it connects on the first call and reconnects by itself.
func Dial(target string, o ClientOptions) (*grpc.ClientConn, error) {
	maxRecv := o.MaxRecvMsgBytes
	if maxRecv == 0 {
		maxRecv = 64 << 20
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = TLSCredentials(o.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv), grpc.MaxCallSendMsgSize(maxRecv)),
		// Detect dead peers (a paused or partitioned node) within ~15 s even
		// on idle connections.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		experimental.WithBufferPool(sharedPool),
		grpc.WithInitialWindowSize(StreamWindow),
		grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(ReadBuffer(o.TLS != nil)),
		grpc.WithWriteBufferSize(SocketBuffer),
		grpc.WithSharedWriteBuffer(true),
	}
	if o.Telemetry != nil {
		t := o.Telemetry
		tp := t.TracerProvider
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithMeterProvider(t.meterProvider()),
			otelgrpc.WithPropagators(t.TextMapPropagator()),
		)))
	}
	opts = append(opts, o.Extra...)
	conn, err := grpc.NewClient("passthrough:///"+target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", target, err)
	}
	return conn, nil
}
