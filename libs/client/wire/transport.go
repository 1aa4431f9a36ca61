package wire

// HTTP/2 transport sizes of every Sluice server and client. grpc-go's
// defaults (64 KiB windows grown by bandwidth-delay estimation, 32 KiB
// socket buffers) suit small RPCs; a produce or fetch stream moves 1 MiB
// messages back to back, and make bench measures the transport's ceiling
// with these same sizes.
const (
	// StreamWindow is the flow-control window of one stream: four 1 MiB
	// requests or chunks in flight.
	StreamWindow = 4 << 20
	// ConnWindow is the window of a connection, shared by its streams.
	ConnWindow = 16 << 20
	// SocketBuffer is the size of the buffered reader and writer on each
	// connection: one read or write system call moves up to this much.
	SocketBuffer = 256 << 10
)

// ReadBuffer is the size of grpc-go's buffered reader on a connection
// (grpc.ReadBufferSize, grpc.WithReadBufferSize): SocketBuffer in
// plaintext, none over TLS. A TLS connection made by TLSCredentials
// already reads the socket through a SocketBuffer reader, and crypto/tls
// decrypts whole records into a buffer of its own; a third buffer above it
// would only copy every received byte once more (about 0.1 s of a server's
// CPU per GB produced). Without it HTTP/2 frames are read straight out of
// the decrypted record.
func ReadBuffer(tls bool) int {
	if tls {
		return 0
	}
	return SocketBuffer
}
