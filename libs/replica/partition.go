package replica

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/storage"
)

// Partition is one replica on this node.
type Partition struct {
	m       *Manager
	tp      TP
	topicID string
	dir     string
	log     *storage.Log

	// coordMu orders the appends of an internal topic's coordinators
	// against coordinator fences (StorageService.FenceCoordinator): a
	// check that the writer coordinates the partition and its append are
	// one step, and a fence's log end covers every write checked before
	// it.
	coordMu sync.Mutex
	// coordFence is the highest metadata revision a coordinator fenced
	// this partition at (FenceCoordinator); guarded by coordMu.
	coordFence int64

	mu             sync.Mutex
	isLeader       bool
	leaderID       int32
	leaderEpoch    int32
	partitionEpoch int32
	replicas       []int32
	isr            []int32 // committed by the controller
	pendingISR     []int32 // proposed, not yet committed; nil when none
	minISR         int
	fsync          bool
	hw             int64
	// epochStart is the log end offset when this node became leader in
	// leaderEpoch: everything below it is from earlier epochs.
	epochStart int64
	followers  map[int32]*follower
	// notify is closed and replaced whenever the log end, the high
	// watermark or the role changes; produce waiters and fetch streams wait
	// on it.
	notify   chan struct{}
	hwSaved  int64
	closed   bool
	cfgStamp storage.Config
	traced   []*tracedAppend
	// advancing is set while a goroutine makes the leader's appends
	// durable for the high watermark (see advanceDurableLocked).
	advancing bool
}

// follower is what a leader knows of one follower. A fetch is a position
// the follower reported (with new offsets or as a keep-alive), never a
// pass of the leader's own stream loop: only the follower can say it is
// alive and caught up.
type follower struct {
	leo          int64 // -1 until the follower fetches
	lastCaughtUp time.Time
	lastFetch    time.Time
	// lastFetchLeaderLEO is the leader's log end offset at lastFetch.
	lastFetchLeaderLEO int64
}

func newPartition(m *Manager, tp TP, topicID, dir string, l *storage.Log) *Partition {
	p := &Partition{m: m, tp: tp, topicID: topicID, dir: dir, log: l, leaderID: -1, leaderEpoch: -1, notify: make(chan struct{}), minISR: 1}
	p.hw = min(readHW(dir), l.LogEndOffset())
	p.hw = max(p.hw, l.LogStartOffset())
	p.hwSaved = p.hw
	return p
}

// LockCoordinator takes the lock that orders coordinator writes of an
// internal topic against coordinator fences.
func (p *Partition) LockCoordinator() { p.coordMu.Lock() }

// UnlockCoordinator releases the lock LockCoordinator took.
func (p *Partition) UnlockCoordinator() { p.coordMu.Unlock() }

// CoordinatorFence returns the highest metadata revision a coordinator
// fenced the partition at. Called with the coordinator lock held.
func (p *Partition) CoordinatorFence() int64 { return p.coordFence }

// RaiseCoordinatorFence records a coordinator's fence revision, if higher.
// Called with the coordinator lock held.
func (p *Partition) RaiseCoordinatorFence(rev int64) { p.coordFence = max(p.coordFence, rev) }

// TP returns the partition's name.
func (p *Partition) TP() TP { return p.tp }

// Log returns the replica's log.
func (p *Partition) Log() *storage.Log { return p.log }

// Changed returns a channel closed at the next change of log end, high
// watermark or role.
func (p *Partition) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

func (p *Partition) wakeLocked() {
	close(p.notify)
	p.notify = make(chan struct{})
}

// View is a snapshot of a partition's offsets.
type View struct {
	LogStart, LogEnd, HighWatermark int64
	LeaderEpoch                     int32
	IsLeader                        bool
	// Committed reports whether the leader has committed a record in its
	// own epoch; until then its high watermark may trail the true one.
	Committed bool
	// LastStable is the last stable offset: the high watermark, or the
	// first offset of the oldest open transaction if that is lower (Kafka's
	// convention). read_committed readers see the records below it.
	LastStable int64
}

// View returns the partition's offsets now.
func (p *Partition) View() View {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.viewLocked()
}

func (p *Partition) viewLocked() View {
	v := View{
		LogStart: p.log.LogStartOffset(), LogEnd: p.log.LogEndOffset(), HighWatermark: p.hw,
		LeaderEpoch: p.leaderEpoch, IsLeader: p.isLeader, Committed: p.hw >= p.epochStart, LastStable: p.hw,
	}
	if first, ok := p.log.FirstUnstableOffset(); ok && first < v.LastStable {
		v.LastStable = first
	}
	return v
}

// applyState makes the replica leader or follower as metadata says. It
// reports whether the role or leader changed.
func (p *Partition) applyState(ps *commonv1.PartitionState, settings topicSettings, img *metadata.Image) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || ps == nil {
		return false
	}
	if settings.storage != p.cfgStamp {
		if err := p.log.SetConfig(settings.storage); err != nil {
			p.m.logger.Warn("cannot apply topic config", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Err(err))
		}
		p.cfgStamp = settings.storage
	}
	p.minISR, p.fsync = settings.minISR, settings.storage.FsyncBeforeAck
	p.replicas = ps.GetReplicas()
	self := p.m.nodeID
	changed := false
	switch {
	case ps.GetLeaderId() == self && (!p.isLeader || ps.GetLeaderEpoch() != p.leaderEpoch):
		p.becomeLeaderLocked(ps)
		changed = true
	case ps.GetLeaderId() == self:
		if ps.GetPartitionEpoch() > p.partitionEpoch {
			// The controller changed the ISR itself (a member failed).
			p.isr, p.partitionEpoch, p.pendingISR = ps.GetIsr(), ps.GetPartitionEpoch(), nil
			p.tryAdvanceHWLocked()
		}
	case p.isLeader || ps.GetLeaderEpoch() != p.leaderEpoch || ps.GetLeaderId() != p.leaderID:
		if p.isLeader {
			p.m.logger.Info("no longer leader", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Epoch(ps.GetLeaderEpoch()),
				slog.Int("leader", int(ps.GetLeaderId())))
		}
		p.isLeader, p.followers, p.pendingISR = false, nil, nil
		p.leaderID, p.leaderEpoch = ps.GetLeaderId(), ps.GetLeaderEpoch()
		p.partitionEpoch, p.isr = ps.GetPartitionEpoch(), ps.GetIsr()
		changed = true
		if plantedTruncateToHW() && p.log.LogEndOffset() > p.hw {
			// Planted bug (before KIP-101): drop everything above the
			// local high watermark on a leader change, though the new
			// leader may lack it too or the tail may be acknowledged.
			p.m.logger.Warn("planted truncate_to_hw: truncating to the high watermark", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Offset(p.hw))
			if err := p.log.TruncateTo(p.hw); err != nil {
				p.m.logger.Warn("planted truncate_to_hw failed", log.Err(err))
			}
		}
	}
	if changed {
		p.wakeLocked()
	}
	return changed
}

func (p *Partition) becomeLeaderLocked(ps *commonv1.PartitionState) {
	p.isLeader = true
	p.leaderID, p.leaderEpoch = p.m.nodeID, ps.GetLeaderEpoch()
	p.partitionEpoch, p.isr, p.pendingISR = ps.GetPartitionEpoch(), ps.GetIsr(), nil
	p.epochStart = p.log.LogEndOffset()
	now := p.m.cfg.Now()
	p.followers = map[int32]*follower{}
	for _, r := range ps.GetReplicas() {
		if r != p.m.nodeID {
			// ISR members get a full lag window to fetch from the new leader.
			p.followers[r] = &follower{leo: -1, lastCaughtUp: now}
		}
	}
	p.m.logger.Info("became leader", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Epoch(p.leaderEpoch),
		log.Offset(p.epochStart), slog.Any("isr", p.isr), slog.Int64("high_watermark", p.hw))
	p.tryAdvanceHWLocked()
	p.advanceDurableLocked()
}

// advanceDurableLocked makes sure that, on a topic that fsyncs before
// acknowledging, what the leader appended becomes durable and moves the
// high watermark even when no acks=all producer waits for it: acks=1 and
// acks=0 appends, an acks=all request that timed out, records recovered
// unsynced after a restart. Without it their records would stay invisible
// to consumers until the next acks=all append. One goroutine per partition
// at a time follows the log end through group commits (shared with the
// producers that wait), then stops.
func (p *Partition) advanceDurableLocked() {
	if !p.fsync || !p.isLeader || p.closed || p.advancing || p.log.DurableOffset() >= p.log.LogEndOffset() {
		return
	}
	p.advancing = true
	go func() {
		for {
			err := p.log.WaitDurable(context.Background(), p.log.LogEndOffset())
			p.mu.Lock()
			p.tryAdvanceHWLocked()
			if err != nil || !p.fsync || !p.isLeader || p.closed || p.log.DurableOffset() >= p.log.LogEndOffset() {
				// An error means the log is offline or truncated; whoever
				// appends next starts over.
				p.advancing = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	}()
}

// maximalISR is the ISR the leader works with: the committed one plus
// replicas it has proposed to add (KIP-497's "maximal ISR"), so that a
// shrink counts only once committed and an expansion at once.
func (p *Partition) maximalISRLocked() []int32 {
	out := slices.Clone(p.isr)
	for _, r := range p.pendingISR {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// localLEO is what the leader itself contributes to the high watermark:
// its log end, or its durable offset when the topic fsyncs before acks.
func (p *Partition) localLEO() int64 {
	if p.fsync {
		return p.log.DurableOffset()
	}
	return p.log.LogEndOffset()
}

// tryAdvanceHWLocked moves the high watermark to the smallest log end
// offset of the in-sync replicas, only while at least min.insync.replicas
// are in sync (KIP-966). It never moves back.
func (p *Partition) tryAdvanceHWLocked() {
	if !p.isLeader {
		return
	}
	isr := p.maximalISRLocked()
	if len(isr) < p.minISR {
		return
	}
	hw := p.localLEO()
	for _, r := range isr {
		if r == p.m.nodeID {
			continue
		}
		f, ok := p.followers[r]
		if !ok || f.leo < 0 {
			return // a member that has not fetched yet holds the mark
		}
		hw = min(hw, f.leo)
	}
	if hw > p.hw {
		p.hw = hw
		p.wakeLocked()
	}
}

// notLeaderErr names the current leader.
func (p *Partition) notLeaderErrLocked() *errs.Error {
	hint := &edpb.LeaderHint{Topic: p.tp.Topic, Partition: p.tp.Partition, LeaderId: p.leaderID, LeaderEpoch: p.leaderEpoch}
	if p.leaderID >= 0 {
		hint.LeaderAddress = p.m.cache.Load().Address(p.leaderID)
	}
	return errs.New(errs.NotLeaderOrFollower, "node %d does not lead %s (node %d does, epoch %d)", p.m.nodeID, p.tp, p.leaderID, p.leaderEpoch).WithLeader(hint)
}

// checkLeaderLocked verifies this node leads and the caller's epoch, if
// given, matches (KIP-320).
func (p *Partition) checkLeaderLocked(callerEpoch *int32) error {
	if p.closed {
		return errs.New(errs.NotLeaderOrFollower, "%s is no longer hosted by node %d", p.tp, p.m.nodeID)
	}
	if !p.isLeader {
		return p.notLeaderErrLocked()
	}
	if err := p.m.unfenced(); err != nil {
		return err
	}
	if callerEpoch != nil {
		switch {
		case *callerEpoch < p.leaderEpoch:
			return errs.New(errs.FencedLeaderEpoch, "%s: leader epoch %d is older than the current %d; refresh metadata", p.tp, *callerEpoch, p.leaderEpoch).
				WithLeader(&edpb.LeaderHint{Topic: p.tp.Topic, Partition: p.tp.Partition, LeaderId: p.leaderID, LeaderEpoch: p.leaderEpoch,
					LeaderAddress: p.m.cache.Load().Address(p.leaderID)})
		case *callerEpoch > p.leaderEpoch:
			return errs.New(errs.UnknownLeaderEpoch, "%s: leader epoch %d is newer than this leader's %d; retry", p.tp, *callerEpoch, p.leaderEpoch)
		}
	}
	return p.log.Err()
}

// Acks is the acknowledgement level of an append.
type Acks int

// Acknowledgement levels.
const (
	AcksNone Acks = iota
	AcksLeader
	AcksAll
)

// Append appends producer batches as leader, in the page cache, and
// returns the leader epoch it appended in; AwaitAck then waits for the
// acknowledgement level. Splitting the two lets a pipelined stream append
// requests in order and wait for them concurrently, so one fsync and one
// replication round trip cover many requests (group commit). With AcksAll
// it fails, before appending anything, when the ISR is below
// min.insync.replicas.
func (p *Partition) Append(batches []byte, acks Acks, callerEpoch *int32, origin record.Origin) (storage.AppendResult, int32, error) {
	res, epoch, _, err := p.append(batches, acks, callerEpoch, origin, nil, nil)
	return res, epoch, err
}

// AppendTraced is Append for a traced produce: span (the append's
// "replicate" span, whose context carrier holds) is registered before any
// follower is woken for the new records, so the chunk that carries them
// carries the trace too. done is to be called when the wait for the
// acknowledgement is over.
func (p *Partition) AppendTraced(batches []byte, acks Acks, callerEpoch *int32, origin record.Origin, span trace.Span, carrier map[string]string) (res storage.AppendResult, epoch int32, done func(), err error) {
	return p.append(batches, acks, callerEpoch, origin, span, carrier)
}

func (p *Partition) append(batches []byte, acks Acks, callerEpoch *int32, origin record.Origin, span trace.Span, carrier map[string]string) (storage.AppendResult, int32, func(), error) {
	p.mu.Lock()
	if err := p.checkLeaderLocked(callerEpoch); err != nil {
		p.mu.Unlock()
		return storage.AppendResult{}, 0, nil, err
	}
	epoch := p.leaderEpoch
	if acks == AcksAll && len(p.isr) < p.minISR {
		n, minISR := len(p.isr), p.minISR
		p.mu.Unlock()
		return storage.AppendResult{}, 0, nil, errs.New(errs.NotEnoughReplicas, "%s has %d in-sync replicas, below min.insync.replicas=%d; nothing was appended", p.tp, n, minISR)
	}
	// A traced append keeps the lock across the write: followers take the
	// log end under it, so none reads these records before their trace is
	// registered (a follower's fetch may run at any time, not only when
	// this append wakes it).
	if span == nil {
		p.mu.Unlock()
	}
	res, err := p.log.AppendAsLeader(batches, epoch, origin)
	if span == nil {
		p.mu.Lock()
	}
	if err != nil {
		p.mu.Unlock()
		return res, epoch, nil, err
	}
	done := func() {}
	if span != nil {
		done = p.traceAppendLocked(res.LastOffset, span, carrier)
	}
	p.tryAdvanceHWLocked()
	p.advanceDurableLocked()
	p.wakeLocked()
	p.mu.Unlock()
	return res, epoch, done, nil
}

// AwaitAck waits until an append made in epoch reaches the acknowledgement
// level: for AcksAll, covered by the high watermark, which with
// sluice.fsync.before.ack counts only what every in-sync replica has made
// durable. AcksLeader and AcksNone never wait for an fsync. It fails if
// leadership moves, or with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
// shrinks below min.insync.replicas first.
func (p *Partition) AwaitAck(ctx context.Context, res storage.AppendResult, epoch int32, acks Acks) error {
	if acks != AcksAll {
		return nil
	}
	if plantedAckBeforeReplication() {
		return nil // planted bug: answer acks=all as if it were acks=1
	}
	p.mu.Lock()
	fsync := p.fsync
	p.mu.Unlock()
	if fsync {
		// The leader's own share of the high watermark is its durable
		// offset; nothing else recomputes the mark when it moves.
		if err := p.log.WaitDurable(ctx, res.LastOffset+1); err != nil {
			if ctx.Err() != nil {
				return errs.New(errs.RequestTimedOut, "%s: offset %d was not made durable in time", p.tp, res.FirstOffset)
			}
			return err
		}
		p.mu.Lock()
		p.tryAdvanceHWLocked()
		p.mu.Unlock()
	}
	for {
		p.mu.Lock()
		switch {
		case !p.isLeader || p.leaderEpoch != epoch:
			err := p.notLeaderErrLocked()
			p.mu.Unlock()
			return err
		case p.hw > res.LastOffset:
			p.mu.Unlock()
			return nil
		case len(p.maximalISRLocked()) < p.minISR:
			n := len(p.maximalISRLocked())
			p.mu.Unlock()
			return errs.New(errs.NotEnoughReplicasAfterAppend, "%s: appended at offset %d, but the ISR shrank to %d, below min.insync.replicas=%d", p.tp, res.FirstOffset, n, p.minISR)
		}
		ch := p.notify
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return errs.New(errs.RequestTimedOut, "%s: appended at offset %d but not replicated to every in-sync replica in time", p.tp, res.FirstOffset)
		}
	}
}

// Produce is Append followed by AwaitAck.
func (p *Partition) Produce(ctx context.Context, batches []byte, acks Acks, callerEpoch *int32, origin record.Origin) (storage.AppendResult, error) {
	res, epoch, err := p.Append(batches, acks, callerEpoch, origin)
	if err != nil {
		return res, err
	}
	return res, p.AwaitAck(ctx, res, epoch, acks)
}

// EpochEnd is a leader epoch and the offset where it ends.
type EpochEnd struct {
	Epoch     int32
	EndOffset int64
}

// ReadForConsumer reads committed batches (up to the high watermark) from
// offset, as the leader. With lastFetchedEpoch set, it first checks the
// consumer's log agrees with the leader's: if it diverged, it returns where
// (and no data).
func (p *Partition) ReadForConsumer(offset int64, maxBytes int, callerEpoch, lastFetchedEpoch *int32) (*storage.ReadResult, View, *EpochEnd, error) {
	return p.ReadIsolated(offset, maxBytes, callerEpoch, lastFetchedEpoch, false)
}

// ReadIsolated is ReadForConsumer with an isolation level: readCommitted
// reads only below the last stable offset (KIP-98 read_committed), so no
// batch of a transaction still open is returned.
func (p *Partition) ReadIsolated(offset int64, maxBytes int, callerEpoch, lastFetchedEpoch *int32, readCommitted bool) (*storage.ReadResult, View, *EpochEnd, error) {
	p.mu.Lock()
	if err := p.checkLeaderLocked(callerEpoch); err != nil {
		p.mu.Unlock()
		return nil, View{}, nil, err
	}
	v := p.viewLocked()
	p.mu.Unlock()
	if lastFetchedEpoch != nil {
		if d := p.divergence(*lastFetchedEpoch, offset); d != nil {
			return nil, v, d, nil
		}
	}
	if offset < v.LogStart || offset > v.LogEnd {
		return nil, v, nil, errs.New(errs.OffsetOutOfRange, "%s: offset %d is outside [%d, %d]", p.tp, offset, v.LogStart, v.LogEnd)
	}
	upTo := v.HighWatermark
	if readCommitted {
		upTo = v.LastStable
		if plantedLSOOffByOne() && upTo < v.HighWatermark {
			// Planted bug: the bound is one past the LSO, so the first
			// batch of the oldest open transaction is served too (reads
			// return whole batches: the bound moves to that batch's end).
			if first, err := p.log.Read(upTo, v.HighWatermark, 1); err == nil {
				upTo = max(upTo+1, first.NextOffset)
				first.Release()
			}
		}
	}
	res, err := p.log.Read(offset, upTo, maxBytes)
	return res, v, nil, err
}

// divergence returns where this log diverges from a reader whose last
// batch had lastEpoch and who wants offset next, or nil if it does not.
func (p *Partition) divergence(lastEpoch int32, offset int64) *EpochEnd {
	e, end := p.log.EndOffsetForEpoch(lastEpoch)
	if e == lastEpoch && end >= offset {
		return nil
	}
	return &EpochEnd{Epoch: e, EndOffset: end}
}

// ReadForFollower reads batches up to the log end for a follower, as the
// leader, and records a fetch by the follower at offset (its fetch offset
// is its log end). When the follower's log diverged from this one it
// returns where, and no data, and records nothing.
func (p *Partition) ReadForFollower(replica int32, offset int64, lastEpoch int32, callerEpoch *int32, maxBytes int) (*storage.ReadResult, View, *EpochEnd, error) {
	return p.readForFollower(replica, offset, lastEpoch, callerEpoch, maxBytes, true)
}

// readForFollower is ReadForFollower; fetched is false when the leader
// reads on its own initiative (new data for a follower parked at the log
// end), which says nothing of the follower's liveness.
func (p *Partition) readForFollower(replica int32, offset int64, lastEpoch int32, callerEpoch *int32, maxBytes int, fetched bool) (*storage.ReadResult, View, *EpochEnd, error) {
	p.mu.Lock()
	if err := p.checkLeaderLocked(callerEpoch); err != nil {
		p.mu.Unlock()
		return nil, View{}, nil, err
	}
	v := p.viewLocked()
	p.mu.Unlock()
	if lastEpoch >= 0 {
		if d := p.divergence(lastEpoch, offset); d != nil {
			return nil, v, d, nil
		}
	}
	if offset < v.LogStart || offset > v.LogEnd {
		return nil, v, nil, errs.New(errs.OffsetOutOfRange, "%s: follower offset %d is outside the leader's [%d, %d]", p.tp, offset, v.LogStart, v.LogEnd)
	}
	p.mu.Lock()
	if fetched {
		p.updateFollowerLocked(replica, offset)
	}
	v = p.viewLocked()
	p.mu.Unlock()
	if offset >= v.LogEnd {
		return nil, v, nil, nil
	}
	res, err := p.log.Read(offset, v.LogEnd, maxBytes)
	return res, v, nil, err
}

// updateFollowerLocked records a fetch by a follower at its log end offset,
// advances the high watermark and proposes adding the follower to the ISR
// once it has caught up.
//
// Caught up follows Kafka's Replica.updateFetchState (lastCaughtUpTimeMs,
// KIP-16 / KAFKA-1546): a follower that fetched up to the leader's log end
// is caught up now, whether or not new data arrives (an idle partition's
// followers stay in sync); one that fetched up to the log end the leader
// had at its previous fetch was caught up at that previous fetch (a
// follower trailing a steady stream by one round trip stays in sync).
func (p *Partition) updateFollowerLocked(replica int32, leo int64) {
	f, ok := p.followers[replica]
	if !ok {
		if !slices.Contains(p.replicas, replica) {
			return
		}
		f = &follower{leo: -1}
		p.followers[replica] = f
	}
	now := p.m.cfg.Now()
	if leo > f.leo {
		f.leo = leo
		p.traceFollowerLocked(replica, leo)
	}
	leaderLEO := p.log.LogEndOffset()
	switch {
	case leo >= leaderLEO:
		f.lastCaughtUp = now
	case !f.lastFetch.IsZero() && leo >= f.lastFetchLeaderLEO && f.lastFetch.After(f.lastCaughtUp):
		f.lastCaughtUp = f.lastFetch
	}
	f.lastFetch, f.lastFetchLeaderLEO = now, leaderLEO
	p.tryAdvanceHWLocked()
	// Join: caught up to the high watermark and to the start of this
	// leader's epoch.
	if !slices.Contains(p.maximalISRLocked(), replica) && f.leo >= p.hw && f.leo >= p.epochStart && p.pendingISR == nil {
		next := append(slices.Clone(p.isr), replica)
		p.proposeISRLocked(next, fmt.Sprintf("replica %d caught up", replica))
	}
}

// periodic runs the leader's checks: followers that have not caught up for
// replica.lag.time.max.ms leave the ISR. It also saves the high watermark.
func (p *Partition) periodic(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.hw != p.hwSaved {
		if err := writeHW(p.dir, p.hw); err == nil {
			p.hwSaved = p.hw
		}
	}
	if !p.isLeader || p.pendingISR != nil {
		return
	}
	now := p.m.cfg.Now()
	var keep []int32
	var dropped []int32
	for _, r := range p.isr {
		f := p.followers[r]
		if r != p.m.nodeID && (f == nil || now.Sub(f.lastCaughtUp) > p.m.cfg.LagTimeMax) {
			dropped = append(dropped, r)
			continue
		}
		keep = append(keep, r)
	}
	if len(dropped) > 0 {
		p.proposeISRLocked(keep, fmt.Sprintf("replicas %v have not caught up for %v", dropped, p.m.cfg.LagTimeMax))
	}
}

// close closes the log, saving the high watermark.
func (p *Partition) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.isLeader = false
	hw := p.hw
	p.wakeLocked()
	p.mu.Unlock()
	_ = writeHW(p.dir, hw) // the high watermark is advisory after a restart
	return p.log.Close()
}

// --- follower side --------------------------------------------------------

// FollowerState is what a follower reports to its leader.
func (p *Partition) FollowerState() (leo int64, lastEpoch int32, leaderEpoch int32, leaderID int32, isLeader bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.log.LatestEpoch()
	if !ok {
		e = -1
	}
	return p.log.LogEndOffset(), e, p.leaderEpoch, p.leaderID, p.isLeader
}

// AppendReplicated appends batches fetched from the leader (as follower),
// waiting for them to be durable when the topic fsyncs before acks, and
// records the leader's high watermark. It returns the new log end offset,
// which the follower reports to the leader.
func (p *Partition) AppendReplicated(ctx context.Context, batches []byte, leaderHW, leaderLogStart int64) (int64, error) {
	p.mu.Lock()
	if p.isLeader || p.closed {
		p.mu.Unlock()
		return 0, errs.New(errs.NotLeaderOrFollower, "%s: node %d is not a follower", p.tp, p.m.nodeID)
	}
	fsync := p.fsync
	p.mu.Unlock()
	if len(batches) > 0 {
		res, err := p.log.AppendAsFollower(batches)
		if err != nil {
			return p.log.LogEndOffset(), err
		}
		if fsync {
			if err := p.log.WaitDurable(ctx, res.LastOffset+1); err != nil {
				return p.log.LogEndOffset(), err
			}
		}
	}
	if leaderLogStart > p.log.LogStartOffset() {
		if _, err := p.log.DeleteRecordsBefore(min(leaderLogStart, p.log.LogEndOffset())); err != nil {
			return p.log.LogEndOffset(), err
		}
	}
	leo := p.log.LogEndOffset()
	p.mu.Lock()
	if h := min(leaderHW, leo); h > p.hw {
		p.hw = h
	}
	p.wakeLocked()
	p.mu.Unlock()
	return leo, nil
}

// TruncateTo truncates the follower's log after a divergence. It never
// truncates below the offset the leader named, and never to the local high
// watermark alone (KIP-101).
func (p *Partition) TruncateTo(offset int64) error {
	p.mu.Lock()
	if p.isLeader {
		p.mu.Unlock()
		return errs.New(errs.InvalidRequest, "%s: a leader does not truncate on a follower's behalf", p.tp)
	}
	p.mu.Unlock()
	if offset >= p.log.LogEndOffset() {
		return nil
	}
	p.m.logger.Info("truncating diverged log", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Offset(offset),
		slog.Int64("log_end", p.log.LogEndOffset()))
	if err := p.log.TruncateTo(offset); err != nil {
		return err
	}
	p.mu.Lock()
	p.hw = min(p.hw, offset)
	p.wakeLocked()
	p.mu.Unlock()
	return nil
}

// StartAt empties the follower's log and restarts it at offset: the leader's
// log no longer holds what the follower needs (the follower fell behind the
// leader's retention).
func (p *Partition) StartAt(offset int64) error {
	if err := p.log.TruncateFullyAndStartAt(offset); err != nil {
		return err
	}
	p.mu.Lock()
	p.hw = offset
	p.wakeLocked()
	p.mu.Unlock()
	return nil
}

// --- high-watermark checkpoint ---------------------------------------------

const hwFile = "high-watermark"

func readHW(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, hwFile))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func writeHW(dir string, hw int64) error {
	tmp := filepath.Join(dir, hwFile+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(hw, 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, hwFile))
}

// LeaderView checks this node leads (and the caller's epoch, if given) and
// returns the partition's offsets.
func (p *Partition) LeaderView(callerEpoch *int32) (View, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.checkLeaderLocked(callerEpoch); err != nil {
		return View{}, err
	}
	return p.viewLocked(), nil
}

// DeleteRecords moves the log start offset to offset (-1: the high
// watermark), as leader. Records at or above the high watermark cannot be
// deleted.
func (p *Partition) DeleteRecords(offset int64) (int64, error) {
	p.mu.Lock()
	if err := p.checkLeaderLocked(nil); err != nil {
		p.mu.Unlock()
		return -1, err
	}
	hw := p.hw
	p.mu.Unlock()
	if offset == -1 {
		offset = hw
	}
	if offset > hw {
		return -1, errs.New(errs.OffsetOutOfRange, "%s: cannot delete up to %d, above the high watermark %d", p.tp, offset, hw)
	}
	low, err := p.log.DeleteRecordsBefore(offset)
	if err != nil {
		return -1, err
	}
	p.mu.Lock()
	p.wakeLocked()
	p.mu.Unlock()
	return low, nil
}
