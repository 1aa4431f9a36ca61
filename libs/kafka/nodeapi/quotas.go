package nodeapi

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/quota"
)

// Versions of the client quota APIs (KIP-546): v1 is flexible.
const (
	describeQuotasMin, describeQuotasMax = 0, 1
	alterQuotasMin, alterQuotasMax       = 0, 1
)

// quotaComponent converts a Kafka entity component: a null name is the
// type's default (Kafka's <default>).
func quotaComponent(typ string, name *string) *controllerv1.QuotaEntityComponent {
	if name == nil {
		return &controllerv1.QuotaEntityComponent{Type: typ, IsDefault: true}
	}
	return &controllerv1.QuotaEntityComponent{Type: typ, Name: *name}
}

// kafkaQuotaName is a component's Kafka name: null for the default.
func kafkaQuotaName(c *controllerv1.QuotaEntityComponent) *string {
	if c.GetIsDefault() {
		return nil
	}
	name := c.GetName()
	return &name
}

// describeClientQuotas answers DescribeClientQuotas (48) from the active
// controller: DescribeConfigs on the cluster (Kafka's rule), then the
// entities the filter matches with their values.
func (n *node) describeClientQuotas(ctx context.Context, req *kmsg.DescribeClientQuotasRequest) *kmsg.DescribeClientQuotasResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrDescribeClientQuotasResponse()
	fail := func(err error) *kmsg.DescribeClientQuotasResponse {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	if err := authz.Check(ctx, n.authz, authz.DescribeConfigs, authz.Cluster, authz.ClusterName); err != nil {
		return fail(err)
	}
	in := &controllerv1.DescribeClientQuotasRequest{Strict: req.Strict}
	for i, c := range req.Components {
		fc := &controllerv1.QuotaFilterComponent{Type: c.EntityType}
		switch c.MatchType {
		case kmsg.QuotasMatchTypeExact:
			if c.Match == nil {
				return fail(errorf(errs.InvalidRequest, "components[%d]: an exact match (0) needs a name to match; use match type 1 for the default", i))
			}
			fc.MatchType, fc.Match = controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_EXACT, *c.Match
		case kmsg.QuotasMatchTypeDefault:
			fc.MatchType = controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_DEFAULT
		case kmsg.QuotasMatchTypeAny:
			fc.MatchType = controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_ANY
		default:
			return fail(errorf(errs.InvalidRequest, "components[%d]: match type %d: want exact (0), default (1) or any (2)", i, c.MatchType))
		}
		in.Components = append(in.Components, fc)
	}
	var out *controllerv1.DescribeClientQuotasResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeClientQuotas(ctx, in)
		return err
	})
	if err != nil {
		return fail(err)
	}
	for _, e := range out.GetEntries() {
		re := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, c := range e.GetEntity() {
			ent := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ent.Type, ent.Name = c.GetType(), kafkaQuotaName(c)
			re.Entity = append(re.Entity, ent)
		}
		for _, k := range slices.Sorted(maps.Keys(e.GetValues())) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, e.GetValues()[k]
			re.Values = append(re.Values, v)
		}
		resp.Entries = append(resp.Entries, re)
	}
	return resp
}

// alterClientQuotas answers AlterClientQuotas (49) through the active
// controller: AlterConfigs on the cluster (Kafka's rule; without it every
// entry is refused), then each entry validated and written on its own and
// answered in its slot. The controller logs the change under this
// process's identity; the line written here names the Kafka client who
// asked and where from.
func (n *node) alterClientQuotas(ctx context.Context, req *kmsg.AlterClientQuotasRequest) *kmsg.AlterClientQuotasResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrAlterClientQuotasResponse()
	in := &controllerv1.AlterClientQuotasRequest{ValidateOnly: req.ValidateOnly}
	for _, e := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		a := &controllerv1.ClientQuotaAlteration{}
		for _, c := range e.Entity {
			ent := kmsg.NewAlterClientQuotasResponseEntryEntity()
			ent.Type, ent.Name = c.Type, c.Name
			re.Entity = append(re.Entity, ent)
			a.Entity = append(a.Entity, quotaComponent(c.Type, c.Name))
		}
		for _, op := range e.Ops {
			a.Ops = append(a.Ops, &controllerv1.ClientQuotaOp{Key: op.Key, Value: op.Value, Remove: op.Remove})
		}
		resp.Entries = append(resp.Entries, re)
		in.Entries = append(in.Entries, a)
	}
	failAll := func(err error) *kmsg.AlterClientQuotasResponse {
		for i := range resp.Entries {
			resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = kafkaError(err)
		}
		return resp
	}
	if len(req.Entries) == 0 {
		return resp
	}
	if err := authz.Check(ctx, n.authz, authz.AlterConfigs, authz.Cluster, authz.ClusterName); err != nil {
		return failAll(err)
	}
	var out *controllerv1.AlterClientQuotasResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.AlterClientQuotas(ctx, in)
		return err
	})
	if err != nil {
		return failAll(err)
	}
	for i := range resp.Entries {
		if i >= len(out.GetResults()) {
			resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = kafkaError(errorf(errs.UnknownServerError, "the controller answered %d of %d entries", len(out.GetResults()), len(resp.Entries)))
			continue
		}
		if e := errs.FromProto(out.GetResults()[i].GetError()); e != nil {
			resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = protoError(e)
			continue
		}
		if !req.ValidateOnly {
			n.auditQuota(ctx, in.Entries[i])
		}
	}
	return resp
}

// auditQuota writes the audit line of a quota change made over Kafka.
func (n *node) auditQuota(ctx context.Context, a *controllerv1.ClientQuotaAlteration) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		id.Principal = auth.Anonymous
	}
	var change []string
	for _, op := range a.GetOps() {
		if op.GetRemove() {
			change = append(change, "remove "+op.GetKey())
		} else {
			change = append(change, "set "+op.GetKey()+"="+strconv.FormatFloat(op.GetValue(), 'f', -1, 64))
		}
	}
	authz.AuditLine(ctx, n.logger.With(slog.String("quota_change", strings.Join(change, " ")), slog.String("listener", "kafka")),
		"client quota altered", id, "AlterClientQuotas", "client-quota:"+quota.EntityKey(quota.EntityFromProto(a.GetEntity())), true)
}
