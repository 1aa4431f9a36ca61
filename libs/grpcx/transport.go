package grpcx

// HTTP/2 transport sizes of every Sluice server and client. grpc-go's
// defaults (64 KiB windows grown by bandwidth-delay estimation, 32 KiB
// socket buffers) suit small RPCs; a produce or fetch stream moves 1 MiB
// messages back to back, and make bench measures the transport's ceiling
// with these same sizes.
const (
	// streamWindow is the flow-control window of one stream: four 1 MiB
	// requests or chunks in flight.
	streamWindow = 4 << 20
	// connWindow is the window of a connection, shared by its streams.
	connWindow = 16 << 20
	// socketBuffer is the size of the buffered reader and writer on each
	// connection: one read or write system call moves up to this much.
	socketBuffer = 256 << 10
)
