package groupcoord

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// kafkaListGroups serves ListGroups v0-v5: the groups this node
// coordinates (a Kafka admin client asks every broker), filtered by state
// (v4+) and type (v5). Kafka matches both filters without regard to case
// and an unknown type matches no group; the gRPC call refuses unknown
// types, so they are dropped here first.
func (r *GroupCoordinator) kafkaListGroups(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.ListGroupsRequest)
	out := kmsg.NewPtrListGroupsResponse()
	out.Version = req.Version
	call := &groupv1.ListGroupsRequest{StatesFilter: in.StatesFilter}
	for _, t := range in.TypesFilter {
		if t = strings.ToLower(t); t == "classic" || t == "consumer" {
			call.TypesFilter = append(call.TypesFilter, t)
		}
	}
	if len(in.TypesFilter) > 0 && len(call.TypesFilter) == 0 {
		return kafka.Now(out), nil
	}
	resp, err := r.ListGroups(callContext(ctx, req), call)
	if err != nil {
		out.ErrorCode = kafka.ErrorCode(err)
		return kafka.Now(out), nil
	}
	for _, g := range resp.GetGroups() {
		og := kmsg.NewListGroupsResponseGroup()
		og.Group, og.ProtocolType, og.GroupState, og.GroupType = g.GetGroupId(), g.GetProtocolType(), g.GetState(), g.GetType()
		out.Groups = append(out.Groups, og)
	}
	return kafka.Now(out), nil
}

// kafkaDescribeGroups serves DescribeGroups v0-v6 for classic groups, as
// Kafka does: members carry their metadata and assignment only while the
// group is Stable, a group that does not exist (or is a consumer-protocol
// group, which ConsumerGroupDescribe describes) is Dead, and from v6 also
// GROUP_ID_NOT_FOUND. Authorized operations (v3+) are the caller's, from
// the authorizer, when one is on; without one the field keeps Kafka's "not
// provided" value.
func (r *GroupCoordinator) kafkaDescribeGroups(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.DescribeGroupsRequest)
	out := kmsg.NewPtrDescribeGroupsResponse()
	out.Version = req.Version
	if len(in.Groups) == 0 {
		return kafka.Now(out), nil
	}
	resp, err := r.DescribeGroups(callContext(ctx, req), &groupv1.DescribeGroupsRequest{GroupIds: in.Groups})
	if err != nil {
		for _, id := range in.Groups {
			og := kmsg.NewDescribeGroupsResponseGroup()
			og.Group, og.ErrorCode, og.ErrorMessage = id, kafka.ErrorCode(err), kafka.ErrorMessage(err)
			out.Groups = append(out.Groups, og)
		}
		return kafka.Now(out), nil
	}
	for _, d := range resp.GetGroups() {
		og := kmsg.NewDescribeGroupsResponseGroup()
		og.Group = d.GetGroupId()
		if d.GetError() != nil {
			og.ErrorCode, og.ErrorMessage = protoCode(d.GetError()), protoMessage(d.GetError())
			out.Groups = append(out.Groups, og)
			continue
		}
		if d.GetType() == "consumer" || d.GetState() == stateDead {
			og.State = stateDead
			if req.Version >= 6 {
				e := errs.New(errs.GroupIDNotFound, "group %q does not exist", d.GetGroupId())
				if d.GetType() == "consumer" {
					e = errs.New(errs.GroupIDNotFound, "group %q is not a classic group; describe it with ConsumerGroupDescribe", d.GetGroupId())
				}
				og.ErrorCode, og.ErrorMessage = kafka.ErrorCode(e), kafka.ErrorMessage(e)
			}
			out.Groups = append(out.Groups, og)
			continue
		}
		og.State, og.ProtocolType = d.GetState(), d.GetProtocolType()
		if a := r.deps.Authorizer(); in.IncludeAuthorizedOperations && a.Enabled() {
			og.AuthorizedOperations = kafka.AuthorizedOperations(ctx, a, authz.Group, d.GetGroupId())
		}
		stable := d.GetState() == stateStable
		var assignments map[string][]byte
		if stable {
			og.Protocol = d.GetProtocol()
			assignments = r.classicAssignments(d.GetGroupId(), d.GetEpoch())
		}
		for _, m := range d.GetMembers() {
			om := kmsg.NewDescribeGroupsResponseGroupMember()
			om.MemberID, om.InstanceID, om.ClientID, om.ClientHost = m.GetMemberId(), orNull(m.GetGroupInstanceId()), m.GetClientId(), m.GetClientHost()
			if stable {
				om.ProtocolMetadata = m.GetMetadata()
				om.MemberAssignment = assignments[m.GetMemberId()]
			}
			og.Members = append(og.Members, om)
		}
		out.Groups = append(out.Groups, og)
	}
	return kafka.Now(out), nil
}

// classicAssignments returns the assignment bytes, as the leader sent them,
// of every member of a classic group at generation (none when the group
// moved on since it was described).
func (r *GroupCoordinator) classicAssignments(groupID string, generation int32) map[string][]byte {
	s, e := r.shardFor(groupID)
	if e != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(groupID, false)
	if g == nil || g.classic == nil || g.classic.generation != generation {
		return nil
	}
	out := make(map[string][]byte, len(g.classic.members))
	for id, m := range g.classic.members {
		out[id] = m.assignment
	}
	return out
}

// kafkaDeleteGroups serves DeleteGroups v0-v3 (v3 adds error messages):
// only empty groups are deleted, with their offsets.
func (r *GroupCoordinator) kafkaDeleteGroups(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
	in := req.Msg.(*kmsg.DeleteGroupsRequest)
	version := req.Version
	build := func(resp *groupv1.DeleteGroupsResponse, err error) kmsg.Response {
		out := kmsg.NewPtrDeleteGroupsResponse()
		out.Version = version
		for i, id := range in.Groups {
			og := kmsg.NewDeleteGroupsResponseGroup()
			og.Group = id
			switch {
			case err != nil:
				og.ErrorCode, og.ErrorMessage = kafka.ErrorCode(err), kafka.ErrorMessage(err)
			case i < len(resp.GetResults()):
				og.ErrorCode, og.ErrorMessage = protoCode(resp.GetResults()[i].GetError()), protoMessage(resp.GetResults()[i].GetError())
			}
			out.Groups = append(out.Groups, og)
		}
		return out
	}
	if len(in.Groups) == 0 {
		return kafka.Now(build(nil, nil)), nil
	}
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		return build(r.DeleteGroups(callContext(wctx, req), &groupv1.DeleteGroupsRequest{GroupIds: in.Groups}))
	}}, nil
}
