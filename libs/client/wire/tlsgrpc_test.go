package wire_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/libs/client/wire"
)

// echoDesc is a bidirectional stream that sends back every message it
// receives.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Echo", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			for {
				m := new(wrapperspb.BytesValue)
				if err := ss.RecvMsg(m); err != nil {
					return nil // the client closed its side
				}
				if err := ss.SendMsg(m); err != nil {
					return err
				}
			}
		}}},
}

// Over TLS grpc-go reads HTTP/2 frames without a buffered reader of its own
// (wire.ReadBuffer), straight from the TLS connection: messages of several
// MiB, each spanning hundreds of TLS records and frames, cross a stream
// intact both ways, with the transport sizes every Sluice server and
// client uses.
func TestGRPCOverTLSWithoutReadBufferCarriesLargeMessages(t *testing.T) {
	require.Zero(t, wire.ReadBuffer(true))
	require.Equal(t, wire.SocketBuffer, wire.ReadBuffer(false))
	serverCfg, clientCfg := selfSigned(t)
	srv := grpc.NewServer(grpc.Creds(wire.TLSCredentials(serverCfg)), grpc.MaxRecvMsgSize(16<<20),
		grpc.InitialWindowSize(wire.StreamWindow), grpc.InitialConnWindowSize(wire.ConnWindow),
		grpc.ReadBufferSize(wire.ReadBuffer(true)), grpc.WriteBufferSize(wire.SocketBuffer))
	srv.RegisterService(&echoDesc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		require.NoError(t, <-served)
	}()

	conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{TLS: clientCfg})
	require.NoError(t, err)
	defer conn.Close()
	st, err := conn.NewStream(context.Background(), &echoDesc.Streams[0], "/sluice.test.Echo/Echo")
	require.NoError(t, err)
	// The sizes straddle records and frames unevenly.
	sent := make([][]byte, 6)
	for i := range sent {
		sent[i] = make([]byte, (3<<20)+i*4099)
		_, err := rand.Read(sent[i])
		require.NoError(t, err)
	}
	go func() {
		for i := range sent {
			if err := st.SendMsg(wrapperspb.Bytes(sent[i])); err != nil {
				return // RecvMsg below reports the stream's error
			}
		}
		_ = st.CloseSend() // the stream's error, if any, comes from RecvMsg
	}()
	for i := range sent {
		got := new(wrapperspb.BytesValue)
		require.NoError(t, st.RecvMsg(got), "message %d", i)
		require.True(t, bytes.Equal(sent[i], got.GetValue()), "message %d came back different", i)
	}
}

// BenchmarkGRPCOverTLS echoes 1 MiB messages over one TLS stream with
// grpc-go's read buffer off (as Sluice configures TLS connections) and on
// (SocketBuffer, as in plaintext), for comparing the CPU per byte received.
func BenchmarkGRPCOverTLS(b *testing.B) {
	for _, rb := range []int{wire.ReadBuffer(true), wire.SocketBuffer} {
		b.Run(fmt.Sprintf("read-buffer=%d", rb), func(b *testing.B) {
			serverCfg, clientCfg := selfSigned(b)
			srv := grpc.NewServer(grpc.Creds(wire.TLSCredentials(serverCfg)), grpc.MaxRecvMsgSize(16<<20),
				grpc.InitialWindowSize(wire.StreamWindow), grpc.InitialConnWindowSize(wire.ConnWindow),
				grpc.ReadBufferSize(rb), grpc.WriteBufferSize(wire.SocketBuffer))
			srv.RegisterService(&echoDesc, nil)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			go func() { _ = srv.Serve(lis) }() // Stop ends it
			defer srv.Stop()
			conn, err := wire.Dial(lis.Addr().String(), wire.ClientOptions{TLS: clientCfg,
				Extra: []grpc.DialOption{grpc.WithReadBufferSize(rb)}})
			require.NoError(b, err)
			defer conn.Close()
			st, err := conn.NewStream(context.Background(), &echoDesc.Streams[0], "/sluice.test.Echo/Echo")
			require.NoError(b, err)
			msg := wrapperspb.Bytes(make([]byte, 1<<20))
			b.SetBytes(2 << 20) // received once by each side
			b.ResetTimer()
			go func() {
				for range b.N {
					if st.SendMsg(msg) != nil {
						return
					}
				}
			}()
			for range b.N {
				require.NoError(b, st.RecvMsg(new(wrapperspb.BytesValue)))
			}
			b.StopTimer()
			_ = st.CloseSend() // the benchmark is over
		})
	}
}
