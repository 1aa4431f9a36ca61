package nodeapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Versions of the ACL APIs: v1 adds the resource pattern type (KIP-290),
// v2 is flexible, v3 allows the USER resource type (which Sluice has not,
// and refuses per item).
const (
	describeACLsMin, describeACLsMax = 0, 3
	createACLsMin, createACLsMax     = 0, 3
	deleteACLsMin, deleteACLsMax     = 0, 3
)

// enumTable pairs Kafka's wire values of one ACL enum with the
// authorizer's, one row per value, and converts both ways: one table
// instead of a switch per direction. Kafka's numbers differ from ours
// (operations are off by one: 0 UNKNOWN, 1 ANY, 2 ALL, ...; permissions
// are 2 DENY and 3 ALLOW; pattern types 1 ANY, 2 MATCH, 3 LITERAL, 4
// PREFIXED; resource types 1 ANY, 2 TOPIC, 3 GROUP, 4 CLUSTER, 5
// TRANSACTIONAL_ID).
type enumTable[K, A comparable] struct {
	rows []enumRow[K, A]
	// unknownK and unknownA answer a value without a row.
	unknownK K
	unknownA A
}

type enumRow[K, A comparable] struct {
	k K
	a A
}

// authz returns the authorizer's value of Kafka's k.
func (t *enumTable[K, A]) authz(k K) A {
	for _, r := range t.rows {
		if r.k == k {
			return r.a
		}
	}
	return t.unknownA
}

// kafka returns Kafka's value of the authorizer's a.
func (t *enumTable[K, A]) kafka(a A) K {
	for _, r := range t.rows {
		if r.a == a {
			return r.k
		}
	}
	return t.unknownK
}

var (
	resourceTypes = &enumTable[kmsg.ACLResourceType, authz.ResourceType]{
		rows: []enumRow[kmsg.ACLResourceType, authz.ResourceType]{
			{kmsg.ACLResourceTypeTopic, authz.Topic},
			{kmsg.ACLResourceTypeGroup, authz.Group},
			{kmsg.ACLResourceTypeCluster, authz.Cluster},
			{kmsg.ACLResourceTypeTransactionalId, authz.TransactionalID},
		},
		unknownK: kmsg.ACLResourceTypeUnknown, unknownA: authz.ResourceUnknown,
	}
	operations = &enumTable[kmsg.ACLOperation, authz.Operation]{
		rows: []enumRow[kmsg.ACLOperation, authz.Operation]{
			{kmsg.ACLOperationAll, authz.All},
			{kmsg.ACLOperationRead, authz.Read},
			{kmsg.ACLOperationWrite, authz.Write},
			{kmsg.ACLOperationCreate, authz.Create},
			{kmsg.ACLOperationDelete, authz.Delete},
			{kmsg.ACLOperationAlter, authz.Alter},
			{kmsg.ACLOperationDescribe, authz.Describe},
			{kmsg.ACLOperationClusterAction, authz.ClusterAction},
			{kmsg.ACLOperationDescribeConfigs, authz.DescribeConfigs},
			{kmsg.ACLOperationAlterConfigs, authz.AlterConfigs},
			{kmsg.ACLOperationIdempotentWrite, authz.IdempotentWrite},
		},
		unknownK: kmsg.ACLOperationUnknown, unknownA: authz.OpUnknown,
	}
	// Stored ACLs always have a permission and a pattern; an unknown one
	// is answered as Allow and LITERAL, as before.
	permissions = &enumTable[kmsg.ACLPermissionType, authz.Permission]{
		rows: []enumRow[kmsg.ACLPermissionType, authz.Permission]{
			{kmsg.ACLPermissionTypeAllow, authz.Allow},
			{kmsg.ACLPermissionTypeDeny, authz.Deny},
		},
		unknownK: kmsg.ACLPermissionTypeAllow, unknownA: authz.PermissionUnknown,
	}
	patterns = &enumTable[kmsg.ACLResourcePatternType, authz.PatternType]{
		rows: []enumRow[kmsg.ACLResourcePatternType, authz.PatternType]{
			{kmsg.ACLResourcePatternTypeLiteral, authz.Literal},
			{kmsg.ACLResourcePatternTypePrefixed, authz.Prefixed},
		},
		unknownK: kmsg.ACLResourcePatternTypeLiteral, unknownA: authz.PatternUnknown,
	}
)

// aclFilter is a Kafka ACL filter (DescribeAcls, DeleteAcls) with Kafka's
// semantics: ANY and null match anything; the MATCH pattern type selects
// the ACLs that apply to the named resource (its literal name, the "*"
// literal, and every prefix).
type aclFilter struct {
	rt              authz.ResourceType // ResourceUnknown: any
	name            *string
	pattern         kmsg.ACLResourcePatternType
	principal, host *string
	op              authz.Operation // OpUnknown: any
	perm            authz.Permission
}

func newACLFilter(rt kmsg.ACLResourceType, name *string, pt kmsg.ACLResourcePatternType, principal, host *string,
	op kmsg.ACLOperation, perm kmsg.ACLPermissionType) (aclFilter, error) {
	f := aclFilter{name: name, pattern: pt, principal: principal, host: host}
	if rt != kmsg.ACLResourceTypeAny {
		if f.rt = resourceTypes.authz(rt); f.rt == authz.ResourceUnknown {
			return f, errorf(errs.InvalidRequest, "resource type %d: ACLs apply to topics (2), groups (3), the cluster (4) and transactional ids (5) only", rt)
		}
	}
	switch pt {
	case kmsg.ACLResourcePatternTypeAny, kmsg.ACLResourcePatternTypeMatch, kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed:
	default:
		return f, errorf(errs.InvalidRequest, "resource pattern type %d: want ANY (1), MATCH (2), LITERAL (3) or PREFIXED (4)", pt)
	}
	if op != kmsg.ACLOperationAny {
		if f.op = operations.authz(op); f.op == authz.OpUnknown {
			return f, errorf(errs.InvalidRequest, "operation %d is not a known ACL operation", op)
		}
	}
	if perm != kmsg.ACLPermissionTypeAny {
		if f.perm = permissions.authz(perm); f.perm == authz.PermissionUnknown {
			return f, errorf(errs.InvalidRequest, "permission type %d: want ANY (1), DENY (2) or ALLOW (3)", perm)
		}
	}
	return f, nil
}

func (f aclFilter) matches(a authz.ACL) bool {
	if f.rt != authz.ResourceUnknown && f.rt != a.ResourceType {
		return false
	}
	if f.principal != nil && *f.principal != a.Principal {
		return false
	}
	if f.host != nil && *f.host != a.Host {
		return false
	}
	if f.op != authz.OpUnknown && f.op != a.Operation {
		return false
	}
	if f.perm != authz.PermissionUnknown && f.perm != a.Permission {
		return false
	}
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed:
		if patterns.authz(f.pattern) != a.Pattern {
			return false
		}
	case kmsg.ACLResourcePatternTypeMatch:
		if f.name == nil {
			return true
		}
		if a.Pattern == authz.Prefixed {
			return strings.HasPrefix(*f.name, a.Name)
		}
		return a.Name == *f.name || a.Name == authz.Wildcard
	}
	return f.name == nil || *f.name == a.Name
}

// allACLs reads every ACL from the active controller.
func (n *node) allACLs(ctx context.Context) ([]authz.ACL, error) {
	var out *controllerv1.DescribeAclsResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeAcls(ctx, &controllerv1.DescribeAclsRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	acls := make([]authz.ACL, 0, len(out.GetBindings()))
	for _, b := range out.GetBindings() {
		acls = append(acls, authz.FromProto(b))
	}
	return acls, nil
}

// describeACLs answers DescribeAcls (29): Describe on the cluster, then
// the matching ACLs grouped by resource.
func (n *node) describeACLs(ctx context.Context, req *kmsg.DescribeACLsRequest) *kmsg.DescribeACLsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrDescribeACLsResponse()
	if err := authz.Check(ctx, n.authz, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	pt := req.ResourcePatternType
	if req.Version == 0 {
		pt = kmsg.ACLResourcePatternTypeLiteral // v0 knows literal names only
	}
	f, err := newACLFilter(req.ResourceType, req.ResourceName, pt, req.Principal, req.Host, req.Operation, req.PermissionType)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	acls, err := n.allACLs(ctx)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	// The controller lists ACLs sorted by resource, so one resource's ACLs
	// are adjacent.
	for _, a := range acls {
		if !f.matches(a) {
			continue
		}
		if k := len(resp.Resources); k == 0 || resp.Resources[k-1].ResourceType != resourceTypes.kafka(a.ResourceType) ||
			resp.Resources[k-1].ResourceName != a.Name || resp.Resources[k-1].ResourcePatternType != patterns.kafka(a.Pattern) {
			r := kmsg.NewDescribeACLsResponseResource()
			r.ResourceType, r.ResourceName, r.ResourcePatternType = resourceTypes.kafka(a.ResourceType), a.Name, patterns.kafka(a.Pattern)
			resp.Resources = append(resp.Resources, r)
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host = a.Principal, a.Host
		e.Operation, e.PermissionType = operations.kafka(a.Operation), permissions.kafka(a.Permission)
		r := &resp.Resources[len(resp.Resources)-1]
		r.ACLs = append(r.ACLs, e)
	}
	return resp
}

// createACLs answers CreateAcls (30) through the active controller: Alter
// on the cluster, each creation validated on its own and answered in its
// slot.
func (n *node) createACLs(ctx context.Context, req *kmsg.CreateACLsRequest) *kmsg.CreateACLsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrCreateACLsResponse()
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewCreateACLsResponseResult()
	}
	if len(req.Creations) == 0 {
		return resp
	}
	if err := authz.Check(ctx, n.authz, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kafkaError(err)
		}
		return resp
	}
	in := &controllerv1.CreateAclsRequest{}
	var at []int
	for i, c := range req.Creations {
		pt := c.ResourcePatternType
		if req.Version == 0 {
			pt = kmsg.ACLResourcePatternTypeLiteral
		}
		a := authz.ACL{Principal: c.Principal, Host: c.Host, Operation: operations.authz(c.Operation), Permission: permissions.authz(c.PermissionType),
			ResourceType: resourceTypes.authz(c.ResourceType), Name: c.ResourceName, Pattern: patterns.authz(pt)}
		if field, problem := a.Validate(); field != "" {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kafkaError(errs.Invalid(errs.InvalidRequest, field, "%s", problem))
			continue
		}
		in.Bindings = append(in.Bindings, authz.ToProto(a))
		at = append(at, i)
	}
	if len(in.Bindings) == 0 {
		return resp
	}
	var out *controllerv1.CreateAclsResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.CreateAcls(ctx, in)
		return err
	})
	for j, i := range at {
		r := &resp.Results[i]
		if err != nil {
			r.ErrorCode, r.ErrorMessage = kafkaError(err)
		} else if j < len(out.GetErrors()) {
			r.ErrorCode, r.ErrorMessage = protoError(errs.FromProto(out.GetErrors()[j]))
		}
	}
	return resp
}

// deleteACLs answers DeleteAcls (31): Alter on the cluster; each filter's
// result lists the ACLs it matched and deleted. The matching ACLs are read
// from the controller and deleted there by their exact bindings, so an ACL
// created while the request runs is left alone.
func (n *node) deleteACLs(ctx context.Context, req *kmsg.DeleteACLsRequest) *kmsg.DeleteACLsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrDeleteACLsResponse()
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	fail := func(i int, err error) {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
		resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kafkaError(err)
	}
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
	}
	if len(req.Filters) == 0 {
		return resp
	}
	if err := authz.Check(ctx, n.authz, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		for i := range resp.Results {
			fail(i, err)
		}
		return resp
	}
	filters := make([]*aclFilter, len(req.Filters))
	for i, rf := range req.Filters {
		pt := rf.ResourcePatternType
		if req.Version == 0 {
			pt = kmsg.ACLResourcePatternTypeLiteral
		}
		f, err := newACLFilter(rf.ResourceType, rf.ResourceName, pt, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
		if err != nil {
			fail(i, err)
			continue
		}
		filters[i] = &f
	}
	acls, err := n.allACLs(ctx)
	if err != nil {
		for i := range resp.Results {
			fail(i, err)
		}
		return resp
	}
	in := &controllerv1.DeleteAclsRequest{}
	for _, a := range acls {
		for _, f := range filters {
			if f != nil && f.matches(a) {
				in.Filters = append(in.Filters, authz.ToProto(a))
				break
			}
		}
	}
	deleted := map[authz.ACL]bool{}
	if len(in.Filters) > 0 {
		var out *controllerv1.DeleteAclsResponse
		err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
			var err error
			out, err = cc.DeleteAcls(ctx, in)
			return err
		})
		if err != nil {
			for i, f := range filters {
				if f != nil {
					fail(i, fmt.Errorf("deleting ACLs: %w", err))
				}
			}
			return resp
		}
		for _, b := range out.GetDeleted() {
			deleted[authz.FromProto(b)] = true
		}
	}
	for i, f := range filters {
		if f == nil {
			continue
		}
		for _, a := range acls {
			if !deleted[a] || !f.matches(a) {
				continue
			}
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = resourceTypes.kafka(a.ResourceType), a.Name, patterns.kafka(a.Pattern)
			m.Principal, m.Host = a.Principal, a.Host
			m.Operation, m.PermissionType = operations.kafka(a.Operation), permissions.kafka(a.Permission)
			resp.Results[i].MatchingACLs = append(resp.Results[i].MatchingACLs, m)
		}
	}
	return resp
}
