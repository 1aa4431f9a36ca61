package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// reassignOpts are the flags of the plan-driven forms of
// `sluice partition reassign`.
type reassignOpts struct {
	generate, execute, verify bool
	file                      string
	throttle                  int64
	topics                    string
	brokers                   string
	removeBrokers             string
}

func (o *reassignOpts) planMode() bool { return o.generate || o.execute || o.verify }

func parseIDList(flag, s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%s: %q is not a node id", flag, f)
		}
		out = append(out, int32(id))
	}
	return out, nil
}

// storageNodes returns the ids of the registered storage nodes.
func storageNodes(ctx context.Context, c *client.Client) ([]int32, error) {
	resp, err := c.DescribeCluster(ctx)
	if err != nil {
		return nil, err
	}
	var out []int32
	for _, b := range resp.GetBrokers() {
		if slices.Contains(b.GetRoles(), "storage-node") {
			out = append(out, b.GetId())
		}
	}
	return out, nil
}

// currentAssignment reads the replica lists of the named topics (every
// topic, internal ones included, when none is named: a node to remove
// holds replicas of those too).
func currentAssignment(ctx context.Context, c *client.Client, topics []string) (map[planKey][]int32, error) {
	if len(topics) == 0 {
		l, err := c.ListTopics(ctx, true)
		if err != nil {
			return nil, err
		}
		for _, t := range l.GetTopics() {
			topics = append(topics, t.GetName())
		}
		if len(topics) == 0 {
			return nil, errors.New("the cluster has no topic")
		}
	}
	d, err := c.DescribeTopics(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := map[planKey][]int32{}
	for _, t := range d.GetTopics() {
		if e := itemErr(t.GetError()); e != nil {
			return nil, fmt.Errorf("%s: %w", t.GetName(), e)
		}
		for _, p := range t.GetPartitions() {
			if len(p.GetAddingReplicas()) > 0 || len(p.GetRemovingReplicas()) > 0 {
				return nil, fmt.Errorf("%s:%d is being reassigned: wait for it (--verify) or cancel it before planning", t.GetName(), p.GetPartition())
			}
			out[planKey{t.GetName(), p.GetPartition()}] = slices.Clone(p.GetReplicas())
		}
	}
	return out, nil
}

func writePlan(w io.Writer, title string, p *reassignPlan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n%s\n", title, b)
	return err
}

// runGenerate prints a proposed plan and the current assignment of the
// partitions it moves (to roll back with).
func runGenerate(ctx context.Context, w io.Writer, c *client.Client, o *reassignOpts) error {
	nodes, err := storageNodes(ctx, c)
	if err != nil {
		return err
	}
	brokers := nodes
	if o.brokers != "" {
		if brokers, err = parseIDList("--brokers", o.brokers); err != nil {
			return err
		}
		for _, b := range brokers {
			if !slices.Contains(nodes, b) {
				return fmt.Errorf("--brokers: %d is not a registered storage node (storage nodes: %s)", b, ids(nodes))
			}
		}
	}
	remove, err := parseIDList("--remove-brokers", o.removeBrokers)
	if err != nil {
		return err
	}
	for _, r := range remove {
		if !slices.Contains(nodes, r) {
			return fmt.Errorf("--remove-brokers: %d is not a registered storage node (storage nodes: %s)", r, ids(nodes))
		}
		brokers = slices.DeleteFunc(brokers, func(b int32) bool { return b == r })
	}
	if len(brokers) == 0 {
		return errors.New("no broker left to place replicas on")
	}
	var topics []string
	for _, t := range strings.Split(o.topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 && len(remove) == 0 {
		return errors.New("--generate needs --topics (or --remove-brokers, which plans every topic)")
	}
	cur, err := currentAssignment(ctx, c, topics)
	if err != nil {
		return err
	}
	next, changed, err := proposeAssignment(cur, brokers)
	if err != nil {
		return err
	}
	if err := writePlan(w, "Current partition replica assignment (save it to roll back with --execute --file):", toPlan(cur, changed)); err != nil {
		return err
	}
	if err := writePlan(w, "Proposed partition reassignment configuration:", toPlan(next, changed)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%d partitions change, %d replicas copied, over brokers %s\n", len(changed), movedReplicas(cur, next), ids(brokers))
	return err
}

func readPlanFile(path string) (*reassignPlan, error) {
	if path == "" {
		return nil, errors.New("--file names the plan (JSON from --generate)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parsePlan(b)
}

// setThrottle sets or deletes the cluster's reassignment throttle.
func setThrottle(ctx context.Context, c *client.Client, rate int64) error {
	op := &controllerv1.AlterConfigOp{Name: topicconfig.ReplicationThrottledRate, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE}
	if rate > 0 {
		op = &controllerv1.AlterConfigOp{Name: topicconfig.ReplicationThrottledRate, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET,
			Value: strconv.FormatInt(rate, 10)}
	}
	resp, err := c.AlterConfigs(ctx, &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{{
		Resource: &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_BROKER}, Ops: []*controllerv1.AlterConfigOp{op}}}})
	if err != nil {
		return err
	}
	for _, r := range resp.GetResults() {
		if e := itemErr(r.GetError()); e != nil {
			return e
		}
	}
	return nil
}

// runExecute starts the plan's moves, after setting the throttle if asked.
func runExecute(ctx context.Context, w io.Writer, c *client.Client, o *reassignOpts) error {
	if o.throttle < 0 {
		return fmt.Errorf("--throttle: %d bytes/s is negative (omit it for no throttle)", o.throttle)
	}
	plan, err := readPlanFile(o.file)
	if err != nil {
		return err
	}
	var topics []string
	for _, p := range plan.Partitions {
		if !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
		}
	}
	cur, err := currentAssignment(ctx, c, topics)
	if err != nil {
		return err
	}
	var keys []planKey
	for _, p := range plan.Partitions {
		k := planKey{p.Topic, p.Partition}
		if _, ok := cur[k]; !ok {
			return fmt.Errorf("%s:%d does not exist", p.Topic, p.Partition)
		}
		keys = append(keys, k)
	}
	if err := writePlan(w, "Current partition replica assignment (save it to roll back with --execute --file):", toPlan(cur, keys)); err != nil {
		return err
	}
	if o.throttle > 0 {
		if err := setThrottle(ctx, c, o.throttle); err != nil {
			return fmt.Errorf("setting the throttle: %w", err)
		}
		fmt.Fprintf(w, "Throttle: %s=%d bytes/s on every node until --verify sees the moves done.\n", topicconfig.ReplicationThrottledRate, o.throttle)
	}
	req := &controllerv1.AlterPartitionReassignmentsRequest{}
	for _, p := range plan.Partitions {
		req.Reassignments = append(req.Reassignments, &controllerv1.PartitionReassignment{
			Partition: &commonv1.TopicPartition{Topic: p.Topic, Partition: p.Partition}, Replicas: p.Replicas})
	}
	resp, err := c.AlterPartitionReassignments(ctx, req)
	if err != nil {
		return err
	}
	var errList []error
	for _, r := range resp.GetResults() {
		if e := itemErr(r.GetError()); e != nil {
			errList = append(errList, fmt.Errorf("%s:%d: %w", r.GetPartition().GetTopic(), r.GetPartition().GetPartition(), e))
		}
	}
	fmt.Fprintf(w, "Started %d of %d reassignments.\n", len(resp.GetResults())-len(errList), len(resp.GetResults()))
	return errors.Join(errList...)
}

// runVerify reports each planned partition as done or in progress, and
// removes the throttle once every one is done.
func runVerify(ctx context.Context, w io.Writer, c *client.Client, o *reassignOpts) error {
	plan, err := readPlanFile(o.file)
	if err != nil {
		return err
	}
	var topics []string
	for _, p := range plan.Partitions {
		if !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
		}
	}
	d, err := c.DescribeTopics(ctx, topics...)
	if err != nil {
		return err
	}
	states := map[planKey]*commonv1.PartitionState{}
	for _, t := range d.GetTopics() {
		for _, p := range t.GetPartitions() {
			states[planKey{t.GetName(), p.GetPartition()}] = p
		}
	}
	pending := 0
	for _, p := range plan.Partitions {
		st, ok := states[planKey{p.Topic, p.Partition}]
		switch {
		case !ok:
			pending++
			fmt.Fprintf(w, "%s:%d: does not exist\n", p.Topic, p.Partition)
		case len(st.GetAddingReplicas()) > 0 || len(st.GetRemovingReplicas()) > 0:
			pending++
			fmt.Fprintf(w, "%s:%d: in progress (replicas %s, adding %s, removing %s)\n", p.Topic, p.Partition,
				ids(st.GetReplicas()), ids(st.GetAddingReplicas()), ids(st.GetRemovingReplicas()))
		case slices.Equal(st.GetReplicas(), p.Replicas):
			fmt.Fprintf(w, "%s:%d: done\n", p.Topic, p.Partition)
		default:
			pending++
			fmt.Fprintf(w, "%s:%d: not started or overridden (replicas %s, planned %s)\n", p.Topic, p.Partition, ids(st.GetReplicas()), ids(p.Replicas))
		}
	}
	if pending > 0 {
		fmt.Fprintf(w, "%d of %d partitions not done; the throttle stays.\n", pending, len(plan.Partitions))
		return nil
	}
	if err := setThrottle(ctx, c, 0); err != nil {
		return fmt.Errorf("removing the throttle: %w", err)
	}
	fmt.Fprintf(w, "All %d partitions done; throttle removed.\n", len(plan.Partitions))
	return nil
}
