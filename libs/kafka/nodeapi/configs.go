package nodeapi

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// configResource converts a Kafka config resource. Sluice has configs for
// topics and brokers only (a broker resource named "" is the cluster-wide
// default); other kinds (broker loggers, client metrics, groups) are
// refused with a message saying so.
func configResource(t kmsg.ConfigResourceType, name string) (*controllerv1.ConfigResource, error) {
	switch t {
	case kmsg.ConfigResourceTypeTopic:
		return &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: name}, nil
	case kmsg.ConfigResourceTypeBroker:
		return &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_BROKER, Name: name}, nil
	}
	return nil, errorf(errs.InvalidRequest, "Sluice has no %s configs: only TOPIC and BROKER resources have configs", t)
}

// checkConfig checks op (DescribeConfigs or AlterConfigs) on a config
// resource: the topic, or the cluster for broker settings (Kafka's rule).
func (n *node) checkConfig(ctx context.Context, op authz.Operation, t kmsg.ConfigResourceType, name string) error {
	if t == kmsg.ConfigResourceTypeTopic {
		return authz.Check(ctx, n.authz, op, authz.Topic, name)
	}
	return authz.Check(ctx, n.authz, op, authz.Cluster, authz.ClusterName)
}

// resourceKey identifies a resource among those of one request.
func resourceKey(t kmsg.ConfigResourceType, name string) string { return fmt.Sprintf("%d/%s", t, name) }

// describeConfigs forwards DescribeConfigs to the controller (any
// controller answers reads). Every entry is fetched and each resource's
// names are picked here, as Kafka resources each name their own.
func (n *node) describeConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest) *kmsg.DescribeConfigsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrDescribeConfigsResponse()
	resp.Resources = make([]kmsg.DescribeConfigsResponseResource, len(req.Resources))
	var items []*controllerv1.ConfigResource
	var at []int
	for i, r := range req.Resources {
		rr := &resp.Resources[i]
		*rr = kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		res, err := configResource(r.ResourceType, r.ResourceName)
		if err == nil {
			err = n.checkConfig(ctx, authz.DescribeConfigs, r.ResourceType, r.ResourceName)
		}
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = kafkaError(err)
			continue
		}
		items = append(items, res)
		at = append(at, i)
	}
	includeDocs := req.Version >= 3 && req.IncludeDocumentation
	results := perItem(ctx, n, items,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.ConfigResource) ([]*controllerv1.ConfigResourceResult, error) {
			r, err := cc.DescribeConfigs(ctx, &controllerv1.DescribeConfigsRequest{Resources: items, IncludeDocumentation: includeDocs})
			return r.GetResults(), err
		},
		func(res *controllerv1.ConfigResource, err error) *controllerv1.ConfigResourceResult {
			return &controllerv1.ConfigResourceResult{Resource: res, Error: errs.ItemError(err)}
		})
	img := n.cache.Load()
	for j, r := range results {
		rr := &resp.Resources[at[j]]
		if e := errs.FromProto(r.GetError()); e != nil {
			rr.ErrorCode, rr.ErrorMessage = protoError(e)
			continue
		}
		want := req.Resources[at[j]].ConfigNames
		for _, e := range r.GetEntries() {
			if want != nil && !slices.Contains(want, e.GetName()) {
				continue
			}
			rr.Configs = append(rr.Configs, configEntry(img, rr.ResourceType, rr.ResourceName, e, req.Version >= 1 && req.IncludeSynonyms, includeDocs))
		}
	}
	return resp
}

// configEntry converts one described entry.
func configEntry(img *metadata.Image, t kmsg.ConfigResourceType, resource string, e *controllerv1.ConfigEntry, synonyms, docs bool) kmsg.DescribeConfigsResponseResourceConfig {
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name = e.GetName()
	if !e.GetSensitive() {
		c.Value = e.Value
	}
	c.ReadOnly, c.IsSensitive = e.GetReadOnly(), e.GetSensitive()
	c.Source = kmsg.ConfigSource(e.GetSource()) // Sluice's sources carry Kafka's numbers
	c.IsDefault = e.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT
	c.ConfigType = configType(t, e.GetName())
	if docs {
		d := e.GetDocumentation()
		c.Documentation = &d
	}
	if synonyms {
		c.ConfigSynonyms = configSynonyms(img, t, resource, e)
	}
	return c
}

// configSynonyms lists where an entry's value could come from, most
// specific first, as Kafka does: the topic's override, the cluster-wide
// dynamic default under its broker name, the built-in default. The first
// one present is the value in force. Overrides come from this node's
// metadata, which may trail the controller's answer by a moment.
func configSynonyms(img *metadata.Image, t kmsg.ConfigResourceType, resource string, e *controllerv1.ConfigEntry) []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	var out []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
	add := func(name string, v string, src kmsg.ConfigSource) {
		s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		value := v
		s.Name, s.Value, s.Source = name, &value, src
		out = append(out, s)
	}
	var d topicconfig.Def
	var ok bool
	switch t {
	case kmsg.ConfigResourceTypeTopic:
		d, ok = topicconfig.Lookup(e.GetName())
		if tp, found := img.Topics[resource]; ok && found {
			if v, set := tp.Configs[d.Name]; set {
				add(d.Name, v, kmsg.ConfigSourceDynamicTopicConfig)
			}
		}
	case kmsg.ConfigResourceTypeBroker:
		d, ok = topicconfig.LookupBroker(e.GetName())
	}
	if !ok {
		// A setting outside the topic config table (a node's static
		// setting): its own value is the only one.
		if e.Value != nil && !e.GetSensitive() {
			add(e.GetName(), e.GetValue(), kmsg.ConfigSource(e.GetSource()))
		}
		return out
	}
	if d.BrokerName != "" {
		if v, set := img.ClusterConfigs[d.BrokerName]; set {
			add(d.BrokerName, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
		}
	}
	name := d.BrokerName
	if name == "" {
		name = d.Name
	}
	add(name, d.Default, kmsg.ConfigSourceDefaultConfig)
	return out
}

// staticTypes are the types of the static node settings the controller
// describes on broker resources (under Kafka's names).
var staticTypes = map[string]kmsg.ConfigType{
	"num.partitions":                          kmsg.ConfigTypeInt,
	"default.replication.factor":              kmsg.ConfigTypeShort,
	"broker.session.timeout.ms":               kmsg.ConfigTypeInt,
	"broker.heartbeat.interval.ms":            kmsg.ConfigTypeInt,
	"auto.leader.rebalance.enable":            kmsg.ConfigTypeBoolean,
	"leader.imbalance.check.interval.seconds": kmsg.ConfigTypeLong,
	"leader.imbalance.per.broker.percentage":  kmsg.ConfigTypeInt,
}

// configType is the Kafka type of a config entry (UNKNOWN when Sluice does
// not know it).
func configType(t kmsg.ConfigResourceType, name string) kmsg.ConfigType {
	var d topicconfig.Def
	var ok bool
	if t == kmsg.ConfigResourceTypeTopic {
		d, ok = topicconfig.Lookup(name)
	} else {
		d, ok = topicconfig.LookupBroker(name)
	}
	if !ok {
		return staticTypes[name]
	}
	switch d.Kind {
	case topicconfig.Long:
		return kmsg.ConfigTypeLong
	case topicconfig.Int:
		return kmsg.ConfigTypeInt
	case topicconfig.Bool:
		return kmsg.ConfigTypeBoolean
	case topicconfig.Double:
		return kmsg.ConfigTypeDouble
	case topicconfig.String:
		return kmsg.ConfigTypeString
	case topicconfig.List:
		return kmsg.ConfigTypeList
	}
	return kmsg.ConfigTypeUnknown
}

// checkConfigName refuses a config name the resource does not have, as
// Kafka does for every operation (Sluice's controller alone would accept
// deleting an unknown name as a no-op).
func checkConfigName(t kmsg.ConfigResourceType, name string) error {
	switch t {
	case kmsg.ConfigResourceTypeTopic:
		if _, ok := topicconfig.Lookup(name); !ok {
			return errorf(errs.InvalidConfig, "unknown topic config %q", name)
		}
	case kmsg.ConfigResourceTypeBroker:
		if _, ok := topicconfig.LookupBroker(name); !ok {
			return errorf(errs.InvalidConfig, "%q is not a dynamic cluster config; dynamic defaults use Kafka's broker names such as log.retention.ms", name)
		}
	}
	return nil
}

// alterItem is one resource to alter, converted.
type alterItem struct {
	at  int
	res *controllerv1.AlterConfigsResource
}

// incrementalOps maps Kafka's IncrementalAlterConfigs operations.
var incrementalOps = map[kmsg.IncrementalAlterConfigOp]controllerv1.AlterConfigOpType{
	kmsg.IncrementalAlterConfigOpSet:      controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET,
	kmsg.IncrementalAlterConfigOpDelete:   controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE,
	kmsg.IncrementalAlterConfigOpAppend:   controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_APPEND,
	kmsg.IncrementalAlterConfigOpSubtract: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SUBTRACT,
}

// incrementalResource converts one IncrementalAlterConfigs resource.
func incrementalResource(r kmsg.IncrementalAlterConfigsRequestResource) (*controllerv1.AlterConfigsResource, error) {
	res, err := configResource(r.ResourceType, r.ResourceName)
	if err != nil {
		return nil, err
	}
	out := &controllerv1.AlterConfigsResource{Resource: res}
	seen := map[string]bool{}
	for _, c := range r.Configs {
		if seen[c.Name] {
			return nil, errorf(errs.InvalidRequest, "config %s is altered twice in one resource", c.Name)
		}
		seen[c.Name] = true
		op, ok := incrementalOps[c.Op]
		if !ok {
			return nil, errorf(errs.InvalidRequest, "config %s: unknown operation %d (SET 0, DELETE 1, APPEND 2, SUBTRACT 3)", c.Name, c.Op)
		}
		if err := checkConfigName(r.ResourceType, c.Name); err != nil {
			return nil, err
		}
		if c.Value == nil && op != controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE {
			return nil, errorf(errs.InvalidRequest, "config %s: a null value is only allowed with DELETE", c.Name)
		}
		ac := &controllerv1.AlterConfigOp{Name: c.Name, Op: op}
		if c.Value != nil {
			ac.Value = *c.Value
		}
		out.Ops = append(out.Ops, ac)
	}
	return out, nil
}

// incrementalAlterConfigs forwards IncrementalAlterConfigs to the active
// controller, whose AlterConfigs has the same operations.
func (n *node) incrementalAlterConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) *kmsg.IncrementalAlterConfigsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	resp.Resources = make([]kmsg.IncrementalAlterConfigsResponseResource, len(req.Resources))
	dups := duplicates(req.Resources, func(r kmsg.IncrementalAlterConfigsRequestResource) string {
		return resourceKey(r.ResourceType, r.ResourceName)
	})
	var items []alterItem
	for i, r := range req.Resources {
		rr := &resp.Resources[i]
		*rr = kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		res, err := incrementalResource(r)
		if dups[resourceKey(r.ResourceType, r.ResourceName)] > 1 {
			err = errorf(errs.InvalidRequest, "resource %s %q appears more than once in the request", r.ResourceType, r.ResourceName)
		}
		if err == nil {
			err = n.checkConfig(ctx, authz.AlterConfigs, r.ResourceType, r.ResourceName)
		}
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = kafkaError(err)
			continue
		}
		if len(res.GetOps()) == 0 {
			continue // nothing to change, which Kafka answers with success
		}
		items = append(items, alterItem{at: i, res: res})
	}
	for j, e := range n.forwardAlter(ctx, items, req.ValidateOnly) {
		rr := &resp.Resources[items[j].at]
		rr.ErrorCode, rr.ErrorMessage = protoError(e)
	}
	return resp
}

// forwardAlter sends alterations to the active controller and returns each
// one's error (nil on success).
func (n *node) forwardAlter(ctx context.Context, items []alterItem, validateOnly bool) []*errs.Error {
	res := make([]*controllerv1.AlterConfigsResource, len(items))
	for i, it := range items {
		res[i] = it.res
	}
	results := perItem(ctx, n, res,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.AlterConfigsResource) ([]*controllerv1.AlterConfigsResult, error) {
			r, err := cc.AlterConfigs(ctx, &controllerv1.AlterConfigsRequest{Resources: items, ValidateOnly: validateOnly})
			return r.GetResults(), err
		},
		func(r *controllerv1.AlterConfigsResource, err error) *controllerv1.AlterConfigsResult {
			return &controllerv1.AlterConfigsResult{Resource: r.GetResource(), Error: errs.ItemError(err)}
		})
	out := make([]*errs.Error, len(results))
	for i, r := range results {
		out[i] = errs.FromProto(r.GetError())
	}
	return out
}

// alterConfigs serves the legacy AlterConfigs, which replaces a resource's
// whole set of overrides: entries not named go back to their defaults. It
// reads the current overrides from the controller and sends SET for every
// named entry and DELETE for every other override. The read and the write
// are two calls, so an alteration made between them by someone else may be
// undone, which is why Kafka deprecated this API for
// IncrementalAlterConfigs.
func (n *node) alterConfigs(ctx context.Context, req *kmsg.AlterConfigsRequest) *kmsg.AlterConfigsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrAlterConfigsResponse()
	resp.Resources = make([]kmsg.AlterConfigsResponseResource, len(req.Resources))
	dups := duplicates(req.Resources, func(r kmsg.AlterConfigsRequestResource) string {
		return resourceKey(r.ResourceType, r.ResourceName)
	})
	var items []alterItem
	fail := func(i int, err error) {
		resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = kafkaError(err)
	}
	for i, r := range req.Resources {
		rr := &resp.Resources[i]
		*rr = kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		res, err := legacyResource(r)
		if dups[resourceKey(r.ResourceType, r.ResourceName)] > 1 {
			err = errorf(errs.InvalidRequest, "resource %s %q appears more than once in the request", r.ResourceType, r.ResourceName)
		}
		if err == nil {
			err = n.checkConfig(ctx, authz.AlterConfigs, r.ResourceType, r.ResourceName)
		}
		if err != nil {
			fail(i, err)
			continue
		}
		items = append(items, alterItem{at: i, res: res})
	}
	// Current overrides, to delete those the request leaves out.
	var current []*controllerv1.ConfigResource
	for _, it := range items {
		current = append(current, it.res.GetResource())
	}
	described := perItem(ctx, n, current,
		func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []*controllerv1.ConfigResource) ([]*controllerv1.ConfigResourceResult, error) {
			r, err := cc.DescribeConfigs(ctx, &controllerv1.DescribeConfigsRequest{Resources: items})
			return r.GetResults(), err
		},
		func(res *controllerv1.ConfigResource, err error) *controllerv1.ConfigResourceResult {
			return &controllerv1.ConfigResourceResult{Resource: res, Error: errs.ItemError(err)}
		})
	var send []alterItem
	for j, d := range described {
		it := items[j]
		if e := errs.FromProto(d.GetError()); e != nil {
			fail(it.at, e)
			continue
		}
		for _, e := range d.GetEntries() {
			if !isOverride(it.res.GetResource(), e) || slices.ContainsFunc(it.res.GetOps(), func(op *controllerv1.AlterConfigOp) bool { return op.GetName() == e.GetName() }) {
				continue
			}
			it.res.Ops = append(it.res.Ops, &controllerv1.AlterConfigOp{Name: e.GetName(), Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE})
		}
		if len(it.res.GetOps()) == 0 {
			continue // nothing set and nothing to reset
		}
		send = append(send, it)
	}
	for j, e := range n.forwardAlter(ctx, send, req.ValidateOnly) {
		if e != nil {
			fail(send[j].at, e)
		}
	}
	return resp
}

// isOverride reports whether a described entry is set dynamically on the
// resource, the set the legacy AlterConfigs replaces.
func isOverride(res *controllerv1.ConfigResource, e *controllerv1.ConfigEntry) bool {
	if res.GetType() == controllerv1.ResourceType_RESOURCE_TYPE_TOPIC {
		return e.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_TOPIC
	}
	return e.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER ||
		e.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_BROKER
}

// legacyResource converts one AlterConfigs resource to SET operations.
func legacyResource(r kmsg.AlterConfigsRequestResource) (*controllerv1.AlterConfigsResource, error) {
	res, err := configResource(r.ResourceType, r.ResourceName)
	if err != nil {
		return nil, err
	}
	out := &controllerv1.AlterConfigsResource{Resource: res}
	seen := map[string]bool{}
	for _, c := range r.Configs {
		if seen[c.Name] {
			return nil, errorf(errs.InvalidRequest, "config %s is given twice in one resource", c.Name)
		}
		seen[c.Name] = true
		if err := checkConfigName(r.ResourceType, c.Name); err != nil {
			return nil, err
		}
		if c.Value == nil {
			return nil, errorf(errs.InvalidRequest, "config %s has a null value; leave it out to reset it to its default", c.Name)
		}
		out.Ops = append(out.Ops, &controllerv1.AlterConfigOp{Name: c.Name, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: *c.Value})
	}
	return out, nil
}
