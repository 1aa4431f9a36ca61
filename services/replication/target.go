package replication

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/replica"
)

// target is a follower replica a fetcher keeps in sync: one of this
// process's replicas (local), or one on another storage node reached
// through ReplicaAppend (remote, when replication runs as its own process).
type target interface {
	TP() replica.TP
	// position is what the follower reports: its log end offset, the epoch
	// of its last batch (-1 if empty) and the leader epoch it knows.
	position() (leo int64, lastEpoch, leaderEpoch int32)
	// apply appends fetched batches (none for a high-watermark update).
	apply(ctx context.Context, batches []byte, hw, logStart int64) error
	truncate(ctx context.Context, offset int64) error
	startAt(ctx context.Context, offset int64) error
}

// local is a replica of this process.
type local struct{ p *replica.Partition }

func (l local) TP() replica.TP { return l.p.TP() }

func (l local) position() (int64, int32, int32) {
	leo, last, leaderEpoch, _, _ := l.p.FollowerState()
	return leo, last, leaderEpoch
}

func (l local) apply(ctx context.Context, batches []byte, hw, logStart int64) error {
	_, err := l.p.AppendReplicated(ctx, batches, hw, logStart)
	return err
}

func (l local) truncate(_ context.Context, offset int64) error { return l.p.TruncateTo(offset) }

func (l local) startAt(_ context.Context, offset int64) error { return l.p.StartAt(offset) }

// remote is a replica on another storage node.
type remote struct {
	node        *remoteNode
	tp          replica.TP
	leaderEpoch int32

	mu        sync.Mutex
	leo       int64
	lastEpoch int32
}

func (r *remote) TP() replica.TP { return r.tp }

func (r *remote) position() (int64, int32, int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leo, r.lastEpoch, r.leaderEpoch
}

func (r *remote) send(ctx context.Context, req *replicationv1.ReplicaAppendRequest) error {
	req.Topic, req.Partition, req.LeaderEpoch = r.tp.Topic, r.tp.Partition, r.leaderEpoch
	resp, err := r.node.call(ctx, req)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.leo, r.lastEpoch = resp.GetLogEndOffset(), resp.GetLastEpoch()
	r.mu.Unlock()
	if e := errs.FromProto(resp.GetError()); e != nil {
		return e
	}
	return nil
}

func (r *remote) apply(ctx context.Context, batches []byte, hw, logStart int64) error {
	return r.send(ctx, &replicationv1.ReplicaAppendRequest{Batches: batches, HighWatermark: hw, LogStartOffset: logStart, TruncateTo: -1, StartAt: -1})
}

func (r *remote) truncate(ctx context.Context, offset int64) error {
	return r.send(ctx, &replicationv1.ReplicaAppendRequest{TruncateTo: offset, StartAt: -1})
}

func (r *remote) startAt(ctx context.Context, offset int64) error {
	return r.send(ctx, &replicationv1.ReplicaAppendRequest{TruncateTo: -1, StartAt: offset})
}

// remoteNode is the ReplicaAppend stream to one follower node; calls on it
// are serialised (the stream answers in order).
type remoteNode struct {
	id   int32
	addr string
	r    *Replication

	mu     sync.Mutex
	stream grpc.BidiStreamingClient[replicationv1.ReplicaAppendRequest, replicationv1.ReplicaAppendResponse]
	cancel context.CancelFunc
}

func (n *remoteNode) call(ctx context.Context, req *replicationv1.ReplicaAppendRequest) (*replicationv1.ReplicaAppendResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stream == nil {
		conn, err := n.r.deps.Pool.Get(n.addr)
		if err != nil {
			return nil, err
		}
		sctx, cancel := context.WithCancel(context.Background())
		stream, err := replicationv1.NewReplicationServiceClient(conn).ReplicaAppend(sctx)
		if err != nil {
			cancel()
			return nil, err
		}
		n.stream, n.cancel = stream, cancel
	}
	fail := func(err error) (*replicationv1.ReplicaAppendResponse, error) {
		n.cancel()
		n.stream, n.cancel = nil, nil
		return nil, fmt.Errorf("replica append to node %d: %w", n.id, err)
	}
	if err := n.stream.Send(req); err != nil {
		return fail(err)
	}
	type result struct {
		resp *replicationv1.ReplicaAppendResponse
		err  error
	}
	ch := make(chan result, 1)
	// The receiver holds its own stream: when ctx ends first, fail clears
	// n.stream, possibly before this goroutine has started.
	stream := n.stream
	go func() {
		resp, err := stream.Recv()
		ch <- result{resp, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			return fail(res.err)
		}
		return res.resp, nil
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

func (n *remoteNode) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cancel != nil {
		n.cancel()
		n.stream, n.cancel = nil, nil
	}
}

// describe reads the follower node's replica positions.
func (n *remoteNode) describe(ctx context.Context) (map[replica.TP]*replicationv1.ReplicaState, error) {
	conn, err := n.r.deps.Pool.Get(n.addr)
	if err != nil {
		return nil, err
	}
	resp, err := replicationv1.NewReplicationServiceClient(conn).DescribeReplicas(ctx, &replicationv1.DescribeReplicasRequest{})
	if err != nil {
		return nil, err
	}
	out := map[replica.TP]*replicationv1.ReplicaState{}
	for _, s := range resp.GetReplicas() {
		out[replica.TP{Topic: s.GetTopic(), Partition: s.GetPartition()}] = s
	}
	return out, nil
}
