package replication

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/service"
)

// silentLeader is a leader with nothing to send: it records what the
// follower's stream carries.
type silentLeader struct {
	replicationv1.UnimplementedReplicationServiceServer
	mu         sync.Mutex
	positions  int // messages with positions
	keepAlives int // messages without
}

func (l *silentLeader) FollowerFetch(stream grpc.BidiStreamingServer[replicationv1.FollowerFetchRequest, replicationv1.FollowerFetchResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // the follower went away
		}
		l.mu.Lock()
		if len(req.GetPositions()) > 0 {
			l.positions++
		} else {
			l.keepAlives++
		}
		l.mu.Unlock()
	}
}

func (l *silentLeader) counts() (positions, keepAlives int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.positions, l.keepAlives
}

// idleTarget is a follower replica with nothing to fetch.
type idleTarget struct{}

func (idleTarget) TP() replica.TP                                    { return replica.TP{Topic: "t", Partition: 0} }
func (idleTarget) position() (int64, int32, int32)                   { return 5, 1, 1 }
func (idleTarget) apply(context.Context, []byte, int64, int64) error { return nil }
func (idleTarget) truncate(context.Context, int64) error             { return nil }
func (idleTarget) startAt(context.Context, int64) error              { return nil }

// A follower whose partition receives nothing still fetches every
// replica.fetch.wait.max: its leader only knows it is alive and caught up
// from what the follower sends, and would otherwise drop it from the ISR
// after replica.lag.time.max.ms on every idle partition.
func TestIdleFollowerKeepsFetching(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	leader := &silentLeader{}
	srv := grpc.NewServer()
	replicationv1.RegisterReplicationServiceServer(srv, leader)
	go func() { _ = srv.Serve(lis) }() // ends with Stop
	defer srv.Stop()

	addr := lis.Addr().(*net.TCPAddr)
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{Revision: 1, ControllerId: -1,
		Brokers: []*commonv1.Broker{{Id: 1, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "127.0.0.1", Port: int32(addr.Port)}}}}}))
	pool := wire.NewPool(wire.ClientOptions{})
	defer func() { _ = pool.Close() }()

	r := New(Config{ChunkBytes: 1 << 20, FetchWaitMax: 20 * time.Millisecond, Shards: 1},
		service.Deps{Logger: log.Discard(), Metadata: cache, Pool: pool})
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetcher{r: r, key: fetchKey{leader: 1, follower: 2}, cancel: cancel, update: make(chan struct{}, 1)}
	f.setTargets([]target{idleTarget{}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx)
	}()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool {
		_, keepAlives := leader.counts()
		return keepAlives >= 3
	}, 10*time.Second, 5*time.Millisecond, "an idle follower must keep fetching")
	positions, _ := leader.counts()
	require.Equal(t, 1, positions, "the position is announced once; keep-alives stand for it")
}
