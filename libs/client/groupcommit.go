package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// maybeAutoCommit commits, in the background, what previous Polls returned
// once AutoCommitInterval has passed since the last automatic commit.
func (g *GroupConsumer) maybeAutoCommit() {
	if !g.cfg.AutoCommit || time.Since(g.lastAutoCommit) < g.cfg.AutoCommitInterval {
		return
	}
	g.lastAutoCommit = time.Now()
	offsets := g.due(false)
	if len(offsets) == 0 {
		return
	}
	g.enqueueCommit(commitJob{offsets: offsets, done: func(err error) {
		if err != nil {
			g.logWarn("automatic commit failed", err)
		}
	}})
}

// due returns the positions to commit: every known position with all, or
// only those that moved since their last commit.
func (g *GroupConsumer) due(all bool) map[TopicPartition]committedOffset {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.book.due(all, g.k.Position)
}

// commitDue commits, synchronously, the positions that moved.
func (g *GroupConsumer) commitDue(ctx context.Context) error {
	g.flushCommits(ctx)
	offsets := g.due(false)
	if len(offsets) == 0 {
		return nil
	}
	return g.commit(ctx, offsets)
}

// flushCommits waits until the asynchronous commits queued so far are
// answered. A synchronous commit waits for them first: an older
// asynchronous commit answered after it would move the committed offsets
// back, and a partition's next owner would read records again.
func (g *GroupConsumer) flushCommits(ctx context.Context) {
	flushed := make(chan struct{})
	select {
	case g.commits <- commitJob{done: func(error) { close(flushed) }}:
		select {
		case <-flushed:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	case <-g.life.Done():
	}
}

// CommitSync commits offsets (the next offset to read, per partition) and
// waits for the answer. With nil it commits the positions after every
// record Poll has returned, for every owned partition.
func (g *GroupConsumer) CommitSync(ctx context.Context, offsets map[TopicPartition]int64) error {
	var req map[TopicPartition]committedOffset
	if offsets == nil {
		req = g.due(true)
	} else {
		req = explicitOffsets(offsets)
	}
	if len(req) == 0 {
		return nil
	}
	g.flushCommits(ctx)
	return g.commit(ctx, req)
}

// CommitAsync commits offsets (nil: what Poll returned so far) in the
// background, after earlier asynchronous commits, and calls done (if not
// nil) with the outcome. done runs on the goroutine that sends commits, so
// it must not call CommitSync or Close.
func (g *GroupConsumer) CommitAsync(offsets map[TopicPartition]int64, done func(error)) {
	var req map[TopicPartition]committedOffset
	if offsets == nil {
		req = g.due(true)
	} else {
		req = explicitOffsets(offsets)
	}
	if len(req) == 0 {
		if done != nil {
			done(nil)
		}
		return
	}
	g.enqueueCommit(commitJob{offsets: req, done: done})
}

func explicitOffsets(offsets map[TopicPartition]int64) map[TopicPartition]committedOffset {
	out := make(map[TopicPartition]committedOffset, len(offsets))
	for tp, o := range offsets {
		out[tp] = committedOffset{offset: o, epoch: -1}
	}
	return out
}

func (g *GroupConsumer) enqueueCommit(j commitJob) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		if j.done != nil {
			j.done(errors.New("group consumer is closed"))
		}
		return
	}
	select {
	case g.commits <- j:
	case <-g.life.Done():
		if j.done != nil {
			j.done(g.life.Err())
		}
	}
}

// runCommits sends asynchronous commits one at a time, in order.
func (g *GroupConsumer) runCommits() {
	defer close(g.commitsDone)
	for {
		select {
		case j := <-g.commits:
			var err error
			if len(j.offsets) > 0 {
				err = g.commit(g.life, j.offsets)
			}
			if j.done != nil {
				j.done(err)
			}
		case <-g.life.Done():
			// Drain what was queued before Close stopped the loop.
			for {
				select {
				case j := <-g.commits:
					if j.done != nil {
						j.done(errors.New("group consumer closed before the commit was sent"))
					}
				default:
					return
				}
			}
		}
	}
}

// commit sends one OffsetCommit fenced by the member's generation or epoch
// and records what was committed. Group-level errors come in every
// partition's result; one that says the membership is stale makes the
// member rejoin.
func (g *GroupConsumer) commit(ctx context.Context, offsets map[TopicPartition]committedOffset) error {
	var b backoff
	for {
		stale, err := g.commitOnce(ctx, offsets)
		if len(stale) == 0 {
			return err
		}
		// STALE_MEMBER_EPOCH (consumer protocol): the member's epoch moved
		// on and the heartbeat answer that carries it is on its way; Kafka's
		// consumer retries such a commit with the new epoch.
		if !b.wait(ctx) {
			return err
		}
		offsets = stale
	}
}

// commitOnce sends one OffsetCommit. When every failed partition failed
// with STALE_MEMBER_EPOCH, it returns them for a retry.
func (g *GroupConsumer) commitOnce(ctx context.Context, offsets map[TopicPartition]committedOffset) (map[TopicPartition]committedOffset, error) {
	memberID, instanceID, epoch := g.member.fence()
	req := &groupv1.OffsetCommitRequest{GroupId: g.cfg.GroupID, GenerationIdOrMemberEpoch: epoch,
		MemberId: memberID, GroupInstanceId: instanceID}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sortTPs(tps)
	for _, tp := range tps {
		o := offsets[tp]
		p := &groupv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: o.offset}
		if o.epoch >= 0 {
			e := o.epoch
			p.LeaderEpoch = &e
		}
		req.Partitions = append(req.Partitions, p)
	}
	var resp *groupv1.OffsetCommitResponse
	err := g.c.onGroupCoordinator(ctx, g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		r, err := gc.OffsetCommit(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = r
		// A coordinator move shows in the partitions' results: hand it
		// over so the call is retried on the new coordinator.
		for _, res := range r.GetResults() {
			if e := res.GetError(); e != nil && coordinatorMoved(e.GetCode()) {
				return e, nil
			}
		}
		return nil, nil
	})
	if err != nil {
		g.member.fenced(errs.CodeOf(err), epoch)
		return nil, fmt.Errorf("committing offsets of group %q: %w", g.cfg.GroupID, err)
	}
	var failed []error
	ok := map[TopicPartition]committedOffset{}
	stale := map[TopicPartition]committedOffset{}
	for _, res := range resp.GetResults() {
		tp := TopicPartition{res.GetTopic(), res.GetPartition()}
		if e := errs.FromProto(res.GetError()); e != nil {
			g.member.fenced(e.Code, epoch)
			failed = append(failed, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, e))
			if o, found := offsets[tp]; found && e.Code == errs.StaleMemberEpoch {
				stale[tp] = o
			}
			continue
		}
		if o, found := offsets[tp]; found {
			ok[tp] = o
		}
	}
	g.mu.Lock()
	g.book.committed(ok)
	g.mu.Unlock()
	if len(failed) == 0 {
		return nil, nil
	}
	err = fmt.Errorf("committing offsets of group %q: %w", g.cfg.GroupID, firstSame(failed))
	if len(stale) < len(failed) {
		return nil, err // something a retry cannot cure
	}
	return stale, err
}

// firstSame returns the only error when every partition failed alike (a
// group-level error), or all of them joined.
func firstSame(list []error) error {
	first := errs.CodeOf(list[0])
	for _, e := range list[1:] {
		if errs.CodeOf(e) != first {
			return errors.Join(list...)
		}
	}
	if len(list) == 1 {
		return list[0]
	}
	return fmt.Errorf("%d partitions: %w", len(list), list[0])
}

// coordinatorMoved says whether a code means "ask another coordinator".
func coordinatorMoved(c errs.Code) bool {
	return c == errs.NotCoordinator || c == errs.CoordinatorNotAvailable || c == errs.CoordinatorLoadInProgress
}

// fetchCommitted returns the group's committed offsets of tps (absent:
// nothing committed). Partitions with a pending transactional commit are
// retried until it settles.
func (g *GroupConsumer) fetchCommitted(ctx context.Context, tps []TopicPartition) (map[TopicPartition]committedOffset, error) {
	// A read_committed consumer asks for stable offsets (require_stable,
	// as Kafka's consumer does): a partition whose offset a transaction
	// is about to commit answers UNSTABLE_OFFSET_COMMIT until it ended, so
	// a new owner does not start before that offset and read again what
	// the transaction consumed.
	req := &groupv1.OffsetFetchRequest{GroupId: g.cfg.GroupID, MemberEpoch: -1, RequireStable: g.cfg.Consumer.ReadCommitted}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	var b backoff
	for {
		if memberID, _, epoch := g.member.fence(); g.cfg.Protocol == GroupProtocolConsumer && memberID != "" {
			req.MemberId, req.MemberEpoch = memberID, epoch
		}
		var resp *groupv1.OffsetFetchResponse
		err := g.c.onGroupCoordinator(ctx, g.cfg.GroupID, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
			r, err := gc.OffsetFetch(ctx, req)
			if err != nil {
				return nil, err
			}
			resp = r
			return r.GetError(), nil
		})
		if errs.Is(err, errs.StaleMemberEpoch) && b.wait(ctx) {
			continue // the heartbeat answer with the new epoch is on its way
		}
		if err != nil {
			// A consumer-protocol member fenced meanwhile rejoins.
			g.member.fenced(errs.CodeOf(err), req.MemberEpoch)
			return nil, fmt.Errorf("fetching committed offsets of group %q: %w", g.cfg.GroupID, err)
		}
		out := map[TopicPartition]committedOffset{}
		unstable := false
		var failed error
		for _, p := range resp.GetPartitions() {
			tp := TopicPartition{p.GetTopic(), p.GetPartition()}
			if e := errs.FromProto(p.GetError()); e != nil {
				if e.Code == errs.UnstableOffsetCommit {
					unstable = true
				} else if failed == nil {
					failed = fmt.Errorf("committed offset of %s-%d: %w", tp.Topic, tp.Partition, e)
				}
				continue
			}
			if p.GetOffset() >= 0 {
				out[tp] = committedOffset{offset: p.GetOffset(), epoch: p.GetLeaderEpoch()}
			}
		}
		if failed != nil {
			return nil, failed
		}
		if !unstable {
			return out, nil
		}
		if !b.wait(ctx) {
			return nil, fmt.Errorf("committed offsets of group %q stayed unstable (a transaction is pending): %w", g.cfg.GroupID, ctx.Err())
		}
	}
}
