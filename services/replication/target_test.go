package replication

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/service"
)

// mutePeer takes replica appends and never answers them, as a paused or
// cut-off storage node does.
type mutePeer struct {
	replicationv1.UnimplementedReplicationServiceServer
}

func (mutePeer) ReplicaAppend(stream grpc.BidiStreamingServer[replicationv1.ReplicaAppendRequest, replicationv1.ReplicaAppendResponse]) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// A replica append whose context ends before the answer fails with the
// context's error and leaves the node ready for the next call. The
// goroutine waiting for the answer used to read the node's stream after
// the failure had cleared it, which crashed a replication worker under
// the fault matrix (a nil dereference in remoteNode.call).
func TestRemoteNodeCallAbandonedByItsContext(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	replicationv1.RegisterReplicationServiceServer(srv, mutePeer{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	pool := wire.NewPool(wire.ClientOptions{})
	defer pool.Close()
	r := New(Config{}, service.Deps{Logger: log.Discard(), Pool: pool})
	n := &remoteNode{id: 2, addr: lis.Addr().String(), r: r}
	defer n.close()

	for range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := n.call(ctx, &replicationv1.ReplicaAppendRequest{})
		require.ErrorIs(t, err, context.Canceled)
	}
}
