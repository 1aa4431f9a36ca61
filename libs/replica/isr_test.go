package replica

import (
	"context"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
)

// These tests run the leader of an RF=3 partition (node 1; followers 2 and
// 3) with its real follower-fetch service and a controller that applies
// ISR changes, on a simulated clock: minutes of lag decisions take
// milliseconds. The followers are driven by the test, message by message,
// as the replication role drives them.

const (
	isrLag           = 30 * time.Second
	isrFetchWait     = 500 * time.Millisecond // a follower's keep-alive interval
	isrBrokerEpoch   = int64(7)
	isrLeaderEpoch   = int32(3)
	isrStartingEpoch = int32(13)
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// isrController is the controller as far as ISR changes go: it applies an
// AlterPartition compared on the partition epoch and publishes the result.
type isrController struct {
	controllerv1.UnimplementedControllerServiceServer
	cache *metadata.Cache
	addr  string

	mu       sync.Mutex
	isr      []int32
	epoch    int32
	rev      int64
	changes  int
	ISRsSeen [][]int32
}

func (c *isrController) snapshotLocked() *controllerv1.MetadataSnapshot {
	c.rev++
	var brokers []*commonv1.Broker
	for _, id := range []int32{2, 3} {
		brokers = append(brokers, &commonv1.Broker{Id: id, BrokerEpoch: isrBrokerEpoch, State: commonv1.BrokerState_BROKER_STATE_ALIVE})
	}
	return &controllerv1.MetadataSnapshot{
		Revision: c.rev, ControllerId: 100, Brokers: brokers,
		Controllers: []*controllerv1.ControllerMember{{NodeId: 100, Address: c.addr, Active: true}},
		Topics: []*controllerv1.TopicMetadata{{Name: "t", TopicId: "id",
			Configs:    map[string]string{"min.insync.replicas": "2", "sluice.fsync.before.ack": "false"},
			Partitions: []*commonv1.PartitionState{c.stateLocked()}}},
	}
}

func (c *isrController) stateLocked() *commonv1.PartitionState {
	return &commonv1.PartitionState{Topic: "t", LeaderId: 1, LeaderEpoch: isrLeaderEpoch, PartitionEpoch: c.epoch,
		Replicas: []int32{1, 2, 3}, Isr: slices.Clone(c.isr)}
}

func (c *isrController) AlterPartition(_ context.Context, req *controllerv1.AlterPartitionRequest) (*controllerv1.AlterPartitionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := req.GetChanges()[0]
	if ch.GetPartitionEpoch() == c.epoch && ch.GetLeaderEpoch() == isrLeaderEpoch {
		c.isr, c.epoch = slices.Clone(ch.GetNewIsr()), c.epoch+1
		c.changes++
		c.ISRsSeen = append(c.ISRsSeen, slices.Clone(c.isr))
		c.cache.Reset(metadata.FromSnapshot(c.snapshotLocked()))
	}
	return &controllerv1.AlterPartitionResponse{Results: []*controllerv1.AlterPartitionResult{{Topic: "t", State: c.stateLocked()}}}, nil
}

// state returns the committed ISR, partition epoch and number of changes.
func (c *isrController) state() ([]int32, int32, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.isr), c.epoch, c.changes
}

// memStream is the leader's end of one follower's FollowerFetch stream.
type memStream struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *replicationv1.FollowerFetchRequest
	out chan *replicationv1.FollowerFetchResponse
}

func (s *memStream) Context() context.Context { return s.ctx }

func (s *memStream) Recv() (*replicationv1.FollowerFetchRequest, error) {
	select {
	case r := <-s.in:
		return r, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

func (s *memStream) Send(r *replicationv1.FollowerFetchResponse) error { return s.SendMsg(r) }

func (s *memStream) SendMsg(m any) error {
	select {
	case s.out <- m.(*replicationv1.FollowerFetchResponse):
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// testFollower plays a follower node: it reports positions, sends
// keep-alives and takes in chunks (keeping only their end offset).
type testFollower struct {
	t   *testing.T
	id  int32
	s   *memStream
	pos int64
}

func (f *testFollower) send(positions ...*replicationv1.FollowerPosition) {
	f.s.in <- &replicationv1.FollowerFetchRequest{ReplicaId: f.id, ReplicaBrokerEpoch: isrBrokerEpoch, Positions: positions}
}

// report sends the follower's position, as after an append.
func (f *testFollower) report() {
	last := int32(-1)
	if f.pos > 0 {
		last = isrLeaderEpoch
	}
	f.send(&replicationv1.FollowerPosition{Topic: "t", Partition: 0, FetchOffset: f.pos, LastFetchedEpoch: last, CurrentLeaderEpoch: isrLeaderEpoch})
}

// keepAlive is what an idle follower sends every replica.fetch.wait.max.
func (f *testFollower) keepAlive() { f.send() }

// takeChunk waits for the next chunk with data and appends it.
func (f *testFollower) takeChunk() {
	f.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-f.s.out:
			if len(r.GetBatches()) == 0 {
				continue // a high-watermark update
			}
			require.Equal(f.t, f.pos, r.GetBaseOffset(), "follower %d", f.id)
			for b := r.GetBatches(); len(b) > 0; {
				h, ok := record.ParseBatchHeader(b)
				require.True(f.t, ok)
				f.pos = h.NextOffset()
				b = b[h.Size():]
			}
			return
		case <-deadline:
			f.t.Fatalf("follower %d: no chunk from the leader", f.id)
		}
	}
}

type isrRig struct {
	t         *testing.T
	clk       *fakeClock
	ctl       *isrController
	p         *Partition
	followers map[int32]*testFollower
}

func newISRRig(t *testing.T) *isrRig {
	t.Helper()
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cache := metadata.NewCache()
	ctl := &isrController{cache: cache, addr: lis.Addr().String(), isr: []int32{1, 2, 3}, epoch: isrStartingEpoch}
	srv := grpc.NewServer()
	controllerv1.RegisterControllerServiceServer(srv, ctl)
	go func() { _ = srv.Serve(lis) }() // ends with Stop
	t.Cleanup(srv.Stop)
	ctl.mu.Lock()
	cache.Reset(metadata.FromSnapshot(ctl.snapshotLocked()))
	ctl.mu.Unlock()

	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	m := NewManager(Config{Dir: t.TempDir(), LagTimeMax: isrLag, Now: clk.Now}, 1, cache, nil, pool, log.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	p, ok := m.Get(TP{"t", 0})
	require.True(t, ok)
	require.True(t, p.View().IsLeader)

	r := &isrRig{t: t, clk: clk, ctl: ctl, p: p, followers: map[int32]*testFollower{}}
	srvSide := NewServer(m)
	for _, id := range []int32{2, 3} {
		sctx, stop := context.WithCancel(context.Background())
		s := &memStream{ctx: sctx, in: make(chan *replicationv1.FollowerFetchRequest, 16), out: make(chan *replicationv1.FollowerFetchResponse, 1024)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srvSide.FollowerFetch(s) // ends when the test stops the stream
		}()
		t.Cleanup(func() { stop(); <-done })
		f := &testFollower{t: t, id: id, s: s}
		r.followers[id] = f
		f.report()
		r.awaitFetch(id)
	}
	return r
}

// awaitFetch waits until the leader has recorded a fetch by follower id at
// the current simulated time.
func (r *isrRig) awaitFetch(id int32) {
	r.t.Helper()
	now := r.clk.Now()
	recorded := func() bool {
		r.p.mu.Lock()
		defer r.p.mu.Unlock()
		f := r.p.followers[id]
		return f != nil && f.lastFetch.Equal(now)
	}
	// A tight poll: this runs thousands of times per test.
	for deadline := time.Now().Add(5 * time.Second); !recorded(); {
		if time.Now().After(deadline) {
			r.t.Fatalf("leader did not record follower %d's fetch at %v", id, now)
		}
		runtime.Gosched()
	}
}

// tick moves the clock by one keep-alive interval; the live followers send
// their keep-alive and the leader runs its lag check.
func (r *isrRig) tick(live ...int32) {
	r.clk.Advance(isrFetchWait)
	for _, id := range live {
		r.followers[id].keepAlive()
		r.awaitFetch(id)
	}
	r.p.periodic(context.Background())
}

// produceAll appends one record with acks=all and lets the followers in
// live fetch it.
func (r *isrRig) produceAll(live ...int32) {
	r.t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.p.Produce(context.Background(), batchOf(r.t, 1), AcksAll, nil, record.FromClient)
		done <- err
	}()
	for _, id := range live {
		f := r.followers[id]
		f.takeChunk()
		f.report()
		r.awaitFetch(id)
	}
	select {
	case err := <-done:
		require.NoError(r.t, err)
	case <-time.After(5 * time.Second):
		r.t.Fatal("acks=all produce did not complete")
	}
}

// settle waits for the proposal in flight, if any, to be answered.
func (r *isrRig) settle() {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		r.p.mu.Lock()
		defer r.p.mu.Unlock()
		return r.p.pendingISR == nil
	}, 5*time.Second, 100*time.Microsecond)
}

func (r *isrRig) requireISR(want []int32, changes int) {
	r.t.Helper()
	r.settle()
	isr, epoch, n := r.ctl.state()
	require.Equal(r.t, want, isr, "ISR after %d changes: %v", n, r.ctl.ISRsSeen)
	require.Equal(r.t, changes, n, "ISR changes: %v", r.ctl.ISRsSeen)
	require.Equal(r.t, isrStartingEpoch+int32(changes), epoch)
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	require.Equal(r.t, want, r.p.isr, "the leader's ISR")
}

// An idle RF=3 partition for 5 minutes, then 5 minutes with one record
// every 40 s (more than replica.lag.time.max.ms apart): followers that keep
// fetching at the log end stay in sync, so neither the ISR nor the
// partition epoch changes.
func TestISRStableOnIdleAndTricklePartition(t *testing.T) {
	r := newISRRig(t)
	for range int(5 * time.Minute / isrFetchWait) {
		r.tick(2, 3)
	}
	r.requireISR([]int32{1, 2, 3}, 0)

	produced := int64(0)
	for i := range int(5 * time.Minute / isrFetchWait) {
		if i%int(40*time.Second/isrFetchWait) == 0 {
			r.produceAll(2, 3)
			produced++
		}
		r.tick(2, 3)
	}
	r.requireISR([]int32{1, 2, 3}, 0)
	require.Equal(t, produced, r.p.View().HighWatermark)
}

// A follower that stops fetching (paused: its stream stays open but it
// sends nothing) leaves the ISR after replica.lag.time.max.ms, and stays
// out, even when the partition is idle and the leader's own wake-ups pass
// over its stream; once it fetches again it rejoins.
func TestPausedFollowerLeavesISRAndStaysOut(t *testing.T) {
	r := newISRRig(t)
	for range int(isrLag/isrFetchWait) - 1 {
		r.tick(2, 3)
	}
	for range int(isrLag/isrFetchWait) + 1 {
		r.tick(2) // follower 3 is paused
	}
	r.requireISR([]int32{1, 2}, 1)

	// Paused for another two lag times, idle and then with a record.
	for range int(2 * isrLag / isrFetchWait) {
		r.tick(2)
	}
	r.produceAll(2)
	r.tick(2)
	r.requireISR([]int32{1, 2}, 1)

	// Resumed: it fetches what it missed and rejoins.
	f3 := r.followers[3]
	f3.takeChunk()
	f3.report()
	r.awaitFetch(3)
	r.tick(2, 3)
	r.requireISR([]int32{1, 2, 3}, 2)
}

// A follower that is never at the log end when it fetches, because records
// keep arriving, but always fetches up to where the log ended at its
// previous fetch, is keeping up: it stays in sync (Kafka's
// lastFetchLeaderLogEndOffset rule).
func TestFollowerTrailingASteadyStreamStaysInSync(t *testing.T) {
	r := newISRRig(t)
	for range int(3 * isrLag / isrFetchWait) {
		r.clk.Advance(isrFetchWait)
		_, _, err := r.p.Append(batchOf(t, 1), AcksLeader, nil, record.FromClient)
		require.NoError(t, err)
		for _, id := range []int32{2, 3} {
			r.followers[id].takeChunk()
		}
		// More arrives before the followers report what they appended.
		_, _, err = r.p.Append(batchOf(t, 1), AcksLeader, nil, record.FromClient)
		require.NoError(t, err)
		for _, id := range []int32{2, 3} {
			r.followers[id].report()
			r.awaitFetch(id)
			r.p.mu.Lock()
			behind := r.p.log.LogEndOffset() - r.followers[id].pos
			r.p.mu.Unlock()
			require.Positive(t, behind, "the follower must trail the log end for this test")
		}
		r.p.periodic(context.Background())
	}
	r.requireISR([]int32{1, 2, 3}, 0)
}
