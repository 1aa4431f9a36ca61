package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	client "github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
)

// Log is where a coordinator shard's partition of its internal topic
// lives: in this process, when it leads the partition (LocalLog), or on a
// remote leader, when this process is a coordinator of its own (RemoteLog).
type Log interface {
	// Open waits until every write of an earlier coordinator is committed
	// and fenced, and returns the offsets to replay, [start, end).
	Open(ctx context.Context) (start, end int64, err error)
	// Replay calls apply for every record in [start, end), in order,
	// passing over control batches (transaction markers).
	Replay(ctx context.Context, start, end int64, apply func(key, value []byte, offset int64)) error
	// ReplayAll calls apply for every record in [start, end), in order,
	// with what its batch says of it: the records of transactional batches
	// and of control batches too, for a coordinator that keeps state of
	// transactions (offsets committed in a transaction). r is valid only
	// during the call.
	ReplayAll(ctx context.Context, start, end int64, apply func(r *LogRecord)) error
	// Append appends one batch. It is called in log order (under the
	// shard's lock) and returns a function that waits for the acks=all
	// acknowledgement and returns the batch's first offset.
	Append(batch []byte) func(ctx context.Context) (int64, error)
	// Close stops background work.
	Close()
}

// Env is what a coordinator role gives the shared machinery: who this
// process is and how it reaches the cluster.
type Env struct {
	NodeID   int32
	Metadata *metadata.Cache
	Pool     *wire.Pool
	Logger   *slog.Logger
	// Client returns the process's SDK client (for remote replay).
	Client func() *client.Client
}

// localLog is a partition this process leads, written in-process in the
// leader epoch the shard loaded in: the local replica refuses an append in
// any other epoch, and a deposed leader's acks=all append never completes.
type localLog struct {
	topic string
	p     *replica.Partition
	epoch int32
}

// NewLocalLog returns the Log of a partition of topic this process leads
// in leader epoch epoch.
func NewLocalLog(topic string, p *replica.Partition, epoch int32) Log {
	return &localLog{topic: topic, p: p, epoch: epoch}
}

func (l *localLog) Open(ctx context.Context) (int64, int64, error) {
	// The coordinator lock orders this against a remote coordinator's
	// checked appends (storage node FenceCoordinator): any it let through
	// is below the end taken here.
	l.p.LockCoordinator()
	v := l.p.View()
	l.p.UnlockCoordinator()
	target := v.LogEnd
	// Wait for the high watermark to cover the log end: records above it
	// were written by the previous leader and are not known to be
	// acknowledged until then.
	for {
		v = l.p.View()
		if !v.IsLeader || v.LeaderEpoch != l.epoch {
			return 0, 0, errors.New("leadership moved while loading")
		}
		if v.HighWatermark >= target {
			return v.LogStart, target, nil
		}
		ch := l.p.Changed()
		if l.p.View().HighWatermark >= target {
			continue
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

func (l *localLog) Replay(ctx context.Context, start, end int64, apply func(key, value []byte, offset int64)) error {
	return l.ReplayAll(ctx, start, end, dataOnly(apply))
}

func (l *localLog) ReplayAll(ctx context.Context, start, end int64, apply func(r *LogRecord)) error {
	var it record.Iterator
	offset := start
	epoch := l.epoch
	for offset < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, _, _, err := l.p.ReadForConsumer(offset, 1<<20, &epoch, nil)
		if err != nil {
			return fmt.Errorf("reading %s-%d at %d: %w", l.topic, l.p.TP().Partition, offset, err)
		}
		buf := res.AppendTo(nil)
		next := res.NextOffset
		res.Release()
		if next <= offset {
			return fmt.Errorf("reading %s-%d at %d: no progress before %d", l.topic, l.p.TP().Partition, offset, end)
		}
		if err := replayBatches(&it, buf, offset, end, apply); err != nil {
			return fmt.Errorf("decoding %s-%d at %d: %w", l.topic, l.p.TP().Partition, offset, err)
		}
		offset = next
	}
	return nil
}

func (l *localLog) Append(batch []byte) func(context.Context) (int64, error) {
	epoch := l.epoch
	res, appendedIn, err := l.p.Append(batch, replica.AcksAll, &epoch, record.FromCoordinator)
	return func(ctx context.Context) (int64, error) {
		if err != nil {
			return 0, err
		}
		if err := l.p.AwaitAck(ctx, res, appendedIn, replica.AcksAll); err != nil {
			return 0, err
		}
		return res.FirstOffset, nil
	}
}

func (l *localLog) Close() {}

// remoteLog is a partition led by another process, written through its
// leader's Produce with a coordinator fence: the leader accepts the write
// only while metadata (at least as new as revision) names this node the
// partition's coordinator. Writes go out one at a time, in order, so the log
// order is the order the shard validated them in, and a retried write lands
// before the next one.
type remoteLog struct {
	env       Env
	topic     string
	role      string
	partition int32
	fence     *storagev1.CoordinatorFence

	queue chan remoteWrite
	stop  chan struct{}
	wg    sync.WaitGroup
}

type remoteWrite struct {
	batch []byte
	done  chan remoteResult
}

type remoteResult struct {
	base int64
	err  error
}

// NewRemoteLog returns the Log of a partition of topic that another process
// leads, for the coordinator (running role) that metadata at revision
// named this process.
func NewRemoteLog(env Env, topic, role string, partition int32, revision int64) Log {
	l := &remoteLog{env: env, topic: topic, role: role, partition: partition, queue: make(chan remoteWrite, 1024), stop: make(chan struct{}),
		fence: &storagev1.CoordinatorFence{NodeId: env.NodeID, MetadataRevision: revision}}
	l.wg.Add(1)
	go l.writer()
	return l
}

func (l *remoteLog) leader() (storagev1.StorageServiceClient, error) {
	img := l.env.Metadata.Load()
	ps, ok := img.Partition(l.topic, l.partition)
	if !ok || ps.GetLeaderId() < 0 {
		return nil, errs.New(errs.LeaderNotAvailable, "%s-%d has no leader", l.topic, l.partition)
	}
	conn, err := l.env.Pool.Get(img.Address(ps.GetLeaderId()))
	if err != nil {
		return nil, err
	}
	return storagev1.NewStorageServiceClient(conn), nil
}

// retry runs fn until it succeeds, fails with a non-retriable error, or
// ctx or the log ends.
func (l *remoteLog) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	backoff := 50 * time.Millisecond
	for {
		// NOT_COORDINATOR is final: metadata no longer names this node, or
		// a later coordinator fenced the partition.
		err := fn(ctx)
		if err == nil || !errs.IsRetriable(err) || !l.stillOurs() {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-l.stop:
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// stillOurs reports whether metadata still names this node the
// partition's (remote) coordinator.
func (l *remoteLog) stillOurs() bool {
	b, atLeader := l.env.Metadata.Load().CoordinatorOf(l.topic, l.partition, l.role)
	return b != nil && !atLeader && b.GetId() == l.fence.GetNodeId()
}

func (l *remoteLog) Open(ctx context.Context) (int64, int64, error) {
	var resp *storagev1.FenceCoordinatorResponse
	err := l.retry(ctx, func(ctx context.Context) error {
		sc, err := l.leader()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err = sc.FenceCoordinator(cctx, &storagev1.FenceCoordinatorRequest{Topic: l.topic, Partition: l.partition, Coordinator: l.fence})
		return asErr(err)
	})
	if err != nil {
		return 0, 0, err
	}
	return resp.GetLogStartOffset(), resp.GetLogEndOffset(), nil
}

func (l *remoteLog) Replay(ctx context.Context, start, end int64, apply func(key, value []byte, offset int64)) error {
	if start >= end {
		return nil
	}
	cons := l.env.Client().NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer cons.Close()
	tp := client.TopicPartition{Topic: l.topic, Partition: l.partition}
	cons.Assign(tp)
	cons.Seek(tp, start)
	for cons.Position(tp) < end {
		recs, err := cons.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			l.env.Logger.Debug("coordinator replay fetch failed; retrying", log.TopicPartition(l.topic, l.partition), log.Err(err))
			continue
		}
		for _, r := range recs {
			if r.Offset < end {
				apply(r.Key, r.Value, r.Offset)
			}
		}
	}
	return nil
}

func (l *remoteLog) Append(batch []byte) func(context.Context) (int64, error) {
	w := remoteWrite{batch: batch, done: make(chan remoteResult, 1)}
	select {
	case l.queue <- w:
	default:
		w.done <- remoteResult{err: errs.New(errs.CoordinatorNotAvailable, "the coordinator's write queue to %s-%d is full", l.topic, l.partition)}
	}
	return func(ctx context.Context) (int64, error) {
		select {
		case r := <-w.done:
			return r.base, r.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (l *remoteLog) writer() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case w := <-l.queue:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var base int64
			err := l.retry(ctx, func(ctx context.Context) error {
				sc, err := l.leader()
				if err != nil {
					return err
				}
				resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 10000, Coordinator: l.fence,
					Partitions: []*storagev1.ProducePartition{{Topic: l.topic, Partition: l.partition, Data: &storagev1.ProducePartition_Batches{Batches: w.batch}}}})
				if err != nil {
					return asErr(err)
				}
				res := resp.GetResults()[0]
				if res.GetError() != nil {
					return errs.FromProto(res.GetError())
				}
				base = res.GetBaseOffset()
				return nil
			})
			cancel()
			w.done <- remoteResult{base: base, err: err}
		}
	}
}

func (l *remoteLog) Close() {
	close(l.stop)
	l.wg.Wait()
}

// asErr converts an error from a call into the catalog's (nil stays nil, as
// an untyped nil: errs.From returns a typed nil pointer).
func asErr(err error) error {
	if err == nil {
		return nil
	}
	return errs.From(err)
}
