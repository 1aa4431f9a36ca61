package groupcoord

import (
	"context"
	"log/slog"
	"math"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
)

// Offsets committed in a transaction (KIP-98, KIP-447).
//
// TxnOffsetCommit writes the offsets to the group's partition of the
// offsets topic as a transactional batch of the producer (no sequence), in
// Kafka's offset layouts. Once acknowledged they are pending: held per
// producer id, invisible to OffsetFetch. The transaction coordinator ends
// the transaction with a marker that the partition's storage leader
// forwards here (WriteTxnOffsetMarkers); the shard writes the control batch
// itself, in log order with its other writes, and once it is acknowledged a
// COMMIT makes the producer's pending offsets committed and an ABORT drops
// them. Replay does the same from the log: transactional offset records
// become pending, control batches commit or drop them, so a new
// coordinator holds what the old one held.
//
// A pending offset becomes committed only over a committed offset written
// earlier in the log (committedOffset.logOffset): a plain commit made after
// the transactional one, and before its marker, wins, as in Kafka.

// openTxn is a producer's transaction as this shard sees it: the offsets it
// committed so far, by group.
type openTxn struct {
	epoch   int16
	offsets map[string]map[topicPartition]committedOffset
	// inflight counts its TxnOffsetCommit writes not settled yet; a marker
	// waits for them (idle closes when the count drops to 0), so it never
	// overtakes an offset it must end.
	inflight int
	idle     chan struct{}
}

// endedTxn is the last transaction of a producer a marker ended here.
type endedTxn struct {
	epoch int16
	at    time.Time
}

// endedTxnRetention is how long the shard remembers a producer's last
// ended transaction to refuse a late TxnOffsetCommit of it; far above any
// transaction timeout (transaction.max.timeout.ms is 15 minutes).
const endedTxnRetention = time.Hour

// txnLocked returns the producer's open transaction, creating it.
func (s *shard) txnLocked(pid int64, epoch int16) *openTxn {
	t := s.txns[pid]
	if t == nil {
		t = &openTxn{epoch: epoch, offsets: map[string]map[topicPartition]committedOffset{}}
		s.txns[pid] = t
	}
	t.epoch = max(t.epoch, epoch)
	return t
}

// pendingLocked reports whether an open transaction holds an offset of the
// group's partition.
func (s *shard) pendingLocked(group string, tp topicPartition) bool {
	for _, t := range s.txns {
		if _, ok := t.offsets[group][tp]; ok {
			return true
		}
	}
	return false
}

// hasPendingLocked reports whether an open transaction holds offsets of the
// group.
func (s *shard) hasPendingLocked(group string) bool {
	for _, t := range s.txns {
		if len(t.offsets[group]) > 0 {
			return true
		}
	}
	return false
}

// applyLogRecordLocked applies one record met in replay: a transactional
// offset commit becomes pending, a marker ends the producer's transaction,
// anything else applies as usual.
func (s *shard) applyLogRecordLocked(r *coordinator.LogRecord) error {
	switch {
	case r.Control:
		t, err := record.ParseControlKey(r.Key)
		if err != nil {
			return err
		}
		s.endTxnLocked(r.ProducerID, r.ProducerEpoch, t == record.ControlCommit, r.Offset)
		return nil
	case r.Transactional && r.ProducerID >= 0:
		return s.applyTxnRecordLocked(r.ProducerID, r.ProducerEpoch, r.Key, r.Value, r.Offset)
	}
	return s.applyRecordLocked(r.Key, r.Value, r.Offset)
}

// applyTxnRecordLocked holds an offset committed in producer pid's
// transaction as pending. Only offset commits are written in transactions;
// other records of a transactional batch apply at once.
func (s *shard) applyTxnRecordLocked(pid int64, epoch int16, key, value []byte, logOffset int64) error {
	k, err := parseKey(key)
	if err != nil {
		return err
	}
	if k.kind != kindOffset || value == nil {
		return s.applyRecordLocked(key, value, logOffset)
	}
	c, err := parseOffsetValue(value)
	if err != nil {
		return err
	}
	c.logOffset = logOffset
	// The group exists from its first pending offset on (Kafka creates a
	// simple group too), so a describe or a delete sees it.
	s.groupLocked(k.group, true)
	t := s.txnLocked(pid, epoch)
	byTP := t.offsets[k.group]
	if byTP == nil {
		byTP = map[topicPartition]committedOffset{}
		t.offsets[k.group] = byTP
	}
	tp := topicPartition{k.topic, k.partition}
	if cur, ok := byTP[tp]; !ok || cur.logOffset < logOffset {
		byTP[tp] = c
	}
	return nil
}

// endTxnLocked ends producer pid's transaction with the marker at
// markerOffset: a commit makes its pending offsets written before the
// marker committed (each over an older committed offset only), an abort
// drops them. Kafka's markers end whatever the producer id has pending,
// whatever the epoch: the leader refused a marker from an older epoch
// already. Offsets written after the marker (the producer's next
// transaction, whose write was acknowledged first) stay pending.
func (s *shard) endTxnLocked(pid int64, epoch int16, commit bool, markerOffset int64) {
	s.markEndedLocked(pid, epoch)
	t := s.txns[pid]
	if t == nil {
		return
	}
	for gid, byTP := range t.offsets {
		g := s.groupLocked(gid, commit)
		for tp, c := range byTP {
			if c.logOffset > markerOffset {
				continue
			}
			delete(byTP, tp)
			if g == nil || !commit {
				continue
			}
			if cur, ok := g.offsets[tp]; !ok || cur.logOffset < c.logOffset {
				g.offsets[tp] = c
			}
		}
		if len(byTP) == 0 {
			delete(t.offsets, gid)
		}
		if g != nil {
			s.dropIfGoneLocked(g)
		}
	}
	if len(t.offsets) == 0 && t.inflight == 0 {
		delete(s.txns, pid)
	}
}

// markEndedLocked remembers that the producer's transaction at epoch is
// over here.
func (s *shard) markEndedLocked(pid int64, epoch int16) {
	delete(s.checks, pid)
	if e, ok := s.ended[pid]; !ok || e.epoch <= epoch {
		s.ended[pid] = endedTxn{epoch: epoch, at: s.c.now()}
	}
}

// settleTxnWriteLocked counts one TxnOffsetCommit write of t as settled.
func (s *shard) settleTxnWriteLocked(pid int64, t *openTxn) {
	t.inflight--
	if t.inflight > 0 {
		return
	}
	if t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	if s.txns[pid] == t && len(t.offsets) == 0 {
		// Nothing of it was written: forget it, or it would hold the
		// producer's epoch here for nothing.
		delete(s.txns, pid)
	}
}

// expireEndedLocked forgets producers' ended transactions older than
// endedTxnRetention.
func (s *shard) expireEndedLocked(now time.Time) {
	for pid, e := range s.ended {
		if now.Sub(e.at) >= endedTxnRetention {
			delete(s.ended, pid)
		}
	}
}

// TxnOffsetCommit commits offsets in a transaction (see the comment at the
// top of this file). The request is checked as OffsetCommit checks its
// own, with Kafka's differences for transactions: no member id and
// generation -1 skips the member check even in a group with members (a
// producer that does not pass the consumer's group metadata), and a
// classic group completing a rebalance is no reason to refuse. A producer
// epoch older than one this shard holds for the producer id gets
// INVALID_PRODUCER_EPOCH; one whose transaction a marker already ended
// here gets INVALID_TXN_STATE (a late request must not slip into the
// producer's next transaction).
func (r *GroupCoordinator) TxnOffsetCommit(ctx context.Context, req *groupv1.TxnOffsetCommitRequest) (*groupv1.TxnOffsetCommitResponse, error) {
	switch {
	case len(req.GetPartitions()) == 0:
		return nil, errs.Invalid(errs.InvalidRequest, "partitions", "nothing to commit: name at least one partition")
	case req.GetTransactionalId() == "":
		return nil, errs.Invalid(errs.InvalidRequest, "transactional_id", "offsets are committed in a transaction only by a transactional producer: the transactional id is empty")
	case len(req.GetTransactionalId()) > coordinator.MaxTransactionalIDBytes:
		return nil, errs.Invalid(errs.InvalidRequest, "transactional_id", "the transactional id has %d bytes, more than the %d allowed", len(req.GetTransactionalId()), coordinator.MaxTransactionalIDBytes)
	case req.GetProducerId() < 0:
		return nil, errs.Invalid(errs.InvalidRequest, "producer_id", "producer id %d is negative", req.GetProducerId())
	case req.GetProducerEpoch() < 0 || req.GetProducerEpoch() > math.MaxInt16:
		return nil, errs.Invalid(errs.InvalidRequest, "producer_epoch", "producer epoch %d is outside [0, %d]", req.GetProducerEpoch(), math.MaxInt16)
	}
	// Write on the transactional id, then Read on the group (Kafka's
	// order), each refusing the whole call; Read on each topic.
	if err := r.check(ctx, authz.Write, authz.TransactionalID, req.GetTransactionalId()); err != nil {
		return nil, err
	}
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	denials := r.topicDenials(ctx, authz.Read, len(req.GetPartitions()), func(i int) string { return req.GetPartitions()[i].GetTopic() })
	resp := &groupv1.TxnOffsetCommitResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	failAll := func(e *errs.Error) (*groupv1.TxnOffsetCommitResponse, error) {
		for _, res := range resp.Results {
			res.Error = e.Proto()
		}
		return resp, nil
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return failAll(e)
	}
	pid, epoch := req.GetProducerId(), int16(req.GetProducerEpoch())
	img := r.deps.Metadata.Load()
	s.mu.Lock()
	g := s.groupLocked(req.GetGroupId(), false)
	partitionCheck, e := s.validateTxnCommitLocked(g, req)
	verify := false
	if e == nil {
		verify, e = s.checkProducerLocked(pid, epoch, req.GetTransactionalId())
	}
	if e == nil && verify {
		// KIP-890: offsets open the producer's transaction here only once
		// its coordinator confirms this partition is in the transaction
		// (AddOffsetsToTxn put it there). The check is registered first so
		// that a marker written while the question is out withdraws it.
		check := &txnCheck{epoch: epoch}
		s.checks[pid] = check
		s.mu.Unlock()
		err, busy := r.verifyTxn(ctx, req.GetTransactionalId(), pid, epoch, &commonv1.TopicPartition{Topic: OffsetsTopic, Partition: s.id})
		s.mu.Lock()
		switch {
		case busy:
			e = errs.New(errs.CoordinatorNotAvailable, "could not confirm with the transaction coordinator of %q that the group's offsets are in its transaction (%v); retry",
				req.GetTransactionalId(), err)
		case err != nil:
			e = errs.From(err)
		case s.checks[pid] != check:
			e = errs.New(errs.InvalidTxnState, "transactional id %q: the transaction of producer %d epoch %d ended while its coordinator was asked whether it includes the group's offsets",
				req.GetTransactionalId(), pid, epoch)
		default:
			delete(s.checks, pid)
			// The group may have changed while the lock was released.
			g = s.groupLocked(req.GetGroupId(), false)
			if partitionCheck, e = s.validateTxnCommitLocked(g, req); e == nil {
				_, e = s.checkProducerLocked(pid, epoch, req.GetTransactionalId())
			}
		}
	}
	if e != nil {
		s.mu.Unlock()
		return failAll(e)
	}
	recs, idx := r.commitRecords(img, req.GetGroupId(), req.GetPartitions(), denials, partitionCheck, resp.Results)
	if len(recs) == 0 {
		s.mu.Unlock()
		return resp, nil
	}
	t := s.txnLocked(pid, epoch)
	t.inflight++
	out := make([]coordinator.KV, len(recs))
	for i, rec := range recs {
		out[i] = coordinator.KV{Key: rec.key, Value: rec.value}
	}
	done := s.writer.WriteTxnLocked(pid, epoch, out, func(base int64) {
		for i, rec := range recs {
			_ = s.applyTxnRecordLocked(pid, epoch, rec.key, rec.value, base+int64(i)) // our own encoding: cannot fail to decode
		}
		s.settleTxnWriteLocked(pid, t)
	}, func(*errs.Error) { s.settleTxnWriteLocked(pid, t) })
	s.mu.Unlock()
	if e := await(ctx, done); e != nil {
		for _, i := range idx {
			resp.Results[i].Error = e.Proto()
		}
	}
	return resp, nil
}

// checkProducerLocked refuses a transactional commit from an older epoch
// than the producer's open transaction here, or for a transaction a marker
// already ended at a later epoch. It reports whether the producer's
// transaction must be confirmed with its coordinator first: always unless
// the transaction is already open here at this epoch. A commit at the
// epoch of the producer's last ended transaction is such a case, not a
// refusal: producers that speak Kafka's EndTxn below v5 run every
// transaction at one epoch, and only the coordinator knows whether this
// is their next transaction or a late request of the ended one.
func (s *shard) checkProducerLocked(pid int64, epoch int16, tid string) (verify bool, _ *errs.Error) {
	t := s.txns[pid]
	if t != nil && epoch < t.epoch {
		return false, errs.New(errs.InvalidProducerEpoch, "transactional id %q: producer %d epoch %d is older than its epoch %d in an open transaction; a newer producer took over",
			tid, pid, epoch, t.epoch)
	}
	if e, ok := s.ended[pid]; ok && epoch < e.epoch {
		return false, errs.New(errs.InvalidTxnState, "transactional id %q: the transaction of producer %d epoch %d has ended; a late request cannot add offsets to it",
			tid, pid, epoch)
	}
	return t == nil || t.epoch != epoch, nil
}

// txnCheck is one confirmation asked of a transaction coordinator (Kafka's
// verification guard): valid while it is the producer's entry in
// shard.checks. (Not zero-sized: pointers to distinct zero-sized values
// may be equal.)
type txnCheck struct{ epoch int16 }

// validateTxnCommitLocked applies the member checks of a transactional
// commit (KIP-447): a producer passes the group metadata of the consumer
// whose offsets it commits, and is fenced as that consumer's OffsetCommit
// would be.
func (s *shard) validateTxnCommitLocked(g *group, req *groupv1.TxnOffsetCommitRequest) (func(string, int32) error, *errs.Error) {
	gen, memberID, instanceID := req.GetGenerationIdOrMemberEpoch(), req.GetMemberId(), req.GetGroupInstanceId()
	if gen < 0 && memberID == "" && instanceID == "" {
		return nil, nil
	}
	if g != nil && g.consumer != nil {
		check, err := g.consumer.CommitValidator(memberID, gen)
		return check, errsFrom(err)
	}
	if g == nil || g.classic == nil || len(g.classic.members) == 0 {
		if gen >= 0 {
			return nil, errs.New(errs.IllegalGeneration, "group %q has no active members, so generation %d is stale; the consumer must join the group again", req.GetGroupId(), gen)
		}
		return nil, errs.New(errs.UnknownMemberID, "group %q has no member %q", req.GetGroupId(), memberID)
	}
	_, e := s.classicMemberLocked(g, memberID, instanceID, gen)
	return nil, e
}

// WriteTxnOffsetMarkers writes transaction markers to partitions of the offsets
// topic this node coordinates (storage nodes forward them here; see the
// comment at the top of this file). Each partition is answered on its own:
// NOT_COORDINATOR with a hint, or COORDINATOR_LOAD_IN_PROGRESS, when this
// node does not serve it now; INVALID_PRODUCER_EPOCH for a marker older
// than the producer's open transaction here; the leader's answer to the
// append otherwise (its refusals of an older producer or coordinator epoch
// included). A marker for a producer with nothing pending is written all
// the same: it ends the producer's transaction on the partition's log.
func (r *GroupCoordinator) WriteTxnOffsetMarkers(ctx context.Context, req *groupv1.WriteTxnOffsetMarkersRequest) (*groupv1.WriteTxnOffsetMarkersResponse, error) {
	if err := authz.CheckInternal(ctx, r.deps.Authorizer(), "WriteTxnOffsetMarkers", markerCallers...); err != nil {
		return nil, err
	}
	out := &groupv1.WriteTxnOffsetMarkersResponse{}
	type wait struct {
		res  *storagev1.TxnMarkerResult
		done <-chan *errs.Error
	}
	var waits []wait
	for i, m := range req.GetMarkers() {
		switch {
		case m.GetProducerId() < 0:
			return nil, errs.Invalid(errs.InvalidRequest, "markers", "marker %d: producer id %d is negative", i, m.GetProducerId())
		case m.GetProducerEpoch() < 0 || m.GetProducerEpoch() > math.MaxInt16:
			return nil, errs.Invalid(errs.InvalidRequest, "markers", "marker %d: producer epoch %d is outside [0, %d]", i, m.GetProducerEpoch(), math.MaxInt16)
		case m.GetCoordinatorEpoch() < 0:
			return nil, errs.Invalid(errs.InvalidRequest, "markers", "marker %d: coordinator epoch %d is negative", i, m.GetCoordinatorEpoch())
		case len(m.GetPartitions()) == 0:
			return nil, errs.Invalid(errs.InvalidRequest, "markers", "marker %d names no partition", i)
		}
		for _, tp := range m.GetPartitions() {
			res := &storagev1.TxnMarkerResult{ProducerId: m.GetProducerId(), Partition: tp}
			out.Results = append(out.Results, res)
			done, e := r.writeMarker(ctx, m, tp.GetTopic(), tp.GetPartition())
			if e != nil {
				res.Error = e.Proto()
				continue
			}
			waits = append(waits, wait{res: res, done: done})
		}
	}
	for _, w := range waits {
		if e := await(ctx, w.done); e != nil {
			w.res.Error = e.Proto()
		}
	}
	return out, nil
}

// writeMarker starts writing marker m to partition pid of the offsets
// topic, once the producer's TxnOffsetCommit writes in flight there have
// settled, and returns the channel of its outcome.
func (r *GroupCoordinator) writeMarker(ctx context.Context, m *storagev1.TxnMarker, topic string, pid int32) (<-chan *errs.Error, *errs.Error) {
	if topic != OffsetsTopic {
		return nil, errs.Invalid(errs.InvalidRequest, "markers", "the group coordinator writes markers only to %s, not to %s", OffsetsTopic, topic)
	}
	img := r.deps.Metadata.Load()
	if t, ok := img.Topics[OffsetsTopic]; !ok || pid < 0 || int(pid) >= len(t.Partitions) {
		return nil, errs.New(errs.UnknownTopicOrPartition, "%s has no partition %d", OffsetsTopic, pid)
	}
	r.mu.Lock()
	s := r.shards[pid]
	r.mu.Unlock()
	if s == nil {
		return nil, coordinator.NotLoaded(img, OffsetsTopic, groupCoordinatorRole, int32(r.deps.Node.ID), "", "transaction markers", pid)
	}
	producer, epoch := m.GetProducerId(), int16(m.GetProducerEpoch())
	for {
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			return nil, errs.New(errs.NotCoordinator, "this node stopped coordinating %s-%d", OffsetsTopic, pid)
		}
		if !s.loaded {
			s.mu.Unlock()
			return nil, errs.New(errs.CoordinatorLoadInProgress, "the coordinator is replaying %s-%d", OffsetsTopic, pid)
		}
		t := s.txns[producer]
		if t != nil && t.epoch > epoch {
			s.mu.Unlock()
			return nil, errs.New(errs.InvalidProducerEpoch, "%s-%d: marker for producer %d has epoch %d, older than its open transaction's %d",
				OffsetsTopic, pid, producer, epoch, t.epoch)
		}
		if t == nil || t.inflight == 0 {
			// The transaction's outcome is decided once a marker is sent
			// (the transaction coordinator retries it until written), so
			// a TxnOffsetCommit of it that comes now is late from here on.
			s.markEndedLocked(producer, epoch)
			commit := m.GetCommitted()
			done := s.writer.WriteMarkerLocked(producer, epoch, commit, m.GetCoordinatorEpoch(), func(base int64) {
				s.endTxnLocked(producer, epoch, commit, base)
			}, nil)
			s.mu.Unlock()
			return done, nil
		}
		if t.idle == nil {
			t.idle = make(chan struct{})
		}
		idle := t.idle
		s.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return nil, errs.New(errs.RequestTimedOut, "%s-%d: offsets of producer %d were still being written when the call ended", OffsetsTopic, pid, producer)
		}
	}
}

// logTxnStateLocked logs the transactions a loaded shard holds open.
func (s *shard) logTxnStateLocked() {
	if len(s.txns) == 0 {
		return
	}
	s.c.logger.Info("group coordinator shard holds offsets of open transactions", log.TopicPartition(OffsetsTopic, s.id), slog.Int("producers", len(s.txns)))
}
