package replica

import (
	"context"
	"errors"
	"io"
	"reflect"
	"sort"
	"sync"

	"google.golang.org/grpc"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/storage"
)

// Server is the ReplicationService of a storage node: the leader side of
// follower fetch streams, appends pushed by remote replication workers, and
// replica state reports.
type Server struct {
	replicationv1.UnimplementedReplicationServiceServer
	m *Manager
	// Send is how a chunk leaves: the storage node installs a pass-through
	// sender so batches go from the page cache to the wire without a copy.
	Send func(stream grpc.ServerStream, resp *replicationv1.FollowerFetchResponse, data *storage.ReadResult) error
	// Authz authorizes the calls: each is a call between Sluice roles (see
	// authz.CheckInternal), made by the replication role, and
	// DescribeReplicas also by the controller. Nil allows every caller.
	Authz authz.Authorizer
}

// Roles that call the ReplicationService.
var (
	fetchCallers    = []string{string(role.Replication)}
	describeCallers = []string{string(role.Replication), string(role.Controller)}
)

// NewServer returns the service over m.
func NewServer(m *Manager) *Server {
	return &Server{m: m, Send: copySend}
}

// copySend copies the batches into the message (the fallback sender).
func copySend(stream grpc.ServerStream, resp *replicationv1.FollowerFetchResponse, data *storage.ReadResult) error {
	if data != nil {
		resp.Batches = data.AppendTo(nil)
		data.Release()
	}
	return stream.SendMsg(resp)
}

// chunkBytes bounds one chunk per partition.
const defaultChunkBytes = 1 << 20

// followed is the leader's view of one partition on one follower stream.
type followed struct {
	fetchOffset int64
	lastEpoch   int32
	callerEpoch int32
	// awaiting is set after a chunk or a divergence was sent: the next
	// chunk waits for the follower's new position.
	awaiting bool
	// dirty is set when the follower reported a position not yet served.
	dirty bool
	// fetches counts the follower's messages for this partition (a
	// position, or a keep-alive standing for every position it holds);
	// recorded is the count when the leader last recorded a fetch. A count
	// rather than a flag, so a message that lands while the leader records
	// the previous one is not lost.
	fetches, recorded uint64
	sentHW            int64
	sentLogStart      int64
	stopped           bool
}

// FollowerFetch serves one follower's stream (see the service comment):
// at most one chunk per partition is in flight, so the follower's next
// position acknowledges it; the high watermark and log start travel in
// position-only messages whenever they change.
//
// A message without positions is a keep-alive: the follower re-fetches
// every partition it holds at the position it last reported, as a Kafka
// follower's fetch returns empty after replica.fetch.wait.max.ms and is
// sent again. It is what keeps the followers of an idle partition caught
// up; a follower that sends nothing (paused, cut off) falls out of the ISR
// after replica.lag.time.max.ms even though its stream stays open.
func (s *Server) FollowerFetch(stream grpc.BidiStreamingServer[replicationv1.FollowerFetchRequest, replicationv1.FollowerFetchResponse]) error {
	if err := authz.CheckInternal(stream.Context(), s.Authz, "FollowerFetch", fetchCallers...); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	replica := first.GetReplicaId()
	img := s.m.cache.Load()
	if b, ok := img.Brokers[replica]; !ok || b.GetBrokerEpoch() != first.GetReplicaBrokerEpoch() {
		// KIP-903: an old incarnation of a follower must not count towards
		// the high watermark.
		return errs.New(errs.StaleBrokerEpoch, "follower %d with broker epoch %d is not the registered incarnation", replica, first.GetReplicaBrokerEpoch())
	}
	chunk := int(first.GetPartitionMaxBytes())
	if chunk <= 0 {
		chunk = defaultChunkBytes
	}

	var mu sync.Mutex
	parts := map[TP]*followed{}
	wake := make(chan struct{}, 1)
	apply := func(req *replicationv1.FollowerFetchRequest) {
		mu.Lock()
		if len(req.GetPositions()) == 0 {
			for _, f := range parts {
				// A partition with a chunk in flight is fetched again when
				// the follower acknowledges the chunk.
				if !f.awaiting && !f.stopped {
					f.fetches++
				}
			}
		}
		for _, pos := range req.GetPositions() {
			tp := TP{pos.GetTopic(), pos.GetPartition()}
			if pos.GetRemove() {
				delete(parts, tp)
				continue
			}
			f, ok := parts[tp]
			if !ok {
				f = &followed{sentHW: -1, sentLogStart: -1}
				parts[tp] = f
			}
			f.fetchOffset, f.lastEpoch, f.callerEpoch = pos.GetFetchOffset(), pos.GetLastFetchedEpoch(), pos.GetCurrentLeaderEpoch()
			f.awaiting, f.dirty, f.stopped = false, true, false
			f.fetches++
		}
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	apply(first)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			apply(req)
		}
	}()

	ctx := stream.Context()
	for {
		// Take the manager's change signal before serving, so a change
		// during the pass is not missed.
		managerChanged := s.m.Changed()
		// Serve every partition that has something to send.
		mu.Lock()
		tps := make([]TP, 0, len(parts))
		for tp := range parts {
			tps = append(tps, tp)
		}
		mu.Unlock()
		var waits []<-chan struct{}
		for _, tp := range tps {
			ch, err := s.serveOne(stream, replica, tp, &mu, parts, chunk)
			if err != nil {
				return err
			}
			if ch != nil {
				waits = append(waits, ch)
			}
		}
		// Wait for a new position, a partition change or the end.
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wake)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(recvErr)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(managerChanged)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.m.Stopping())},
		}
		for _, w := range waits {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		}
		chosen, v, _ := reflect.Select(cases)
		switch chosen {
		case 1:
			return nil
		case 4:
			return errs.New(errs.NodeNotReady, "node %d is stopping", s.m.nodeID)
		case 2:
			if err, _ := v.Interface().(error); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		}
	}
}

// serveOne sends what one partition needs and returns the channel to wait
// on before looking at it again (nil: wait for the follower instead).
func (s *Server) serveOne(stream grpc.ServerStream, replica int32, tp TP, mu *sync.Mutex, parts map[TP]*followed, chunk int) (<-chan struct{}, error) {
	mu.Lock()
	f, ok := parts[tp]
	if !ok || f.stopped {
		mu.Unlock()
		return nil, nil
	}
	st := *f
	mu.Unlock()

	p, ok := s.m.Get(tp)
	if !ok {
		return nil, s.stop(stream, tp, mu, parts, errs.New(errs.NotLeaderOrFollower, "node %d hosts no replica of %s", s.m.nodeID, tp))
	}
	changed := p.Changed()
	resp := &replicationv1.FollowerFetchResponse{Topic: tp.Topic, Partition: tp.Partition}
	if st.awaiting {
		// A chunk is in flight; still pass on a new high watermark.
		v := p.View()
		if v.HighWatermark != st.sentHW || v.LogStart != st.sentLogStart {
			resp.LeaderEpoch, resp.HighWatermark, resp.LogStartOffset, resp.BaseOffset = v.LeaderEpoch, v.HighWatermark, v.LogStart, -1
			if err := stream.SendMsg(resp); err != nil {
				return nil, err
			}
			mu.Lock()
			f.sentHW, f.sentLogStart = v.HighWatermark, v.LogStart
			mu.Unlock()
		}
		return changed, nil
	}
	// A replica a reassignment is adding waits for the node's throttle
	// before each chunk (see throttle.go); the fetch it stands for is
	// recorded when the chunk is read.
	limit := chunk
	rate := s.m.reassignmentRate(replica, tp)
	if rate > 0 {
		if d := s.m.throttle.wait(rate); d > 0 {
			if c := s.m.throttledWaits; c != nil {
				c.Add(stream.Context(), 1)
			}
			return after(d), nil
		}
		limit = throttledChunk(rate, chunk)
	}
	callerEpoch := st.callerEpoch
	data, v, div, err := p.readForFollower(replica, st.fetchOffset, st.lastEpoch, &callerEpoch, limit, st.fetches != st.recorded)
	if rate > 0 && data != nil {
		s.m.throttle.take(data.Bytes, rate)
		if c := s.m.throttledBytes; c != nil {
			c.Add(stream.Context(), int64(data.Bytes))
		}
	}
	mu.Lock()
	f.recorded = st.fetches
	mu.Unlock()
	if err != nil {
		if errs.Is(err, errs.OffsetOutOfRange) {
			// Say where the log starts now: a follower behind it (its log
			// was emptied, or DeleteRecords moved the start past it)
			// starts over there, as Kafka's fetch response carries
			// log_start_offset with OFFSET_OUT_OF_RANGE. Without it the
			// follower restarts at 0 and is refused again, forever.
			mu.Lock()
			f.stopped = true
			mu.Unlock()
			return nil, stream.SendMsg(&replicationv1.FollowerFetchResponse{Topic: tp.Topic, Partition: tp.Partition, Error: errs.ItemError(err),
				BaseOffset: -1, LeaderEpoch: v.LeaderEpoch, HighWatermark: v.HighWatermark, LogStartOffset: v.LogStart})
		}
		return nil, s.stop(stream, tp, mu, parts, err)
	}
	resp.LeaderEpoch, resp.HighWatermark, resp.LogStartOffset, resp.BaseOffset = v.LeaderEpoch, v.HighWatermark, v.LogStart, -1
	switch {
	case div != nil:
		resp.DivergingEpoch = &replicationv1.DivergingEpoch{Epoch: div.Epoch, EndOffset: div.EndOffset}
		mu.Lock()
		f.awaiting, f.dirty = true, false
		mu.Unlock()
		return nil, stream.SendMsg(resp)
	case data != nil && len(data.Chunks) > 0:
		resp.BaseOffset = st.fetchOffset
		resp.TraceContext = p.traceContextFor(st.fetchOffset, data.NextOffset)
		mu.Lock()
		f.awaiting, f.dirty, f.sentHW, f.sentLogStart = true, false, v.HighWatermark, v.LogStart
		mu.Unlock()
		return changed, s.Send(stream, resp, data)
	default:
		if data != nil {
			data.Release()
		}
		if v.HighWatermark != st.sentHW || v.LogStart != st.sentLogStart || st.dirty {
			mu.Lock()
			f.sentHW, f.sentLogStart, f.dirty = v.HighWatermark, v.LogStart, false
			mu.Unlock()
			if err := stream.SendMsg(resp); err != nil {
				return nil, err
			}
		}
		return changed, nil
	}
}

// stop tells the follower this stream no longer serves a partition.
func (s *Server) stop(stream grpc.ServerStream, tp TP, mu *sync.Mutex, parts map[TP]*followed, err error) error {
	mu.Lock()
	if f, ok := parts[tp]; ok {
		f.stopped = true
	}
	mu.Unlock()
	return stream.SendMsg(&replicationv1.FollowerFetchResponse{Topic: tp.Topic, Partition: tp.Partition, Error: errs.ItemError(err), BaseOffset: -1})
}

// ReplicaAppend applies batches pushed by a replication worker running in
// another process to a follower replica on this node.
func (s *Server) ReplicaAppend(stream grpc.BidiStreamingServer[replicationv1.ReplicaAppendRequest, replicationv1.ReplicaAppendResponse]) error {
	if err := authz.CheckInternal(stream.Context(), s.Authz, "ReplicaAppend", fetchCallers...); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		tp := TP{req.GetTopic(), req.GetPartition()}
		resp := &replicationv1.ReplicaAppendResponse{Topic: tp.Topic, Partition: tp.Partition}
		p, ok := s.m.Get(tp)
		if !ok {
			resp.Error = errs.New(errs.NotLeaderOrFollower, "node %d hosts no replica of %s", s.m.nodeID, tp).Proto()
		} else {
			err := error(nil)
			switch {
			case req.GetStartAt() >= 0:
				err = p.StartAt(req.GetStartAt())
			case req.GetTruncateTo() >= 0:
				err = p.TruncateTo(req.GetTruncateTo())
			}
			if err == nil {
				_, err = p.AppendReplicated(stream.Context(), req.GetBatches(), req.GetHighWatermark(), req.GetLogStartOffset())
			}
			resp.Error = errs.ItemError(err)
			leo, last, _, _, _ := p.FollowerState()
			resp.LogEndOffset, resp.LastEpoch = leo, last
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// DescribeReplicas reports this node's replicas.
func (s *Server) DescribeReplicas(ctx context.Context, r *replicationv1.DescribeReplicasRequest) (*replicationv1.DescribeReplicasResponse, error) {
	if err := authz.CheckInternal(ctx, s.Authz, "DescribeReplicas", describeCallers...); err != nil {
		return nil, err
	}
	want := map[TP]bool{}
	for _, tp := range r.GetPartitions() {
		want[TP{tp.GetTopic(), tp.GetPartition()}] = true
	}
	out := &replicationv1.DescribeReplicasResponse{BrokerId: s.m.nodeID}
	for _, p := range s.m.Partitions() {
		if len(want) > 0 && !want[p.tp] {
			continue
		}
		out.Replicas = append(out.Replicas, p.describe())
	}
	sort.Slice(out.Replicas, func(i, j int) bool {
		a, b := out.Replicas[i], out.Replicas[j]
		return a.GetTopic() < b.GetTopic() || a.GetTopic() == b.GetTopic() && a.GetPartition() < b.GetPartition()
	})
	return out, nil
}

func (p *Partition) describe() *replicationv1.ReplicaState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &replicationv1.ReplicaState{
		Topic: p.tp.Topic, Partition: p.tp.Partition, LeaderEpoch: p.leaderEpoch,
		LogStartOffset: p.log.LogStartOffset(), LogEndOffset: p.log.LogEndOffset(), HighWatermark: p.hw,
		SizeBytes: p.log.Size(), Role: replicationv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, LastLogEpoch: -1,
	}
	if e, ok := p.log.LatestEpoch(); ok {
		st.LastLogEpoch = e
	}
	switch {
	case p.log.Err() != nil:
		st.Role = replicationv1.ReplicaRole_REPLICA_ROLE_OFFLINE
	case p.isLeader:
		st.Role = replicationv1.ReplicaRole_REPLICA_ROLE_LEADER
		st.Isr = p.isr
		st.FollowerOffsets = map[int32]int64{}
		for id, f := range p.followers {
			st.FollowerOffsets[id] = f.leo
		}
	}
	return st
}
