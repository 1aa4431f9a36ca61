package groupcoord

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
)

// OffsetCommit stores consumed positions. A member's commit is fenced by its
// generation (classic) or member epoch (consumer protocol): a stale one
// changes nothing. Generation -1 with no member id commits for a group with
// no active members (standalone consumers, offset resets). Each partition
// is checked on its own; a bad one fails alone.
func (r *GroupCoordinator) OffsetCommit(ctx context.Context, req *groupv1.OffsetCommitRequest) (*groupv1.OffsetCommitResponse, error) {
	resp := &groupv1.OffsetCommitResponse{}
	for _, p := range req.GetPartitions() {
		resp.Results = append(resp.Results, &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	failAll := func(e *errs.Error) (*groupv1.OffsetCommitResponse, error) {
		for _, res := range resp.Results {
			res.Error = e.Proto()
		}
		return resp, nil
	}
	if len(req.GetPartitions()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "partitions", "nothing to commit: name at least one partition")
	}
	if err := r.check(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	denials := r.topicDenials(ctx, authz.Read, len(req.GetPartitions()), func(i int) string { return req.GetPartitions()[i].GetTopic() })
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return failAll(e)
	}
	img := r.deps.Metadata.Load()
	s.mu.Lock()
	g := s.groupLocked(req.GetGroupId(), false)
	partitionCheck, e := s.validateCommitLocked(g, req)
	if e != nil {
		s.mu.Unlock()
		return failAll(e)
	}
	recs, idx := r.commitRecords(img, req.GetGroupId(), req.GetPartitions(), denials, partitionCheck, resp.Results)
	if len(recs) == 0 {
		s.mu.Unlock()
		return resp, nil
	}
	done := s.writeLocked(recs, func(base int64) {
		for i, rec := range recs {
			_ = s.applyRecordLocked(rec.key, rec.value, base+int64(i)) // our own encoding: cannot fail to decode
		}
	}, nil)
	s.mu.Unlock()
	if e := await(ctx, done); e != nil {
		for _, i := range idx {
			resp.Results[i].Error = e.Proto()
		}
	}
	return resp, nil
}

// commitRecords checks each partition of a commit on its own (it exists,
// the offset is not negative, the metadata fits offset.metadata.max.bytes,
// partitionCheck passes), sets the error of those that fail in results,
// and returns the offset records of the others with their indexes.
func (r *GroupCoordinator) commitRecords(img *metadata.Image, groupID string, parts []*groupv1.OffsetCommitPartition, denials []error,
	partitionCheck func(string, int32) error, results []*groupv1.OffsetCommitResult) (recs []kv, idx []int) {
	now := r.now()
	for i, p := range parts {
		res := results[i]
		t, ok := img.Topics[p.GetTopic()]
		switch {
		case denied(denials, i) != nil:
			// Before the existence check: a caller without access learns
			// nothing about the topic.
			res.Error = errs.ItemError(denials[i])
		case !ok || p.GetPartition() < 0 || int(p.GetPartition()) >= len(t.Partitions):
			res.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q has no partition %d", p.GetTopic(), p.GetPartition()).Proto()
		case p.GetOffset() < 0:
			res.Error = errs.Invalid(errs.InvalidRequest, "offset", "offset %d for %s-%d is negative; commit the next offset to consume", p.GetOffset(), p.GetTopic(), p.GetPartition()).Proto()
		case len(p.GetMetadata()) > r.cfg.OffsetMetadataMaxBytes:
			res.Error = errs.New(errs.OffsetMetadataTooLarge, "metadata of %s-%d has %d bytes, more than offset.metadata.max.bytes=%d", p.GetTopic(), p.GetPartition(), len(p.GetMetadata()), r.cfg.OffsetMetadataMaxBytes).Proto()
		case partitionCheck != nil && partitionCheck(p.GetTopic(), p.GetPartition()) != nil:
			res.Error = errs.From(partitionCheck(p.GetTopic(), p.GetPartition())).Proto()
		default:
			epoch := int32(-1)
			if p.LeaderEpoch != nil {
				epoch = p.GetLeaderEpoch()
			}
			c := committedOffset{offset: p.GetOffset(), leaderEpoch: epoch, metadata: p.GetMetadata(), commitMs: now.UnixMilli()}
			recs = append(recs, kv{offsetKey(groupID, p.GetTopic(), p.GetPartition()), offsetValue(c)})
			idx = append(idx, i)
		}
	}
	return recs, idx
}

// validateCommitLocked applies Kafka's fencing rules to a commit. For a
// consumer-protocol member committing with an older epoch it returns a
// per-partition check instead (KIP-1251: partitions it still owns since
// that epoch pass, the others are stale).
func (s *shard) validateCommitLocked(g *group, req *groupv1.OffsetCommitRequest) (func(string, int32) error, *errs.Error) {
	gen, memberID := req.GetGenerationIdOrMemberEpoch(), req.GetMemberId()
	if g != nil && g.consumer != nil {
		if gen < 0 && memberID == "" && g.consumer.Empty() {
			return nil, nil
		}
		check, err := g.consumer.CommitValidator(memberID, gen)
		return check, errsFrom(err)
	}
	if g == nil || g.classic == nil || len(g.classic.members) == 0 {
		if gen < 0 {
			return nil, nil // a group with no members: simple commits are allowed
		}
		return nil, errs.New(errs.IllegalGeneration, "group %q has no active members, so generation %d is stale; commit with generation -1 and no member id, or join the group first", req.GetGroupId(), gen)
	}
	if gen < 0 && memberID == "" {
		return nil, errs.New(errs.UnknownMemberID, "group %q has active members; only they can commit (stop them first to reset offsets)", g.id)
	}
	if g.classic.state == stateCompletingRebalance {
		return nil, errs.New(errs.RebalanceInProgress, "group %q is completing a rebalance; commit after SyncGroup", g.id)
	}
	_, e := s.classicMemberLocked(g, memberID, req.GetGroupInstanceId(), gen)
	return nil, e
}

// errsFrom converts an error from the consumer-protocol state machine.
func errsFrom(err error) *errs.Error {
	if err == nil {
		return nil
	}
	return errs.From(err)
}

// OffsetFetch returns committed offsets.
func (r *GroupCoordinator) OffsetFetch(ctx context.Context, req *groupv1.OffsetFetchRequest) (*groupv1.OffsetFetchResponse, error) {
	if err := r.check(ctx, authz.Describe, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	denials := r.topicDenials(ctx, authz.Describe, len(req.GetPartitions()), func(i int) string { return req.GetPartitions()[i].GetTopic() })
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return &groupv1.OffsetFetchResponse{Error: e.Proto()}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(req.GetGroupId(), false)
	// Only the consumer protocol checks the fetching member, as in Kafka:
	// classic consumers (franz-go's among them) send their member id and
	// generation too, and a classic group or a group that does not exist
	// answers them without a check.
	if req.GetMemberId() != "" && req.GetMemberEpoch() >= 0 && g != nil && g.consumer != nil {
		if e := errsFrom(g.consumer.ValidateFetch(req.GetMemberId(), req.GetMemberEpoch())); e != nil {
			return &groupv1.OffsetFetchResponse{Error: e.Proto()}, nil
		}
	}
	resp := &groupv1.OffsetFetchResponse{}
	if len(req.GetPartitions()) == 0 {
		if g == nil {
			return resp, nil
		}
		// Every partition: those of topics the caller may not Describe
		// are left out, not refused (Kafka's rule).
		a := r.deps.Authorizer()
		for _, tp := range sortedTPs(g.offsets) {
			if a.Enabled() && !authz.Allowed(ctx, a, authz.Describe, authz.Topic, tp.topic) {
				continue
			}
			resp.Partitions = append(resp.Partitions, s.fetchedLocked(req, tp, g.offsets[tp], true))
		}
		return resp, nil
	}
	for i, p := range req.GetPartitions() {
		tp := topicPartition{p.GetTopic(), p.GetPartition()}
		if err := denied(denials, i); err != nil {
			resp.Partitions = append(resp.Partitions, &groupv1.OffsetFetchPartition{Topic: tp.topic, Partition: tp.partition, Offset: -1, LeaderEpoch: -1,
				Error: errs.ItemError(err)})
			continue
		}
		var c committedOffset
		ok := false
		if g != nil {
			c, ok = g.offsets[tp]
		}
		resp.Partitions = append(resp.Partitions, s.fetchedLocked(req, tp, c, ok))
	}
	return resp, nil
}

// fetchedLocked answers one partition of an OffsetFetch: with
// require_stable, UNSTABLE_OFFSET_COMMIT while a transaction holds an offset
// of it (Kafka's rule, KIP-447: the caller retries until the transaction
// ended); otherwise the committed offset, pending ones left out.
func (s *shard) fetchedLocked(req *groupv1.OffsetFetchRequest, tp topicPartition, c committedOffset, ok bool) *groupv1.OffsetFetchPartition {
	if req.GetRequireStable() && s.pendingLocked(req.GetGroupId(), tp) {
		return &groupv1.OffsetFetchPartition{Topic: tp.topic, Partition: tp.partition, Offset: -1, LeaderEpoch: -1,
			Error: errs.New(errs.UnstableOffsetCommit, "group %q has an offset of %s-%d in a transaction that has not ended; retry", req.GetGroupId(), tp.topic, tp.partition).Proto()}
	}
	return fetched(tp, c, ok)
}

func fetched(tp topicPartition, c committedOffset, ok bool) *groupv1.OffsetFetchPartition {
	if !ok {
		return &groupv1.OffsetFetchPartition{Topic: tp.topic, Partition: tp.partition, Offset: -1, LeaderEpoch: -1}
	}
	return &groupv1.OffsetFetchPartition{Topic: tp.topic, Partition: tp.partition, Offset: c.offset, LeaderEpoch: c.leaderEpoch, Metadata: c.metadata}
}

func sortedTPs(m map[topicPartition]committedOffset) []topicPartition {
	out := make([]topicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// OffsetDelete removes committed offsets of topics the group no longer
// consumes.
func (r *GroupCoordinator) OffsetDelete(ctx context.Context, req *groupv1.OffsetDeleteRequest) (*groupv1.OffsetDeleteResponse, error) {
	if err := r.check(ctx, authz.Delete, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	s, e := r.shardFor(req.GetGroupId())
	if e != nil {
		return &groupv1.OffsetDeleteResponse{Error: e.Proto()}, nil
	}
	if len(req.GetPartitions()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "partitions", "name at least one partition whose offset to delete")
	}
	denials := r.topicDenials(ctx, authz.Read, len(req.GetPartitions()), func(i int) string { return req.GetPartitions()[i].GetTopic() })
	s.mu.Lock()
	g := s.groupLocked(req.GetGroupId(), false)
	if g == nil {
		s.mu.Unlock()
		return &groupv1.OffsetDeleteResponse{Error: errs.New(errs.GroupIDNotFound, "group %q does not exist", req.GetGroupId()).Proto()}, nil
	}
	subscribed := func(string) bool { return false }
	switch {
	case g.consumer != nil:
		subscribed = g.consumer.Subscribed
	case g.classic != nil && len(g.classic.members) > 0:
		topics, ok := g.classic.subscribedTopics()
		subscribed = func(t string) bool { return !ok || topics[t] }
	}
	resp := &groupv1.OffsetDeleteResponse{}
	var recs []kv
	var idx []int
	for i, p := range req.GetPartitions() {
		res := &groupv1.OffsetCommitResult{Topic: p.GetTopic(), Partition: p.GetPartition()}
		resp.Results = append(resp.Results, res)
		if err := denied(denials, i); err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		if subscribed(p.GetTopic()) {
			res.Error = errs.New(errs.GroupSubscribedToTopic, "group %q still consumes topic %q; stop its members or change their subscription first", g.id, p.GetTopic()).Proto()
			continue
		}
		if _, ok := g.offsets[topicPartition{p.GetTopic(), p.GetPartition()}]; !ok {
			continue // nothing committed: deleting it is a no-op, as in Kafka
		}
		recs = append(recs, kv{key: offsetKey(g.id, p.GetTopic(), p.GetPartition())})
		idx = append(idx, len(resp.Results)-1)
	}
	if len(recs) == 0 {
		s.mu.Unlock()
		return resp, nil
	}
	done := s.writeLocked(recs, func(base int64) {
		for i, rec := range recs {
			_ = s.applyRecordLocked(rec.key, nil, base+int64(i))
		}
	}, nil)
	s.mu.Unlock()
	if e := await(ctx, done); e != nil {
		for _, i := range idx {
			resp.Results[i].Error = e.Proto()
		}
	}
	return resp, nil
}

// expireOffsetsLocked deletes the offsets of groups that have been empty
// longer than offsets.retention.minutes (Kafka's rule since KIP-211: a
// group's offsets expire only once it has no members).
func (s *shard) expireOffsetsLocked(now time.Time) {
	var recs []kv
	s.expireEndedLocked(now)
	for _, g := range s.groups {
		// Offsets of a group a transaction holds offsets of stay until it
		// ends (Kafka keeps such groups too).
		if !g.empty() || len(g.offsets) == 0 || s.hasPendingLocked(g.id) {
			continue
		}
		since := g.emptySince()
		for _, tp := range sortedTPs(g.offsets) {
			c := g.offsets[tp]
			// A group that never had members counts from its last commit.
			from := since
			if from.IsZero() || time.UnixMilli(c.commitMs).After(from) {
				from = time.UnixMilli(c.commitMs)
			}
			if now.Sub(from) >= s.c.cfg.OffsetsRetention {
				recs = append(recs, kv{key: offsetKey(g.id, tp.topic, tp.partition)})
			}
		}
	}
	if len(recs) == 0 {
		return
	}
	s.c.logger.Info("expiring offsets of empty groups", slog.Int("offsets", len(recs)), slog.Int("partition", int(s.id)))
	s.writeLocked(recs, func(base int64) {
		for i, rec := range recs {
			_ = s.applyRecordLocked(rec.key, nil, base+int64(i))
		}
	}, nil)
}

// ListGroups lists the groups this node coordinates.
func (r *GroupCoordinator) ListGroups(ctx context.Context, req *groupv1.ListGroupsRequest) (*groupv1.ListGroupsResponse, error) {
	for _, t := range req.GetTypesFilter() {
		if t != "classic" && t != "consumer" {
			return nil, errs.Invalid(errs.InvalidRequest, "types_filter", "unknown group type %q: use classic or consumer", t)
		}
	}
	resp := &groupv1.ListGroupsResponse{}
	// Describe on the cluster lists every group; without it, the groups
	// the caller may Describe (Kafka's rule). Decided after the shard
	// locks are released.
	defer func() {
		if !authz.Allowed(ctx, r.deps.Authorizer(), authz.Describe, authz.Cluster, authz.ClusterName) {
			resp.Groups = authz.FilterAllowedFunc(ctx, r.deps.Authorizer(), authz.Describe, authz.Group, resp.Groups,
				func(l *groupv1.GroupListing) string { return l.GetGroupId() })
		}
	}()
	for _, s := range r.loadedShards() {
		s.mu.Lock()
		if s.loaded {
			for _, g := range s.groups {
				if g.classic == nil && g.consumer == nil && len(g.offsets) == 0 {
					continue
				}
				l := &groupv1.GroupListing{GroupId: g.id, State: g.state(), Type: g.typ(), ProtocolType: "consumer"}
				if g.classic != nil {
					l.ProtocolType = g.classic.protocolType
				}
				if matches(req.GetStatesFilter(), l.State) && matches(req.GetTypesFilter(), l.Type) {
					resp.Groups = append(resp.Groups, l)
				}
			}
		}
		s.mu.Unlock()
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].GroupId < resp.Groups[j].GroupId })
	return resp, nil
}

func matches(filter []string, v string) bool {
	if len(filter) == 0 {
		return true
	}
	return slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
}

// DescribeGroups describes groups with their members and assignments.
func (r *GroupCoordinator) DescribeGroups(ctx context.Context, req *groupv1.DescribeGroupsRequest) (*groupv1.DescribeGroupsResponse, error) {
	if len(req.GetGroupIds()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "group_ids", "name at least one group")
	}
	resp := &groupv1.DescribeGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		d := &groupv1.GroupDescription{GroupId: id}
		resp.Groups = append(resp.Groups, d)
		if err := r.check(ctx, authz.Describe, authz.Group, id); err != nil {
			d.Error = errs.ItemError(err)
			continue
		}
		s, e := r.shardFor(id)
		if e != nil {
			d.Error = e.Proto()
			continue
		}
		s.mu.Lock()
		g := s.groupLocked(id, false)
		switch {
		case g == nil:
			d.State, d.Type = stateDead, "classic"
		case g.consumer != nil:
			cd := g.consumer.Describe()
			cd.GroupId = id
			resp.Groups[len(resp.Groups)-1] = cd
		default:
			d.State, d.Type, d.ProtocolType = g.state(), "classic", ""
			if c := g.classic; c != nil {
				d.ProtocolType, d.Protocol, d.Epoch = c.protocolType, c.protocol, c.generation
				for _, mid := range sortedIDs(c.members) {
					m := c.members[mid]
					gm := &groupv1.GroupMember{MemberId: m.id, GroupInstanceId: m.instanceID, ClientId: m.clientID,
						ClientHost: m.host, Metadata: m.metadataFor(c.protocol)}
					if c.protocolType == "consumer" {
						gm.Assignment = decodeAssignment(m.assignment)
					}
					d.Members = append(d.Members, gm)
				}
			}
		}
		s.mu.Unlock()
	}
	return resp, nil
}

// DeleteGroups deletes empty groups with their offsets.
func (r *GroupCoordinator) DeleteGroups(ctx context.Context, req *groupv1.DeleteGroupsRequest) (*groupv1.DeleteGroupsResponse, error) {
	if len(req.GetGroupIds()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "group_ids", "name at least one group")
	}
	resp := &groupv1.DeleteGroupsResponse{}
	for _, id := range req.GetGroupIds() {
		res := &groupv1.DeleteGroupResult{GroupId: id}
		resp.Results = append(resp.Results, res)
		if err := r.check(ctx, authz.Delete, authz.Group, id); err != nil {
			res.Error = errs.ItemError(err)
			continue
		}
		s, e := r.shardFor(id)
		if e != nil {
			res.Error = e.Proto()
			continue
		}
		s.mu.Lock()
		g := s.groupLocked(id, false)
		switch {
		case g == nil:
			res.Error = errs.New(errs.GroupIDNotFound, "group %q does not exist", id).Proto()
			s.mu.Unlock()
			continue
		case !g.empty():
			res.Error = errs.New(errs.NonEmptyGroup, "group %q has active members; only empty groups can be deleted", id).Proto()
			s.mu.Unlock()
			continue
		case s.hasPendingLocked(id):
			// Deleting it would lose the offsets the transaction commits
			// (or leave them to bring the group back): it waits for the
			// transaction to end, as Kafka's coordinator does.
			res.Error = errs.New(errs.NonEmptyGroup, "group %q has offsets in a transaction that has not ended; delete it after the transaction commits or aborts", id).Proto()
			s.mu.Unlock()
			continue
		}
		recs := []kv{{key: groupKey(id)}}
		if g.consumer != nil {
			recs = append(recs, kv{key: consumerGroupKey(id)})
		}
		for _, tp := range sortedTPs(g.offsets) {
			recs = append(recs, kv{key: offsetKey(id, tp.topic, tp.partition)})
		}
		if g.classic != nil {
			g.classic.transition(stateDead, r.now())
		}
		done := s.writeLocked(recs, func(int64) {
			if s.groups[id] == g {
				delete(s.groups, id)
			}
		}, func(*errs.Error) {
			if g.classic != nil {
				g.classic.transition(stateEmpty, r.now())
			}
		})
		s.mu.Unlock()
		if e := await(ctx, done); e != nil {
			res.Error = e.Proto()
		}
	}
	return resp, nil
}
