package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metastore"
)

// ACLs live one per key, acls/<id>, where id is a hash of the binding's
// fields: creating a binding that exists is a no-op (Kafka's CreateAcls is
// idempotent), and the key of a binding is known without a lookup. The
// value is the controller.v1.AclBinding itself.

// aclID is the id of a binding in its key.
func aclID(a authz.ACL) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%d\x00%s\x00%s\x00%d\x00%d",
		a.ResourceType, a.Name, a.Pattern, a.Principal, a.Host, a.Operation, a.Permission))
	return hex.EncodeToString(sum[:16])
}

// applyACL applies one event under acls/.
func (s *state) applyACL(id string, kv *mvccpb.KeyValue, deleted bool, ch *change) error {
	if s.acls == nil {
		s.acls = map[string]*versioned[*controllerv1.AclBinding]{}
	}
	ch.acls = true
	if deleted {
		delete(s.acls, id)
		return nil
	}
	b := &controllerv1.AclBinding{}
	if err := proto.Unmarshal(kv.Value, b); err != nil {
		return fmt.Errorf("decoding ACL %q: %w", id, err)
	}
	s.acls[id] = &versioned[*controllerv1.AclBinding]{val: b, modRev: kv.ModRevision}
	return nil
}

// aclSet renders every ACL, sorted.
func (s *state) aclSet() *controllerv1.AclSet {
	out := &controllerv1.AclSet{}
	for _, v := range s.acls {
		out.Bindings = append(out.Bindings, v.val)
	}
	slices.SortFunc(out.Bindings, func(a, b *controllerv1.AclBinding) int {
		return authz.Compare(authz.FromProto(a), authz.FromProto(b))
	})
	return out
}

// aclDelta puts the whole ACL set in d when ACLs changed.
func (s *state) aclDelta(ch *change, d *controllerv1.MetadataDelta) {
	if ch.acls {
		d.Acls = s.aclSet()
	}
}

// normalizeBinding fills what a binding may leave out: host "*" and a
// LITERAL pattern (the proto's documented defaults), and writes the host
// in canonical form (authz.CanonicalHost: ::ffff:10.0.0.1 is stored as
// 10.0.0.1), so one address is one binding however it was spelled.
func normalizeBinding(b *controllerv1.AclBinding) authz.ACL {
	a := authz.FromProto(b)
	if a.Host == "" {
		a.Host = authz.Wildcard
	}
	if a.Pattern == authz.PatternUnknown {
		a.Pattern = authz.Literal
	}
	return a.Canonical()
}

// checkACLAdmin authorizes an ACL call: Alter on the cluster to change
// ACLs, Describe to list them (Kafka's rule).
func (c *Controller) checkACLAdmin(ctx context.Context, op authz.Operation) error {
	return authz.Check(ctx, c.deps.Authorizer(), op, authz.Cluster, authz.ClusterName)
}

func (c *Controller) auditACL(ctx context.Context, msg, operation string, a authz.ACL) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		id.Principal = auth.Anonymous
	}
	authz.AuditLine(ctx, c.logger, msg, id, operation, a.String(), true)
}

// CreateAcls adds bindings. Each binding is validated on its own and
// answered in its slot (INVALID_REQUEST naming the field); the valid ones
// are written in one guarded transaction per 100, and a binding that
// exists already succeeds without a write. The call returns once this
// controller's view includes the write, so every process's authorizer is
// one metadata-watch hop away from it.
func (c *Controller) CreateAcls(ctx context.Context, r *controllerv1.CreateAclsRequest) (*controllerv1.CreateAclsResponse, error) {
	if len(r.GetBindings()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "bindings", "at least one ACL binding is required")
	}
	if err := c.checkACLAdmin(ctx, authz.Alter); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.CreateAclsResponse{Errors: make([]*edpb.Error, len(r.GetBindings()))}
	var valid []authz.ACL
	var slots []int
	for i, b := range r.GetBindings() {
		a := normalizeBinding(b)
		if field, problem := a.Validate(); field != "" {
			out.Errors[i] = errs.Invalid(errs.InvalidRequest, fmt.Sprintf("bindings[%d].%s", i, field), "%s", problem).Proto()
			continue
		}
		valid = append(valid, a)
		slots = append(slots, i)
	}
	for start := 0; start < len(valid); start += maxTxnOps {
		chunk := valid[start:min(start+maxTxnOps, len(valid))]
		_, err := c.update(ctx, t, func(st *state) (*txn, error) {
			x := &txn{}
			seen := map[string]bool{} // one binding given twice (or in two spellings of its host) is one key
			for _, a := range chunk {
				id := aclID(a)
				if _, ok := st.acls[id]; ok || seen[id] {
					continue
				}
				seen[id] = true
				c.put(x, metastore.ACLKey(id), 0, authz.ToProto(a))
			}
			return x, nil
		})
		for k := range chunk {
			if err != nil {
				out.Errors[slots[start+k]] = errs.ItemError(err)
				continue
			}
			c.auditACL(ctx, "acl created", "CreateAcls", chunk[k])
		}
	}
	return out, nil
}

// DescribeAcls lists the bindings that match the filter, sorted.
func (c *Controller) DescribeAcls(ctx context.Context, r *controllerv1.DescribeAclsRequest) (*controllerv1.DescribeAclsResponse, error) {
	if err := c.checkACLAdmin(ctx, authz.Describe); err != nil {
		return nil, err
	}
	if err := validateACLFilter("filter", r.GetFilter()); err != nil {
		return nil, err
	}
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	f := authz.FilterFromProto(r.GetFilter())
	c.mu.RLock()
	set := c.st.aclSet()
	c.mu.RUnlock()
	out := &controllerv1.DescribeAclsResponse{}
	for _, b := range set.GetBindings() {
		if f.Matches(authz.FromProto(b)) {
			out.Bindings = append(out.Bindings, b)
		}
	}
	return out, nil
}

// DeleteAcls removes every binding that matches any of the filters and
// returns them. A filter with no field set matches every ACL.
func (c *Controller) DeleteAcls(ctx context.Context, r *controllerv1.DeleteAclsRequest) (*controllerv1.DeleteAclsResponse, error) {
	if len(r.GetFilters()) == 0 {
		return nil, errs.Invalid(errs.InvalidRequest, "filters", "at least one filter is required (a filter with no field set deletes every ACL)")
	}
	for i, f := range r.GetFilters() {
		if err := validateACLFilter(fmt.Sprintf("filters[%d]", i), f); err != nil {
			return nil, err
		}
	}
	if err := c.checkACLAdmin(ctx, authz.Alter); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	filters := make([]authz.Filter, 0, len(r.GetFilters()))
	for _, f := range r.GetFilters() {
		filters = append(filters, authz.FilterFromProto(f))
	}
	out := &controllerv1.DeleteAclsResponse{}
	for {
		var batch []*controllerv1.AclBinding
		_, err := c.update(ctx, t, func(st *state) (*txn, error) {
			batch = batch[:0]
			x := &txn{}
			ids := make([]string, 0, len(st.acls))
			for id := range st.acls {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				v := st.acls[id]
				a := authz.FromProto(v.val)
				if !slices.ContainsFunc(filters, func(f authz.Filter) bool { return f.Matches(a) }) {
					continue
				}
				if len(x.ops) == maxTxnOps {
					break
				}
				c.del(x, metastore.ACLKey(id), v.modRev)
				batch = append(batch, v.val)
			}
			return x, nil
		})
		if err != nil {
			return nil, err
		}
		for _, b := range batch {
			c.auditACL(ctx, "acl deleted", "DeleteAcls", authz.FromProto(b))
		}
		out.Deleted = append(out.Deleted, batch...)
		if len(batch) < maxTxnOps {
			return out, nil
		}
	}
}

// validateACLFilter refuses filter values that cannot match anything
// (unknown enum numbers, the BROKER resource type), so a typo is an error
// rather than an empty answer or a silent no-op delete.
func validateACLFilter(path string, b *controllerv1.AclBinding) error {
	var f errs.Fields
	if rt := b.GetResourceType(); rt != controllerv1.ResourceType_RESOURCE_TYPE_UNSPECIFIED && authz.ResourceTypeFromProto(rt) == authz.ResourceUnknown {
		f.Add(path+".resource_type", "ACLs apply to Topic, Group, Cluster and TransactionalId resources only")
	}
	if op := authz.Operation(b.GetOperation()); op < authz.OpUnknown || op > authz.IdempotentWrite {
		f.Add(path+".operation", "unknown operation %d", int32(op))
	}
	if p := authz.Permission(b.GetPermission()); p < authz.PermissionUnknown || p > authz.Deny {
		f.Add(path+".permission", "unknown permission %d", int32(p))
	}
	if p := authz.PatternType(b.GetPatternType()); p < authz.PatternUnknown || p > authz.Prefixed {
		f.Add(path+".pattern_type", "unknown pattern type %d", int32(p))
	}
	if p := b.GetPrincipal(); p != "" && !strings.Contains(p, ":") {
		f.Add(path+".principal", "%q is not a principal: want Type:Name such as User:alice", p)
	}
	return f.Err()
}
