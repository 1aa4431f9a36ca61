package consumer

import (
	"sort"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/planted"
)

// ValidateCommit checks an OffsetCommit's member id and epoch with the rule
// that needs no partitions (Kafka's before KIP-1251):
//
//   - a negative epoch with no member id is accepted only while the group
//     is empty (commits by an admin client or a consumer outside the group);
//   - an unknown member gets UNKNOWN_MEMBER_ID;
//   - an epoch newer than the member's gets FENCED_MEMBER_EPOCH;
//   - an older one gets STALE_MEMBER_EPOCH.
//
// It cannot see the partitions, so it cannot accept the older-epoch commits
// KIP-1251 allows without also accepting them for partitions the member no
// longer owns; CommitValidator can, and is what an OffsetCommit handler
// should use.
func (g *Group) ValidateCommit(memberID string, memberEpoch int32) error {
	check, err := g.CommitValidator(memberID, memberEpoch)
	if err != nil || check == nil {
		return err
	}
	m := g.members[memberID]
	return errs.New(errs.StaleMemberEpoch, "member %s of group %s committed with epoch %d but is at epoch %d; heartbeat to learn the new epoch and commit again", memberID, g.id, memberEpoch, m.epoch)
}

// CommitValidator checks an OffsetCommit as Kafka's current coordinator
// does (ConsumerGroup.validateOffsetCommit with KIP-1251 assignment
// epochs). It returns the request-level error of ValidateCommit, except
// that an epoch older than the member's is not refused outright: it returns
// a check to run on each partition, which accepts a partition the member
// still owns (assigned or pending revocation) and was assigned at that epoch
// or before, and answers STALE_MEMBER_EPOCH for the others. The commit then
// provably comes from the partition's owner, so a heartbeat that bumped the
// epoch meanwhile does not fail it. A nil check means every partition
// passes.
//
// The check reads the group when called: run it before the next call that
// changes the group.
func (g *Group) CommitValidator(memberID string, memberEpoch int32) (func(topic string, partition int32) error, error) {
	if memberEpoch < 0 && memberID == "" && len(g.members) == 0 {
		return nil, nil
	}
	m, err := g.commitMember(memberID, memberEpoch)
	if err != nil || memberEpoch == m.epoch {
		return nil, err
	}
	if planted.On(planted.StaleGenerationAccepted) {
		return nil, nil // planted bug: an older epoch commits every partition
	}
	return func(topic string, partition int32) error {
		for _, pe := range []partitionEpochs{m.assigned, m.pending} {
			if e, ok := pe[topic][partition]; ok && e <= memberEpoch {
				return nil
			}
		}
		return errs.New(errs.StaleMemberEpoch, "member %s of group %s committed %s-%d with epoch %d but is at epoch %d and did not own that partition since epoch %d; heartbeat to learn the new epoch and commit again", memberID, g.id, topic, partition, memberEpoch, m.epoch, memberEpoch)
	}, nil
}

// commitMember finds the committing member and rejects epochs newer than
// its own.
func (g *Group) commitMember(memberID string, memberEpoch int32) (*member, error) {
	m := g.members[memberID]
	if m == nil {
		return nil, errs.New(errs.UnknownMemberID, "member %q is not in group %s; rejoin the group before committing", memberID, g.id)
	}
	if m.leftStatic {
		// Kafka sets the epoch of a static member that left temporarily to
		// -2, so every epoch is newer than it.
		return nil, errs.New(errs.FencedMemberEpoch, "member %s of group %s left temporarily (static member); it must rejoin with member epoch 0 before committing or fetching offsets", memberID, g.id)
	}
	if memberEpoch > m.epoch {
		return nil, errs.New(errs.FencedMemberEpoch, "member %s of group %s committed with epoch %d, newer than its epoch %d; rejoin with member epoch 0", memberID, g.id, memberEpoch, m.epoch)
	}
	return m, nil
}

// ValidateFetch checks an OffsetFetch's member id and epoch (Kafka's
// ConsumerGroup.validateOffsetFetch): no member id with a negative epoch
// skips the check; otherwise the member must exist and send exactly its
// epoch.
func (g *Group) ValidateFetch(memberID string, memberEpoch int32) error {
	if memberID == "" && memberEpoch < 0 {
		return nil
	}
	m, err := g.commitMember(memberID, memberEpoch)
	if err != nil {
		return err
	}
	if memberEpoch < m.epoch {
		return errs.New(errs.StaleMemberEpoch, "member %s of group %s fetched offsets with epoch %d but is at epoch %d; heartbeat to learn the new epoch and fetch again", memberID, g.id, memberEpoch, m.epoch)
	}
	return nil
}

// Subscribed reports whether some member subscribes to topic, by name or
// by regex (OffsetDelete refuses such topics).
func (g *Group) Subscribed(topic string) bool {
	for _, m := range g.members {
		if m.subscribes(topic) {
			return true
		}
	}
	return false
}

// Empty reports whether the group has no members.
func (g *Group) Empty() bool { return len(g.members) == 0 }

// Epoch returns the group epoch.
func (g *Group) Epoch() int32 { return g.groupEpoch }

// State returns the group state by Kafka's names: "Empty" without members,
// "Assigning" while the target lags the group epoch, "Reconciling" while
// some member is not at the target epoch or still waits on partitions, and
// "Stable" otherwise. The target is computed in the call that bumps the
// epoch, so callers observe "Assigning" only if that ever changes.
func (g *Group) State() string {
	switch {
	case len(g.members) == 0:
		return "Empty"
	case g.targetEpoch < g.groupEpoch:
		return "Assigning"
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch || m.state != stateStable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// Describe returns the group as ConsumerGroupDescribe shows it: type
// "consumer", the server assignor as protocol, and every member (sorted by
// id) with its current assignment and epoch.
func (g *Group) Describe() *groupv1.GroupDescription {
	d := &groupv1.GroupDescription{
		GroupId:      g.id,
		State:        g.State(),
		ProtocolType: "consumer",
		Protocol:     g.assignorName(),
		Epoch:        g.groupEpoch,
		Type:         "consumer",
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := g.members[id]
		epoch := m.epoch
		if m.leftStatic {
			epoch = staticLeaveEpoch
		}
		d.Members = append(d.Members, &groupv1.GroupMember{
			MemberId:        id,
			GroupInstanceId: m.instanceID,
			Assignment:      &groupv1.Assignment{TopicPartitions: m.assigned.proto()},
			MemberEpoch:     epoch,
		})
	}
	return d
}

func (g *Group) assignorName() string {
	if g.assignor != "" {
		return g.assignor
	}
	return g.preferredAssignor()
}

// Owners returns topic -> partition -> the member owning it now (assigned
// or pending revocation). The map is a copy.
func (g *Group) Owners() map[string]map[int32]string {
	out := make(map[string]map[int32]string, len(g.owner))
	for t, ps := range g.owner {
		cp := make(map[int32]string, len(ps))
		for p, id := range ps {
			cp[p] = id
		}
		out[t] = cp
	}
	return out
}
