package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// groupCallsInFlight bounds the groups an admin call works on at once
// (each goes to its own coordinator).
const groupCallsInFlight = 8

// ListGroups lists the cluster's groups, optionally only those in the
// given states ("Empty", "Stable", ...) or of the given types ("classic",
// "consumer"). Each coordinator lists the groups it owns, so every live
// node with the group-coordinator role is asked and the answers merged,
// sorted by id, each group once. Retriable failures of a node (still
// loading, unreachable) are retried until ctx's deadline or
// Config.RequestTimeout; the groups of the nodes that answered are
// returned then, with an error naming those that did not.
func (c *Client) ListGroups(ctx context.Context, states, types []string) ([]*groupv1.GroupListing, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	addrs, err := c.roleAddrsWait(ctx, roleGroupCoordinator)
	if err != nil {
		return nil, err
	}
	req := &groupv1.ListGroupsRequest{StatesFilter: states, TypesFilter: types}
	answers, failures := askEach(ctx, c, addrs, "listing groups", func(ctx context.Context, conn grpc.ClientConnInterface) ([]*groupv1.GroupListing, error) {
		resp, err := groupv1.NewGroupCoordinatorServiceClient(conn).ListGroups(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.GetGroups(), nil
	})
	return mergeGroupListings(answers...), errors.Join(failures...)
}

// mergeGroupListings merges the nodes' answers, sorted by group id. A
// group two nodes list (it is moving between coordinators) appears once:
// the entry of the node that owns it (not "Dead"), else the first.
func mergeGroupListings(answers ...[]*groupv1.GroupListing) []*groupv1.GroupListing {
	byID := map[string]*groupv1.GroupListing{}
	for _, list := range answers {
		for _, g := range list {
			prev, ok := byID[g.GetGroupId()]
			if !ok || (prev.GetState() == "Dead" && g.GetState() != "Dead") {
				byID[g.GetGroupId()] = g
			}
		}
	}
	out := make([]*groupv1.GroupListing, 0, len(byID))
	for _, g := range byID {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetGroupId() < out[j].GetGroupId() })
	return out
}

// eachGroup runs fn for every id, a few at a time, and waits for them all.
func eachGroup(ids []string, fn func(i int, id string)) {
	sem := make(chan struct{}, groupCallsInFlight)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i, id)
		})
	}
	wg.Wait()
}

// DescribeGroups describes groups: state, type, protocol, epoch and
// members with their assignments, each from its coordinator. The result
// has one description per id, in order; a group that could not be
// described carries its error in its Error field, and the returned error
// joins those errors (nil if every group was described). A group that
// does not exist is described as the coordinator answers: state "Dead" or
// GROUP_ID_NOT_FOUND.
func (c *Client) DescribeGroups(ctx context.Context, ids ...string) ([]*groupv1.GroupDescription, error) {
	out := make([]*groupv1.GroupDescription, len(ids))
	failures := make([]error, len(ids))
	eachGroup(ids, func(i int, id string) {
		var desc *groupv1.GroupDescription
		err := c.onGroupCoordinator(ctx, id, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
			resp, err := gc.DescribeGroups(ctx, &groupv1.DescribeGroupsRequest{GroupIds: []string{id}})
			if err != nil {
				return nil, err
			}
			desc = findDescription(resp.GetGroups(), id)
			if desc == nil {
				return nil, errs.New(errs.UnknownServerError, "DescribeGroups answered without group %q", id)
			}
			return desc.GetError(), nil
		})
		if err != nil {
			desc = &groupv1.GroupDescription{GroupId: id, Error: errs.ItemError(err)}
			failures[i] = fmt.Errorf("group %q: %w", id, err)
		}
		out[i] = desc
	})
	return out, errors.Join(failures...)
}

func findDescription(list []*groupv1.GroupDescription, id string) *groupv1.GroupDescription {
	for _, d := range list {
		if d.GetGroupId() == id {
			return d
		}
	}
	return nil
}

// DeleteGroups deletes groups and their committed offsets, each at its
// coordinator. Only empty groups can be deleted: a group with members
// answers NON_EMPTY_GROUP. The result has one entry per id, in order, with
// its error; the returned error joins those errors.
func (c *Client) DeleteGroups(ctx context.Context, ids ...string) ([]*groupv1.DeleteGroupResult, error) {
	out := make([]*groupv1.DeleteGroupResult, len(ids))
	failures := make([]error, len(ids))
	eachGroup(ids, func(i int, id string) {
		err := c.onGroupCoordinator(ctx, id, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
			resp, err := gc.DeleteGroups(ctx, &groupv1.DeleteGroupsRequest{GroupIds: []string{id}})
			if err != nil {
				return nil, err
			}
			for _, r := range resp.GetResults() {
				if r.GetGroupId() == id {
					return r.GetError(), nil
				}
			}
			return nil, errs.New(errs.UnknownServerError, "DeleteGroups answered without group %q", id)
		})
		out[i] = &groupv1.DeleteGroupResult{GroupId: id, Error: errs.ItemError(err)}
		if err != nil {
			failures[i] = fmt.Errorf("group %q: %w", id, err)
		}
	})
	return out, errors.Join(failures...)
}

// FetchOffsets returns a group's committed offsets for the given
// partitions, or for every partition it has committed when none are given.
// A partition without a committed offset has offset -1. The map holds every
// partition answered; the error joins per-partition errors, if any.
func (c *Client) FetchOffsets(ctx context.Context, group string, tps ...TopicPartition) (map[TopicPartition]*groupv1.OffsetFetchPartition, error) {
	return c.fetchOffsets(ctx, group, false, tps)
}

// FetchStableOffsets is FetchOffsets with require_stable (KIP-447): a
// partition whose transactional offset commit is not settled yet (its
// transaction is open, or committed with the marker not yet at the group
// coordinator) answers UNSTABLE_OFFSET_COMMIT in its per-partition error
// instead of the offset committed before. So an answer to a fetch sent
// after a transaction's commit was acknowledged never holds an offset
// older than the transaction's.
func (c *Client) FetchStableOffsets(ctx context.Context, group string, tps ...TopicPartition) (map[TopicPartition]*groupv1.OffsetFetchPartition, error) {
	return c.fetchOffsets(ctx, group, true, tps)
}

func (c *Client) fetchOffsets(ctx context.Context, group string, stable bool, tps []TopicPartition) (map[TopicPartition]*groupv1.OffsetFetchPartition, error) {
	req := &groupv1.OffsetFetchRequest{GroupId: group, MemberEpoch: -1, RequireStable: stable}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	var resp *groupv1.OffsetFetchResponse
	err := c.onGroupCoordinator(ctx, group, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		var err error
		resp, err = gc.OffsetFetch(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.GetError(), nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]*groupv1.OffsetFetchPartition, len(resp.GetPartitions()))
	failed := map[TopicPartition]error{}
	for _, p := range resp.GetPartitions() {
		tp := TopicPartition{p.GetTopic(), p.GetPartition()}
		out[tp] = p
		if e := errs.FromProto(p.GetError()); e != nil {
			failed[tp] = e
		}
	}
	return out, partitionErrors(failed)
}

// CommitOffsets commits offsets (the next offset to consume) for a group
// with no active members, as an administrator does: generation -1 and no
// member id, as kafka-consumer-groups commits. A group with members refuses
// it, and that answer is returned as the server phrased it.
func (c *Client) CommitOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool { return lessTP(tps[i], tps[j]) })
	req := &groupv1.OffsetCommitRequest{GroupId: group, GenerationIdOrMemberEpoch: -1}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &groupv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: offsets[tp]})
	}
	var results []*groupv1.OffsetCommitResult
	err := c.onGroupCoordinator(ctx, group, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		resp, err := gc.OffsetCommit(ctx, req)
		if err != nil {
			return nil, err
		}
		results = resp.GetResults()
		return sharedResultError(results), nil
	})
	if err != nil {
		return err
	}
	return resultErrors(results)
}

// DeleteOffsets deletes a group's committed offsets for the given
// partitions. The group must not be subscribed to their topics.
func (c *Client) DeleteOffsets(ctx context.Context, group string, tps ...TopicPartition) error {
	if len(tps) == 0 {
		return nil
	}
	req := &groupv1.OffsetDeleteRequest{GroupId: group}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	var results []*groupv1.OffsetCommitResult
	err := c.onGroupCoordinator(ctx, group, func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error) {
		resp, err := gc.OffsetDelete(ctx, req)
		if err != nil {
			return nil, err
		}
		results = resp.GetResults()
		if resp.GetError() != nil {
			return resp.GetError(), nil
		}
		return sharedResultError(results), nil
	})
	if err != nil {
		return err
	}
	return resultErrors(results)
}

// sharedResultError returns the error every partition result carries, if
// they all carry one with the same code: that is how offset commits answer
// a group-level error (NOT_COORDINATOR, a group with members), and it is
// reported once rather than per partition.
func sharedResultError(results []*groupv1.OffsetCommitResult) *edpb.Error {
	if len(results) == 0 {
		return nil
	}
	first := results[0].GetError()
	if first == nil || first.GetCode() == errs.None {
		return nil
	}
	for _, r := range results[1:] {
		if r.GetError().GetCode() != first.GetCode() {
			return nil
		}
	}
	return first
}

// resultErrors joins the errors of partition results, nil if none failed.
func resultErrors(results []*groupv1.OffsetCommitResult) error {
	failed := map[TopicPartition]error{}
	for _, r := range results {
		if e := errs.FromProto(r.GetError()); e != nil {
			failed[TopicPartition{r.GetTopic(), r.GetPartition()}] = e
		}
	}
	return partitionErrors(failed)
}

// PartitionLag is one partition of a group's lag report: its committed
// offset, its log end offset (high watermark) and the member that owns it.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset, -1 if none.
	Committed int64
	// LogEnd is the partition's high watermark, -1 if unknown.
	LogEnd int64
	// Lag is LogEnd minus Committed (negative if the log was truncated
	// below the committed offset); -1 if either is unknown.
	Lag int64
	// MemberID, ClientID and Host name the member the partition is
	// assigned to; empty if none.
	MemberID string
	ClientID string
	Host     string
}

// GroupLag reports, for every partition a group has committed or has
// assigned to a member, the committed offset, the log end offset and the
// lag, with the owning member, sorted by topic and partition (what
// kafka-consumer-groups --describe shows). Rows are complete even when some
// log end offsets could not be read (LogEnd -1); the error names those.
func (c *Client) GroupLag(ctx context.Context, group string) ([]PartitionLag, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	descs, err := c.DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	committed, err := c.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	owners := assignmentOwners(descs[0])
	rows := lagRows(committed, owners)
	if len(rows) == 0 {
		return rows, nil
	}
	tps := make([]TopicPartition, len(rows))
	for i, r := range rows {
		tps[i] = TopicPartition{r.Topic, r.Partition}
	}
	ends, err := c.ListOffsets(ctx, OffsetLatest, 0, tps...)
	fillLag(rows, ends)
	return rows, err
}

// assignmentOwners maps each assigned partition to the member that owns it.
func assignmentOwners(d *groupv1.GroupDescription) map[TopicPartition]*groupv1.GroupMember {
	out := map[TopicPartition]*groupv1.GroupMember{}
	for _, m := range d.GetMembers() {
		for _, tps := range m.GetAssignment().GetTopicPartitions() {
			for _, p := range tps.GetPartitions() {
				out[TopicPartition{tps.GetTopic(), p}] = m
			}
		}
	}
	return out
}

// lagRows lists every partition committed or owned, sorted, with its
// committed offset and owner; LogEnd and Lag are left unknown.
func lagRows(committed map[TopicPartition]*groupv1.OffsetFetchPartition, owners map[TopicPartition]*groupv1.GroupMember) []PartitionLag {
	seen := map[TopicPartition]bool{}
	var tps []TopicPartition
	for tp := range committed {
		seen[tp] = true
		tps = append(tps, tp)
	}
	for tp := range owners {
		if !seen[tp] {
			tps = append(tps, tp)
		}
	}
	sort.Slice(tps, func(i, j int) bool { return lessTP(tps[i], tps[j]) })
	rows := make([]PartitionLag, len(tps))
	for i, tp := range tps {
		r := PartitionLag{Topic: tp.Topic, Partition: tp.Partition, Committed: -1, LogEnd: -1, Lag: -1}
		if p, ok := committed[tp]; ok && p.GetError() == nil {
			r.Committed = p.GetOffset()
		}
		if m, ok := owners[tp]; ok {
			r.MemberID, r.ClientID, r.Host = m.GetMemberId(), m.GetClientId(), m.GetClientHost()
		}
		rows[i] = r
	}
	return rows
}

// fillLag sets LogEnd and Lag from the log end offsets found.
func fillLag(rows []PartitionLag, ends map[TopicPartition]int64) {
	for i := range rows {
		r := &rows[i]
		end, ok := ends[TopicPartition{r.Topic, r.Partition}]
		if !ok {
			continue
		}
		r.LogEnd = end
		if r.Committed >= 0 {
			// Negative after a truncation below the committed offset;
			// shown as is, as Kafka's tool does.
			r.Lag = end - r.Committed
		}
	}
}
