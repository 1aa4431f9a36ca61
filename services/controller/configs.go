package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/naming"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// checkTopicConfigs validates topic overrides against the config table.
func checkTopicConfigs(configs map[string]string) error { return topicconfig.Validate(configs) }

func validateConfigResources(r *controllerv1.DescribeConfigsRequest) error {
	var f errs.Fields
	if len(r.GetResources()) == 0 {
		f.Add("resources", "at least one resource is required")
	}
	for i, res := range r.GetResources() {
		checkResource(&f, fmt.Sprintf("resources[%d]", i), res)
	}
	return f.Err()
}

func validateAlterConfigs(r *controllerv1.AlterConfigsRequest) error {
	var f errs.Fields
	if len(r.GetResources()) == 0 {
		f.Add("resources", "at least one resource is required")
	}
	for i, res := range r.GetResources() {
		path := fmt.Sprintf("resources[%d]", i)
		checkResource(&f, path+".resource", res.GetResource())
		if len(res.GetOps()) == 0 {
			f.Add(path+".ops", "at least one change is required")
		}
		for j, op := range res.GetOps() {
			opPath := fmt.Sprintf("%s.ops[%d]", path, j)
			if op.GetName() == "" {
				f.AddCode(errs.InvalidConfig, opPath+".name", "is empty")
			}
			if op.GetOp() == controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_UNSPECIFIED || op.GetOp() > controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SUBTRACT {
				f.Add(opPath+".op", "must be SET, DELETE, APPEND or SUBTRACT")
			}
		}
	}
	return f.Err()
}

func checkResource(f *errs.Fields, path string, res *controllerv1.ConfigResource) {
	switch res.GetType() {
	case controllerv1.ResourceType_RESOURCE_TYPE_TOPIC:
		if err := naming.ValidateTopic(res.GetName()); err != nil {
			f.AddCode(errs.InvalidTopic, path+".name", "%v", err)
		}
	case controllerv1.ResourceType_RESOURCE_TYPE_BROKER:
		if res.GetName() != "" {
			if _, err := strconv.Atoi(res.GetName()); err != nil {
				f.Add(path+".name", "a broker resource is a node id or empty (the cluster-wide default), got %q", res.GetName())
			}
		}
	default:
		f.Add(path+".type", "configs exist for TOPIC and BROKER resources only")
	}
}

// DescribeConfigs returns effective topic configs with their sources, or a
// node's settings (the cluster-wide dynamic defaults and this controller's
// static settings).
func (c *Controller) DescribeConfigs(ctx context.Context, r *controllerv1.DescribeConfigsRequest) (*controllerv1.DescribeConfigsResponse, error) {
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := &controllerv1.DescribeConfigsResponse{}
	cluster := c.st.clusterConfigs.val.GetConfigs()
	for _, res := range r.GetResources() {
		rr := &controllerv1.ConfigResourceResult{Resource: res}
		out.Results = append(out.Results, rr)
		if err := c.checkConfigResource(ctx, authz.DescribeConfigs, res); err != nil {
			rr.Error = errs.ItemError(err)
			continue
		}
		want := func(name string) bool { return len(r.GetNames()) == 0 || slices.Contains(r.GetNames(), name) }
		switch res.GetType() {
		case controllerv1.ResourceType_RESOURCE_TYPE_TOPIC:
			t, ok := c.st.topics[res.GetName()]
			if !ok {
				rr.Error = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", res.GetName()).Proto()
				continue
			}
			for _, d := range topicconfig.All() {
				if !want(d.Name) {
					continue
				}
				v, src := topicconfig.Resolve(d.Name, t.val.GetConfigs(), cluster)
				e := &controllerv1.ConfigEntry{Name: d.Name, Value: &v, Source: sourceOf(src)}
				if r.GetIncludeDocumentation() {
					e.Documentation = d.Doc
				}
				rr.Entries = append(rr.Entries, e)
			}
		case controllerv1.ResourceType_RESOURCE_TYPE_BROKER:
			for _, d := range topicconfig.All() {
				if d.BrokerName == "" || !want(d.BrokerName) {
					continue
				}
				v, src := d.Default, controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT
				if cv, ok := cluster[d.BrokerName]; ok {
					v, src = cv, controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
				}
				e := &controllerv1.ConfigEntry{Name: d.BrokerName, Value: &v, Source: src}
				if r.GetIncludeDocumentation() {
					e.Documentation = "Cluster-wide default of the topic config " + d.Name + ". " + d.Doc
				}
				rr.Entries = append(rr.Entries, e)
			}
			for _, d := range topicconfig.ClusterOnly() {
				v, ok := cluster[d.BrokerName]
				if !ok || !want(d.BrokerName) {
					continue // unset: no value to show (its default is "none")
				}
				e := &controllerv1.ConfigEntry{Name: d.BrokerName, Value: &v, Source: controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER}
				if r.GetIncludeDocumentation() {
					e.Documentation = d.Doc
				}
				rr.Entries = append(rr.Entries, e)
			}
			for name, v := range c.staticConfigs() {
				if !want(name) {
					continue
				}
				rr.Entries = append(rr.Entries, &controllerv1.ConfigEntry{Name: name, Value: &v,
					Source: controllerv1.ConfigSource_CONFIG_SOURCE_STATIC_BROKER, ReadOnly: true})
			}
			sort.Slice(rr.Entries, func(i, j int) bool { return rr.Entries[i].GetName() < rr.Entries[j].GetName() })
		}
	}
	return out, nil
}

// staticConfigs are the controller's settings from its command line, under
// Kafka's names.
func (c *Controller) staticConfigs() map[string]string {
	ms := func(d interface{ Milliseconds() int64 }) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	return map[string]string{
		"num.partitions":                          strconv.Itoa(c.cfg.DefaultPartitions),
		"default.replication.factor":              strconv.Itoa(c.cfg.DefaultReplicationFactor),
		"broker.session.timeout.ms":               ms(c.cfg.SessionTimeout),
		"broker.heartbeat.interval.ms":            ms(c.cfg.HeartbeatInterval),
		"auto.leader.rebalance.enable":            strconv.FormatBool(c.cfg.LeaderImbalanceCheckInterval > 0),
		"leader.imbalance.check.interval.seconds": strconv.FormatInt(int64(c.cfg.LeaderImbalanceCheckInterval.Seconds()), 10),
		"leader.imbalance.per.broker.percentage":  strconv.Itoa(c.cfg.LeaderImbalancePercentage),
	}
}

func sourceOf(s topicconfig.Source) controllerv1.ConfigSource {
	switch s {
	case topicconfig.FromTopic:
		return controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_TOPIC
	case topicconfig.FromClusterDefault:
		return controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
	default:
		return controllerv1.ConfigSource_CONFIG_SOURCE_DEFAULT
	}
}

// applyOps applies incremental changes to a config map.
func applyOps(cur map[string]string, ops []*controllerv1.AlterConfigOp, isList func(string) bool) (map[string]string, error) {
	next := maps.Clone(cur)
	if next == nil {
		next = map[string]string{}
	}
	for _, op := range ops {
		switch op.GetOp() {
		case controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET:
			next[op.GetName()] = op.GetValue()
		case controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE:
			delete(next, op.GetName())
		case controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_APPEND, controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SUBTRACT:
			if !isList(op.GetName()) {
				return nil, errs.New(errs.InvalidConfig, "%s is not a list: APPEND and SUBTRACT apply to list configs only", op.GetName())
			}
			items := topicconfig.SplitList(next[op.GetName()])
			if op.GetOp() == controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_APPEND {
				if !slices.Contains(items, op.GetValue()) {
					items = append(items, op.GetValue())
				}
			} else {
				items = without2(items, op.GetValue())
			}
			if len(items) == 0 {
				delete(next, op.GetName())
			} else {
				next[op.GetName()] = joinList(items)
			}
		}
	}
	return next, nil
}

func without2(items []string, x string) []string {
	out := items[:0:0]
	for _, it := range items {
		if it != x {
			out = append(out, it)
		}
	}
	return out
}

func joinList(items []string) string {
	s := ""
	for i, it := range items {
		if i > 0 {
			s += ","
		}
		s += it
	}
	return s
}

// AlterConfigs changes topic overrides or the cluster-wide dynamic defaults,
// atomically per resource.
func (c *Controller) AlterConfigs(ctx context.Context, r *controllerv1.AlterConfigsRequest) (*controllerv1.AlterConfigsResponse, error) {
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	out := &controllerv1.AlterConfigsResponse{}
	for _, res := range r.GetResources() {
		rr := &controllerv1.AlterConfigsResult{Resource: res.GetResource()}
		out.Results = append(out.Results, rr)
		err := c.checkConfigResource(ctx, authz.AlterConfigs, res.GetResource())
		switch {
		case err != nil:
		case res.GetResource().GetType() == controllerv1.ResourceType_RESOURCE_TYPE_TOPIC:
			err = c.alterTopicConfigs(ctx, t, res, r.GetValidateOnly())
		default:
			err = c.alterClusterConfigs(ctx, t, res, r.GetValidateOnly())
		}
		rr.Error = errs.ItemError(err)
	}
	return out, nil
}

func (c *Controller) alterTopicConfigs(ctx context.Context, t *term, res *controllerv1.AlterConfigsResource, validateOnly bool) error {
	name := res.GetResource().GetName()
	isList := func(n string) bool { d, ok := topicconfig.Lookup(n); return ok && d.Kind == topicconfig.List }
	_, err := c.update(ctx, t, func(st *state) (*txn, error) {
		tr, ok := st.topics[name]
		if !ok {
			return nil, errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name)
		}
		next, err := applyOps(tr.val.GetConfigs(), res.GetOps(), isList)
		if err != nil {
			return nil, err
		}
		if err := topicconfig.Validate(next); err != nil {
			return nil, err
		}
		if err := st.checkMinISR(name, next, st.replicationFactor(name)); err != nil {
			return nil, err
		}
		if validateOnly || maps.Equal(next, tr.val.GetConfigs()) {
			return nil, nil
		}
		rec := proto.Clone(tr.val).(*metastorev1.TopicRecord)
		rec.Configs, rec.ControllerEpoch = next, t.epoch
		x := &txn{}
		c.put(x, metastore.TopicKey(name), tr.modRev, rec)
		return x, nil
	})
	if err == nil && !validateOnly {
		c.logger.Info("topic configs altered", log.Topic(name))
	}
	return err
}

func (c *Controller) alterClusterConfigs(ctx context.Context, t *term, res *controllerv1.AlterConfigsResource, validateOnly bool) error {
	if res.GetResource().GetName() != "" {
		return errs.New(errs.PolicyViolation, "dynamic configs are set cluster-wide: use the BROKER resource with an empty name, not node %q",
			res.GetResource().GetName())
	}
	isList := func(n string) bool { d, ok := topicconfig.LookupBroker(n); return ok && d.Kind == topicconfig.List }
	_, err := c.update(ctx, t, func(st *state) (*txn, error) {
		cur := st.clusterConfigs.val.GetConfigs()
		next, err := applyOps(cur, res.GetOps(), isList)
		if err != nil {
			return nil, err
		}
		for name, v := range next {
			d, ok := topicconfig.LookupBroker(name)
			if !ok {
				return nil, errs.New(errs.InvalidConfig, "%s is not a dynamic cluster config; dynamic defaults use Kafka's broker names such as log.retention.ms", name)
			}
			if err := d.Check(v); err != nil {
				return nil, errs.New(errs.InvalidConfig, "%s: %v", name, err)
			}
		}
		if err := st.checkDefaultMinISR(next); err != nil {
			return nil, err
		}
		if validateOnly || maps.Equal(next, cur) {
			return nil, nil
		}
		x := &txn{}
		c.put(x, metastore.BrokerConfigKey(-1), st.clusterConfigs.modRev, &metastorev1.ConfigRecord{Configs: next})
		return x, nil
	})
	return err
}

// checkMinISR refuses topic overrides whose effective min.insync.replicas,
// under the current cluster-wide defaults, is above the replication factor.
func (s *state) checkMinISR(topic string, overrides map[string]string, rf int) error {
	return topicconfig.CheckMinInsyncReplicas(topic, overrides, s.clusterConfigs.val.GetConfigs(), rf)
}

// replicationFactor is a topic's replication factor: the fewest replicas of
// any of its partitions (a partition being reassigned counts its current
// replicas).
func (s *state) replicationFactor(topic string) int {
	rf := 0
	for _, p := range s.partitions[topic] {
		if n := len(p.val.GetState().GetReplicas()); rf == 0 || n < rf {
			rf = n
		}
	}
	return rf
}

// checkDefaultMinISR refuses cluster-wide defaults under which a topic that
// does not override min.insync.replicas would need more in-sync replicas
// than it has (see topicconfig.CheckMinInsyncReplicas). It names a few such
// topics, so the operator can set their own value first.
func (s *state) checkDefaultMinISR(cluster map[string]string) error {
	var bad []string
	for name, t := range s.topics {
		rf := s.replicationFactor(name)
		if rf > 0 && topicconfig.CheckMinInsyncReplicas(name, t.val.GetConfigs(), cluster, rf) != nil {
			bad = append(bad, fmt.Sprintf("%s (replication factor %d)", name, rf))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	more := ""
	if len(bad) > 5 {
		more = fmt.Sprintf(" and %d more", len(bad)-5)
		bad = bad[:5]
	}
	v, _ := topicconfig.Resolve("min.insync.replicas", nil, cluster)
	return errs.New(errs.InvalidConfig,
		"min.insync.replicas %s as the cluster-wide default is larger than the replication factor of topics that do not override it: %s%s; "+
			"no acks=all produce to them could succeed. Set min.insync.replicas on those topics first, or raise their replication factor",
		v, strings.Join(bad, ", "), more)
}
