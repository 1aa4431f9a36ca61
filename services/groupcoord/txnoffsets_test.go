package groupcoord

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/service"
)

// txnHarness is a coordinator with one loaded shard (the offsets topic has
// one partition) on an in-memory log, and a topic "t" of 4 partitions.
type txnHarness struct {
	t   *testing.T
	c   *GroupCoordinator
	log *coordinator.MemLog
	ctx context.Context
	// verify answers the coordinator's question to the transaction
	// coordinator (is the offsets partition in the producer's open
	// transaction?); nil answers as a coordinator that bumps the epoch per
	// transaction: no transaction at or below an epoch a marker ended.
	verify func(pid int64, epoch int16) error
	// ended is the epoch of each producer's last marker.
	ended map[int64]int16
	// verified counts the questions asked.
	verified int
}

func newTxnHarness(t *testing.T) *txnHarness {
	img := metadata.Empty()
	img.Revision = 1
	img.Topics["t"] = &metadata.Topic{Name: "t"}
	for p := int32(0); p < 4; p++ {
		img.Topics["t"].Partitions = append(img.Topics["t"].Partitions, &commonv1.PartitionState{Topic: "t", Partition: p})
	}
	img.Topics[OffsetsTopic] = &metadata.Topic{Name: OffsetsTopic, Internal: true,
		Partitions: []*commonv1.PartitionState{{Topic: OffsetsTopic, Partition: 0, LeaderId: 1}}}
	cache := metadata.NewCache()
	cache.Reset(img)
	c := &GroupCoordinator{now: time.Now, logger: log.Discard(), shards: map[int32]*shard{},
		deps: service.Deps{Metadata: cache, Node: config.Node{ID: 1}},
		cfg: Config{ConsumerSessionTimeout: time.Minute, ConsumerHeartbeatInterval: time.Second, OffsetMetadataMaxBytes: 16,
			RetentionCheckInterval: time.Minute, OffsetsRetention: time.Hour}}
	c.m = newMetrics(noopMeter(), c)
	c.tracer = noopTracer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h := &txnHarness{t: t, c: c, log: &coordinator.MemLog{}, ctx: ctx, ended: map[int64]int16{}}
	c.verifyTxn = func(_ context.Context, _ string, pid int64, epoch int16, tp *commonv1.TopicPartition) (error, bool) {
		require.Equal(t, OffsetsTopic, tp.GetTopic())
		h.verified++
		if h.verify != nil {
			return h.verify(pid, epoch), false
		}
		if e, ok := h.ended[pid]; ok && epoch <= e {
			return errs.New(errs.InvalidTxnState, "producer %d epoch %d has no open transaction", pid, epoch), false
		}
		return nil, false
	}
	h.reload()
	return h
}

// reload replaces the shard with a new one that replays the log, as a
// coordinator taking the partition over does.
func (h *txnHarness) reload() {
	if old := h.c.shards[0]; old != nil {
		old.unload()
	}
	s := newShard(h.c, 0, h.log)
	s.load()
	require.True(h.t, s.isLoaded())
	h.c.shards[0] = s
	h.t.Cleanup(s.cancel)
}

func (h *txnHarness) shard() *shard { return h.c.shards[0] }

func txnReq(pid int64, epoch int32, group string, offsets map[int32]int64) *groupv1.TxnOffsetCommitRequest {
	req := &groupv1.TxnOffsetCommitRequest{TransactionalId: "tx", GroupId: group, ProducerId: pid, ProducerEpoch: epoch, GenerationIdOrMemberEpoch: -1}
	for p := int32(0); p < 4; p++ {
		if off, ok := offsets[p]; ok {
			req.Partitions = append(req.Partitions, &groupv1.OffsetCommitPartition{Topic: "t", Partition: p, Offset: off})
		}
	}
	return req
}

// commit sends a TxnOffsetCommit and returns each partition's error code
// (0 for none).
func (h *txnHarness) commit(req *groupv1.TxnOffsetCommitRequest) []errs.Code {
	h.t.Helper()
	resp, err := h.c.TxnOffsetCommit(h.ctx, req)
	require.NoError(h.t, err)
	require.Len(h.t, resp.GetResults(), len(req.GetPartitions()))
	var out []errs.Code
	for _, r := range resp.GetResults() {
		out = append(out, codeOf(r.GetError()))
	}
	return out
}

func codeOf(e *edpb.Error) errs.Code {
	if e == nil {
		return 0
	}
	return errs.Code(e.GetCode())
}

// marker ends producer pid's transaction on partition 0 of the offsets
// topic and returns the partition's error code.
func (h *txnHarness) marker(pid int64, epoch int32, commit bool) errs.Code {
	h.t.Helper()
	h.ended[pid] = int16(epoch)
	resp, err := h.c.WriteTxnOffsetMarkers(h.ctx, &groupv1.WriteTxnOffsetMarkersRequest{Markers: []*storagev1.TxnMarker{{
		ProducerId: pid, ProducerEpoch: epoch, Committed: commit, CoordinatorEpoch: 1,
		Partitions: []*commonv1.TopicPartition{{Topic: OffsetsTopic, Partition: 0}},
	}}})
	require.NoError(h.t, err)
	require.Len(h.t, resp.GetResults(), 1)
	return codeOf(resp.GetResults()[0].GetError())
}

// fetch returns group's offset of t-p, or the partition's error code.
func (h *txnHarness) fetch(group string, p int32, stable bool) (int64, errs.Code) {
	h.t.Helper()
	resp, err := h.c.OffsetFetch(h.ctx, &groupv1.OffsetFetchRequest{GroupId: group, RequireStable: stable, MemberEpoch: -1,
		Partitions: []*commonv1.TopicPartition{{Topic: "t", Partition: p}}})
	require.NoError(h.t, err)
	require.Nil(h.t, resp.GetError())
	require.Len(h.t, resp.GetPartitions(), 1)
	return resp.GetPartitions()[0].GetOffset(), codeOf(resp.GetPartitions()[0].GetError())
}

func TestTxnOffsetsBecomeVisibleOnCommitMarker(t *testing.T) {
	h := newTxnHarness(t)
	require.Equal(t, []errs.Code{0, 0}, h.commit(txnReq(7, 3, "g", map[int32]int64{0: 42, 1: 17})))

	off, code := h.fetch("g", 0, false)
	require.Equal(t, int64(-1), off, "a pending offset is not visible")
	require.Zero(t, code)
	_, code = h.fetch("g", 0, true)
	require.Equal(t, errs.UnstableOffsetCommit, code)
	_, code = h.fetch("g", 2, true)
	require.Zero(t, code, "a partition without pending offsets is stable")

	// The offsets went to the log as a transactional batch of the producer.
	recs := h.log.Records()
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.True(t, r.Transactional)
		require.False(t, r.Control)
		require.Equal(t, int64(7), r.ProducerID)
		require.Equal(t, int16(3), r.ProducerEpoch)
	}

	require.Zero(t, h.marker(7, 3, true))
	recs = h.log.Records()
	require.Len(t, recs, 3)
	require.True(t, recs[2].Control, "the marker is a control batch in the group's partition")
	for p, want := range map[int32]int64{0: 42, 1: 17} {
		off, code := h.fetch("g", p, true)
		require.Zero(t, code)
		require.Equal(t, want, off)
	}
	require.Empty(t, h.shard().txns)
}

func TestTxnOffsetsDroppedOnAbortMarker(t *testing.T) {
	h := newTxnHarness(t)
	resp, err := h.c.OffsetCommit(h.ctx, &groupv1.OffsetCommitRequest{GroupId: "g", GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 10}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())

	require.Equal(t, []errs.Code{0}, h.commit(txnReq(7, 0, "g", map[int32]int64{0: 42})))
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(8, 0, "only-pending", map[int32]int64{0: 5})))
	off, code := h.fetch("g", 0, false)
	require.Zero(t, code)
	require.Equal(t, int64(10), off, "without require_stable the last committed offset is returned")

	require.Zero(t, h.marker(7, 0, false))
	require.Zero(t, h.marker(8, 0, false))
	off, code = h.fetch("g", 0, true)
	require.Zero(t, code)
	require.Equal(t, int64(10), off, "the aborted offset is dropped")
	h.shard().mu.Lock()
	require.NotContains(t, h.shard().groups, "only-pending", "a group made only of aborted offsets is gone")
	h.shard().mu.Unlock()

	// A marker for a producer with nothing pending is written all the
	// same: it ends the producer's transaction on the log.
	n := len(h.log.Records())
	require.Zero(t, h.marker(9, 0, true))
	require.Len(t, h.log.Records(), n+1)
}

// A commit written after the transactional one, before its marker, is
// newer in the log and stays (Kafka's rule).
func TestPlainCommitAfterTxnOffsetWins(t *testing.T) {
	h := newTxnHarness(t)
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(7, 0, "g", map[int32]int64{0: 42})))
	resp, err := h.c.OffsetCommit(h.ctx, &groupv1.OffsetCommitRequest{GroupId: "g", GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: "t", Partition: 0, Offset: 50}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Zero(t, h.marker(7, 0, true))
	off, _ := h.fetch("g", 0, true)
	require.Equal(t, int64(50), off)
}

func TestTxnOffsetCommitFencedLikeOffsetCommit(t *testing.T) {
	h := newTxnHarness(t)
	// A classic group at generation 4 with member m1 (static i1).
	v := kmsg.NewGroupMetadataValue()
	v.ProtocolType, v.Generation = "consumer", 4
	v.Protocol, v.Leader = kmsg.StringPtr("range"), kmsg.StringPtr("m1")
	m := kmsg.NewGroupMetadataValueMember()
	m.MemberID, m.InstanceID, m.SessionTimeoutMillis, m.RebalanceTimeoutMillis = "m1", kmsg.StringPtr("i1"), 10000, 60000
	v.Members = append(v.Members, m)
	s := h.shard()
	s.mu.Lock()
	require.NoError(t, s.applyRecordLocked(groupKey("classic"), groupValue(&v), 0))
	s.mu.Unlock()

	req := func(gen int32, member, instance string) *groupv1.TxnOffsetCommitRequest {
		r := txnReq(7, 0, "classic", map[int32]int64{0: 1})
		r.GenerationIdOrMemberEpoch, r.MemberId, r.GroupInstanceId = gen, member, instance
		return r
	}
	for _, c := range []struct {
		name string
		req  *groupv1.TxnOffsetCommitRequest
		want errs.Code
	}{
		{"stale generation", req(3, "m1", ""), errs.IllegalGeneration},
		{"newer generation", req(5, "m1", ""), errs.IllegalGeneration},
		{"unknown member", req(4, "m2", ""), errs.UnknownMemberID},
		{"instance held by another member", req(4, "m2", "i1"), errs.FencedInstanceID},
		{"current generation", req(4, "m1", "i1"), 0},
		// KIP-447's producers pass the consumer's metadata; one that does
		// not (generation -1, no member) is not checked, as in Kafka.
		{"no member metadata", req(-1, "", ""), 0},
	} {
		require.Equal(t, []errs.Code{c.want}, h.commit(c.req), c.name)
	}
	other := txnReq(8, 0, "no-such-group", map[int32]int64{0: 1})
	other.GenerationIdOrMemberEpoch, other.MemberId = 2, "m"
	require.Equal(t, []errs.Code{errs.IllegalGeneration}, h.commit(other), "a generation for a group that does not exist")

	// A consumer-protocol member at its epoch commits; a newer epoch is
	// fenced, an unknown member refused.
	hb, err := h.c.ConsumerGroupHeartbeat(h.ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "cons", MemberId: "a", MemberEpoch: 0,
		RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	require.Nil(t, hb.GetError())
	epoch := hb.GetMemberEpoch()
	creq := func(e int32, member string) *groupv1.TxnOffsetCommitRequest {
		r := txnReq(9, 0, "cons", map[int32]int64{0: 1})
		r.GenerationIdOrMemberEpoch, r.MemberId = e, member
		return r
	}
	require.Equal(t, []errs.Code{errs.FencedMemberEpoch}, h.commit(creq(epoch+1, "a")))
	require.Equal(t, []errs.Code{errs.UnknownMemberID}, h.commit(creq(epoch, "b")))
	require.Equal(t, []errs.Code{0}, h.commit(creq(epoch, "a")))
}

// A consumer-protocol member committing with an older epoch passes only for
// partitions it owned since that epoch (KIP-1251), as in OffsetCommit.
func TestTxnOffsetCommitStaleMemberEpoch(t *testing.T) {
	h := newTxnHarness(t)
	join := func(id string, epoch int32, owned []*groupv1.TopicPartitions) *groupv1.ConsumerGroupHeartbeatResponse {
		hb, err := h.c.ConsumerGroupHeartbeat(h.ctx, &groupv1.ConsumerGroupHeartbeatRequest{GroupId: "cons", MemberId: id, MemberEpoch: epoch,
			RebalanceTimeoutMs: 60000, SubscribedTopicNames: []string{"t"}, OwnedPartitions: owned})
		require.NoError(t, err)
		require.Nil(t, hb.GetError())
		return hb
	}
	a := join("a", 0, nil)
	first := a.GetMemberEpoch()
	b := join("b", 0, nil)
	_ = b
	// a gives up half of its partitions and moves to a new epoch.
	a2 := join("a", first, owned(a.GetAssignment()))
	kept := a2.GetAssignment()
	a3 := join("a", a2.GetMemberEpoch(), owned(kept))
	require.Greater(t, a3.GetMemberEpoch(), first, "a moved to a newer epoch")
	keptParts := map[int32]bool{}
	for _, p := range owned(kept)[0].GetPartitions() {
		keptParts[p] = true
	}
	require.Len(t, keptParts, 2)
	req := txnReq(7, 0, "cons", map[int32]int64{0: 1, 1: 1, 2: 1, 3: 1})
	req.GenerationIdOrMemberEpoch, req.MemberId = first, "a"
	got := h.commit(req)
	for p, code := range got {
		if keptParts[int32(p)] {
			require.Zero(t, code, "t-%d is still a's", p)
		} else {
			require.Equal(t, errs.StaleMemberEpoch, code, "t-%d moved away from a", p)
		}
	}
}

func TestTxnOffsetsSurviveReplay(t *testing.T) {
	h := newTxnHarness(t)
	resp, err := h.c.OffsetCommit(h.ctx, &groupv1.OffsetCommitRequest{GroupId: "g", GenerationIdOrMemberEpoch: -1,
		Partitions: []*groupv1.OffsetCommitPartition{{Topic: "t", Partition: 3, Offset: 3}}})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 0, "g", map[int32]int64{0: 5})))
	require.Zero(t, h.marker(1, 0, true))
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(2, 0, "g", map[int32]int64{1: 9})))
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(3, 0, "g", map[int32]int64{2: 11})))
	require.Zero(t, h.marker(3, 0, false))
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(4, 2, "h", map[int32]int64{0: 8})))

	snapshot := func() (map[string]map[topicPartition]int64, map[int64]map[string]map[topicPartition]int64) {
		s := h.shard()
		s.mu.Lock()
		defer s.mu.Unlock()
		committed := map[string]map[topicPartition]int64{}
		for id, g := range s.groups {
			committed[id] = map[topicPartition]int64{}
			for tp, c := range g.offsets {
				committed[id][tp] = c.offset
			}
		}
		pending := map[int64]map[string]map[topicPartition]int64{}
		for pid, t := range s.txns {
			pending[pid] = map[string]map[topicPartition]int64{}
			for gid, byTP := range t.offsets {
				pending[pid][gid] = map[topicPartition]int64{}
				for tp, c := range byTP {
					pending[pid][gid][tp] = c.offset
				}
			}
		}
		return committed, pending
	}
	committed, pending := snapshot()
	require.Equal(t, map[string]map[topicPartition]int64{"g": {{"t", 3}: 3, {"t", 0}: 5}, "h": {}}, committed)
	require.Equal(t, map[int64]map[string]map[topicPartition]int64{2: {"g": {{"t", 1}: 9}}, 4: {"h": {{"t", 0}: 8}}}, pending)

	h.reload()
	committed2, pending2 := snapshot()
	require.Equal(t, committed, committed2, "committed offsets after replay")
	require.Equal(t, pending, pending2, "pending offsets after replay")
	_, code := h.fetch("g", 1, true)
	require.Equal(t, errs.UnstableOffsetCommit, code)
	require.Equal(t, int16(2), h.shard().txns[4].epoch)

	// The new coordinator ends what the old one held open, and still
	// refuses what the old one would have.
	require.Equal(t, []errs.Code{errs.InvalidTxnState}, h.commit(txnReq(1, 0, "g", map[int32]int64{0: 6})), "a late commit of an ended transaction")
	require.Equal(t, []errs.Code{errs.InvalidProducerEpoch}, h.commit(txnReq(4, 1, "h", map[int32]int64{0: 1})), "an older epoch")
	require.Zero(t, h.marker(2, 0, true))
	off, code := h.fetch("g", 1, true)
	require.Zero(t, code)
	require.Equal(t, int64(9), off)
}

func TestTxnOffsetCommitBadInput(t *testing.T) {
	h := newTxnHarness(t)
	for _, c := range []struct {
		name string
		req  *groupv1.TxnOffsetCommitRequest
	}{
		{"no partitions", txnReq(1, 0, "g", nil)},
		{"no transactional id", func() *groupv1.TxnOffsetCommitRequest {
			r := txnReq(1, 0, "g", map[int32]int64{0: 1})
			r.TransactionalId = ""
			return r
		}()},
		{"oversized transactional id", func() *groupv1.TxnOffsetCommitRequest {
			r := txnReq(1, 0, "g", map[int32]int64{0: 1})
			r.TransactionalId = strings.Repeat("x", coordinator.MaxTransactionalIDBytes+1)
			return r
		}()},
		{"negative producer id", txnReq(-1, 0, "g", map[int32]int64{0: 1})},
		{"negative epoch", txnReq(1, -1, "g", map[int32]int64{0: 1})},
		{"epoch out of range", txnReq(1, 40000, "g", map[int32]int64{0: 1})},
	} {
		_, err := h.c.TxnOffsetCommit(h.ctx, c.req)
		require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), c.name)
	}
	resp, err := h.c.TxnOffsetCommit(h.ctx, txnReq(1, 0, "", map[int32]int64{0: 1}))
	require.NoError(t, err)
	require.Equal(t, errs.InvalidGroupID, codeOf(resp.GetResults()[0].GetError()))

	req := txnReq(1, 0, "g", map[int32]int64{0: -5, 1: 1, 2: 2})
	req.Partitions[1].Metadata = strings.Repeat("m", 17)
	req.Partitions = append(req.Partitions, &groupv1.OffsetCommitPartition{Topic: "nope", Partition: 0, Offset: 1},
		&groupv1.OffsetCommitPartition{Topic: "t", Partition: 9, Offset: 1})
	require.Equal(t, []errs.Code{errs.InvalidRequest, errs.OffsetMetadataTooLarge, 0, errs.UnknownTopicOrPartition, errs.UnknownTopicOrPartition}, h.commit(req))
	require.Len(t, h.log.Records(), 1, "only the valid partition was written")

	// Producer epochs: an older one than the open transaction's is fenced;
	// a marker older than it too, and it writes nothing.
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 2, "g", map[int32]int64{0: 1})))
	require.Equal(t, []errs.Code{errs.InvalidProducerEpoch}, h.commit(txnReq(1, 1, "g", map[int32]int64{0: 1})))
	n := len(h.log.Records())
	require.Equal(t, errs.InvalidProducerEpoch, h.marker(1, 1, true))
	require.Len(t, h.log.Records(), n)
	require.Zero(t, h.marker(1, 2, false))
	require.Equal(t, []errs.Code{errs.InvalidTxnState}, h.commit(txnReq(1, 2, "g", map[int32]int64{0: 1})), "the transaction has ended")
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 3, "g", map[int32]int64{0: 1})), "the producer's next transaction")

	// Markers only for partitions of the offsets topic this node has.
	mresp, err := h.c.WriteTxnOffsetMarkers(h.ctx, &groupv1.WriteTxnOffsetMarkersRequest{Markers: []*storagev1.TxnMarker{{
		ProducerId: 1, ProducerEpoch: 3, Committed: true,
		Partitions: []*commonv1.TopicPartition{{Topic: "t", Partition: 0}, {Topic: OffsetsTopic, Partition: 5}},
	}}})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidRequest, codeOf(mresp.GetResults()[0].GetError()))
	require.Equal(t, errs.UnknownTopicOrPartition, codeOf(mresp.GetResults()[1].GetError()))
	_, err = h.c.WriteTxnOffsetMarkers(h.ctx, &groupv1.WriteTxnOffsetMarkersRequest{Markers: []*storagev1.TxnMarker{{ProducerId: 1, ProducerEpoch: 3}}})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "a marker without partitions")
}

func TestGroupWithPendingTxnOffsetsIsNotDeleted(t *testing.T) {
	h := newTxnHarness(t)
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(7, 0, "g", map[int32]int64{0: 42})))
	del := func() errs.Code {
		resp, err := h.c.DeleteGroups(h.ctx, &groupv1.DeleteGroupsRequest{GroupIds: []string{"g"}})
		require.NoError(t, err)
		return codeOf(resp.GetResults()[0].GetError())
	}
	require.Equal(t, errs.NonEmptyGroup, del())

	// Expiry passes over it too, however old its offsets.
	s := h.shard()
	s.mu.Lock()
	s.expireOffsetsLocked(time.Now().Add(24 * time.Hour))
	s.mu.Unlock()
	require.Zero(t, h.marker(7, 0, true))
	off, _ := h.fetch("g", 0, true)
	require.Equal(t, int64(42), off)
	require.Zero(t, del(), "deleted once the transaction ended")
	off, _ = h.fetch("g", 0, false)
	require.Equal(t, int64(-1), off)
}

// A marker waits for the producer's TxnOffsetCommit still being written, so
// it ends it instead of overtaking it.
func TestMarkerWaitsForTxnOffsetsInFlight(t *testing.T) {
	h := newTxnHarness(t)
	s := h.shard()
	s.mu.Lock()
	s.txnLocked(7, 0).inflight++ // a write of the producer not acknowledged yet
	s.mu.Unlock()
	done := make(chan errs.Code, 1)
	go func() { done <- h.marker(7, 0, true) }()
	select {
	case c := <-done:
		t.Fatalf("the marker was written while an offset write was in flight (code %v)", c)
	case <-time.After(200 * time.Millisecond):
	}
	require.Empty(t, h.log.Records())
	s.mu.Lock()
	s.settleTxnWriteLocked(7, s.txns[7])
	s.mu.Unlock()
	select {
	case c := <-done:
		require.Zero(t, c)
	case <-h.ctx.Done():
		t.Fatal("the marker was not written once the write settled")
	}
	require.Len(t, h.log.Records(), 1)
}

// Acknowledgements can be applied out of log order: a marker ends only the
// offsets written before it, and those of the producer's next transaction,
// applied first, stay pending.
func TestMarkerEndsOnlyOffsetsBeforeIt(t *testing.T) {
	h := newTxnHarness(t)
	s := h.shard()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NoError(t, s.applyTxnRecordLocked(7, 0, offsetKey("g", "t", 0), offsetValue(committedOffset{offset: 1, leaderEpoch: -1}), 10))
	require.NoError(t, s.applyTxnRecordLocked(7, 1, offsetKey("g", "t", 1), offsetValue(committedOffset{offset: 2, leaderEpoch: -1}), 12))
	s.endTxnLocked(7, 0, true, 11)
	require.Equal(t, int64(1), s.groups["g"].offsets[topicPartition{"t", 0}].offset)
	require.NotContains(t, s.groups["g"].offsets, topicPartition{"t", 1})
	require.True(t, s.pendingLocked("g", topicPartition{"t", 1}), "the next transaction's offset is still pending")
	require.False(t, s.pendingLocked("g", topicPartition{"t", 0}))
}

// KIP-890 for offsets: a producer's offsets open its transaction here only
// once its transaction coordinator confirms the offsets partition is in it,
// asked once per transaction; the coordinator's refusal is the answer; a
// marker written while the question is out withdraws the confirmation.
func TestTxnOffsetCommitIsConfirmedWithTheTransactionCoordinator(t *testing.T) {
	h := newTxnHarness(t)
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 0, "g", map[int32]int64{0: 10})))
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 0, "g", map[int32]int64{1: 11})))
	require.Equal(t, 1, h.verified, "asked once per transaction")

	// Offsets never added to the transaction (no AddOffsetsToTxn).
	h.verify = func(int64, int16) error {
		return errs.New(errs.InvalidTxnState, "the offsets partition is not in the transaction")
	}
	require.Equal(t, []errs.Code{errs.InvalidTxnState}, h.commit(txnReq(2, 0, "g", map[int32]int64{0: 20})))
	_, open := h.shard().txns[2]
	require.False(t, open, "a refused commit opened a transaction")

	// A producer whose EndTxn does not bump the epoch (Kafka's EndTxn below
	// v5) runs its next transaction at the same epoch: after the marker
	// the coordinator confirms the new transaction and the commit goes in.
	h.verify = nil
	require.Equal(t, errs.Code(0), h.marker(1, 0, true))
	h.verify = func(int64, int16) error { return nil }
	require.Equal(t, []errs.Code{0}, h.commit(txnReq(1, 0, "g", map[int32]int64{0: 30})))
	require.Equal(t, errs.Code(0), h.marker(1, 0, true))
	off, code := h.fetch("g", 0, true)
	require.Zero(t, code)
	require.Equal(t, int64(30), off)

	// The coordinator says yes, but the transaction ended (its marker was
	// written here) before the answer came back: the late commit is
	// refused, not opened as a transaction no one ends.
	h.verify = func(pid int64, epoch int16) error {
		require.Equal(t, errs.Code(0), h.marker(pid, int32(epoch), false))
		return nil
	}
	require.Equal(t, []errs.Code{errs.InvalidTxnState}, h.commit(txnReq(1, 0, "g", map[int32]int64{0: 40})))
	_, open = h.shard().txns[1]
	require.False(t, open)
	off, _ = h.fetch("g", 0, true)
	require.Equal(t, int64(30), off)

	// Older epochs than an ended transaction's are refused without asking.
	h.verify = nil
	require.Equal(t, errs.Code(0), h.marker(5, 3, false))
	asked := h.verified
	require.Equal(t, []errs.Code{errs.InvalidTxnState}, h.commit(txnReq(5, 2, "g", map[int32]int64{0: 50})))
	require.Equal(t, asked, h.verified)
}
