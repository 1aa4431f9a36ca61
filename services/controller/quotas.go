package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/quota"
)

// Client quotas live one entity per key, quotas/<id>, where id hashes the
// entity's canonical form (its components sorted by type, each with its
// name or default flag): names may hold any character, so the key never
// has to escape them, and the key of an entity is known without a lookup.
// The value is the controller.v1.ClientQuotaEntry with every value set.

// maxQuotaEntries bounds the entities one AlterClientQuotas request may
// change.
const maxQuotaEntries = 1000

// quotaID is the id of an entity in its key.
func quotaID(entity []quota.Component) string {
	h := sha256.New()
	for _, c := range quota.SortedEntity(entity) {
		fmt.Fprintf(h, "%s\x00%t\x00%s\x00", c.Type, c.Default, c.Name)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// applyQuota applies one event under quotas/.
func (s *state) applyQuota(id string, kv *mvccpb.KeyValue, deleted bool, ch *change) error {
	if s.quotas == nil {
		s.quotas = map[string]*versioned[*controllerv1.ClientQuotaEntry]{}
	}
	ch.quotas = true
	if deleted {
		delete(s.quotas, id)
		return nil
	}
	e := &controllerv1.ClientQuotaEntry{}
	if err := proto.Unmarshal(kv.Value, e); err != nil {
		return fmt.Errorf("decoding client quota %q: %w", id, err)
	}
	s.quotas[id] = &versioned[*controllerv1.ClientQuotaEntry]{val: e, modRev: kv.ModRevision}
	return nil
}

// quotaSet renders every client quota, sorted by entity key.
func (s *state) quotaSet() *controllerv1.QuotaSet {
	out := &controllerv1.QuotaSet{}
	for _, v := range s.quotas {
		out.Entries = append(out.Entries, v.val)
	}
	slices.SortFunc(out.Entries, func(a, b *controllerv1.ClientQuotaEntry) int {
		return strings.Compare(quota.EntityKey(quota.EntityFromProto(a.GetEntity())), quota.EntityKey(quota.EntityFromProto(b.GetEntity())))
	})
	return out
}

// quotaDelta puts the whole quota set in d when quotas changed.
func (s *state) quotaDelta(ch *change, d *controllerv1.MetadataDelta) {
	if ch.quotas {
		d.Quotas = s.quotaSet()
	}
}

// quotaChange is one validated request entry.
type quotaChange struct {
	entity []quota.Component
	set    map[string]float64
	remove []string
}

// String renders the change for logs: "set producer_byte_rate=1048576
// remove consumer_byte_rate".
func (q quotaChange) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(q.set)) {
		fmt.Fprintf(&b, " set %s=%s", k, strconv.FormatFloat(q.set[k], 'f', -1, 64))
	}
	for _, k := range q.remove {
		fmt.Fprintf(&b, " remove %s", k)
	}
	return strings.TrimSpace(b.String())
}

// validateQuotaAlteration checks one request entry: a valid entity, at
// least one op, at most one op per key, keys that apply to the entity and
// positive values to set.
func validateQuotaAlteration(a *controllerv1.ClientQuotaAlteration) (quotaChange, error) {
	q := quotaChange{entity: quota.EntityFromProto(a.GetEntity()), set: map[string]float64{}}
	if len(a.GetOps()) == 0 {
		return q, errs.Invalid(errs.InvalidRequest, "ops", "no quota to set or remove for %s", quota.EntityKey(q.entity))
	}
	// A component literally named "<default>" would print, and be
	// enforced, as the default of its type.
	for i, c := range q.entity {
		if !c.Default && c.Name == quota.DefaultName {
			return q, errs.Invalid(errs.InvalidRequest, fmt.Sprintf("entity[%d].name", i),
				"%q is how the default %s prints: set is_default (Kafka: a null name; sluice quota: --%s-default) for the default", c.Name, c.Type, c.Type)
		}
	}
	// Validate checks the entity and that every key applies to it; a key
	// to remove is checked with a placeholder value.
	check := quota.Entry{Entity: q.entity, Values: map[string]float64{}}
	for i, op := range a.GetOps() {
		k := op.GetKey()
		if _, dup := check.Values[k]; dup {
			return q, errs.Invalid(errs.InvalidRequest, fmt.Sprintf("ops[%d].key", i), "%s is changed twice for %s", k, quota.EntityKey(q.entity))
		}
		if op.GetRemove() {
			check.Values[k] = 1
			q.remove = append(q.remove, k)
			continue
		}
		check.Values[k] = op.GetValue()
		q.set[k] = op.GetValue()
	}
	if err := check.Validate(); err != nil {
		return q, errs.New(errs.InvalidRequest, "%v", err)
	}
	return q, nil
}

// AlterClientQuotas sets and removes client quotas. Each entity is
// validated on its own and answered in its slot; the valid ones are
// written one guarded transaction per entity, compared on the entity's
// record so concurrent changes to one entity never lose each other. An
// entity left without values is deleted. Every change writes an audit line.
func (c *Controller) AlterClientQuotas(ctx context.Context, r *controllerv1.AlterClientQuotasRequest) (*controllerv1.AlterClientQuotasResponse, error) {
	if n := len(r.GetEntries()); n == 0 || n > maxQuotaEntries {
		return nil, errs.Invalid(errs.InvalidRequest, "entries", "a request must change between 1 and %d entities, not %d", maxQuotaEntries, n)
	}
	if err := c.checkCluster(ctx, authz.AlterConfigs); err != nil {
		return nil, err
	}
	out := &controllerv1.AlterClientQuotasResponse{Results: make([]*controllerv1.AlterClientQuotasResult, len(r.GetEntries()))}
	changes := make([]*quotaChange, len(r.GetEntries()))
	seen := map[string]int{}
	for i, a := range r.GetEntries() {
		out.Results[i] = &controllerv1.AlterClientQuotasResult{Entity: a.GetEntity()}
		q, err := validateQuotaAlteration(a)
		if err == nil {
			id := quotaID(q.entity)
			if j, dup := seen[id]; dup {
				err = errs.Invalid(errs.InvalidRequest, fmt.Sprintf("entries[%d].entity", i), "%s is also changed by entries[%d]: give one entry per entity", quota.EntityKey(q.entity), j)
			}
			seen[id] = i
		}
		if err != nil {
			out.Results[i].Error = errs.ItemError(err)
			continue
		}
		changes[i] = &q
	}
	if r.GetValidateOnly() {
		return out, nil
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	for i, q := range changes {
		if q == nil {
			continue
		}
		err := c.alterQuota(ctx, t, q)
		if err != nil {
			out.Results[i].Error = errs.ItemError(err)
			continue
		}
		c.auditQuota(ctx, q)
	}
	return out, nil
}

// alterQuota writes one entity's new values.
func (c *Controller) alterQuota(ctx context.Context, t *term, q *quotaChange) error {
	id := quotaID(q.entity)
	_, err := c.update(ctx, t, func(st *state) (*txn, error) {
		vals := map[string]float64{}
		var modRev int64
		if cur, ok := st.quotas[id]; ok {
			modRev = cur.modRev
			maps.Copy(vals, cur.val.GetValues())
		}
		for _, k := range q.remove {
			delete(vals, k)
		}
		maps.Copy(vals, q.set)
		x := &txn{}
		switch {
		case len(vals) > 0:
			c.put(x, metastore.QuotaKey(id), modRev, quota.EntryToProto(quota.Entry{Entity: q.entity, Values: vals}))
		case modRev != 0:
			c.del(x, metastore.QuotaKey(id), modRev)
		}
		return x, nil
	})
	return err
}

// auditQuota writes the audit line of one quota change: who (principal,
// role), from where (host), what (the entity and the values set and
// removed).
func (c *Controller) auditQuota(ctx context.Context, q *quotaChange) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		id.Principal = auth.Anonymous
	}
	authz.AuditLine(ctx, c.logger.With(slog.String("quota_change", q.String())), "client quota altered", id,
		"AlterClientQuotas", "client-quota:"+quota.EntityKey(q.entity), true)
}

// DescribeClientQuotas lists the entities that match the filter with their
// quotas, sorted by entity.
func (c *Controller) DescribeClientQuotas(ctx context.Context, r *controllerv1.DescribeClientQuotasRequest) (*controllerv1.DescribeClientQuotasResponse, error) {
	f := quota.FilterFromProto(r)
	if field, problem := f.Validate(); field != "" {
		return nil, errs.Invalid(errs.InvalidRequest, field, "%s", problem)
	}
	if err := c.checkCluster(ctx, authz.DescribeConfigs); err != nil {
		return nil, err
	}
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	set := c.st.quotaSet()
	c.mu.RUnlock()
	out := &controllerv1.DescribeClientQuotasResponse{}
	for _, e := range set.GetEntries() {
		if f.Matches(quota.EntityFromProto(e.GetEntity())) {
			out.Entries = append(out.Entries, e)
		}
	}
	return out, nil
}
