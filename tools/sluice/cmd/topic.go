package cmd

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func newTopicCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, list, describe, alter and delete topics"}
	cmd.AddCommand(newTopicCreateCmd(g), newTopicListCmd(g), newTopicDescribeCmd(g), newTopicDeleteCmd(g), newTopicAlterCmd(g))
	return cmd
}

// parseConfigs reads repeated --config k=v flags.
func parseConfigs(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--config %q: want name=value, such as retention.ms=3600000", kv)
		}
		out[k] = v
	}
	return out, nil
}

// itemErr turns a per-item error into a Go error.
func itemErr(e interface {
	GetCode() errs.Code
	GetMessage() string
}) error {
	if e == nil || e.GetCode() == errs.None {
		return nil
	}
	return &errs.Error{Code: e.GetCode(), Message: e.GetMessage()}
}

func newTopicCreateCmd(g *globals) *cobra.Command {
	var partitions, rf int32
	var configs []string
	var ifNotExists bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			spec := &controllerv1.TopicSpec{Name: args[0], Configs: cfg}
			if cmd.Flags().Changed("partitions") {
				spec.NumPartitions = &partitions
			}
			if cmd.Flags().Changed("replication-factor") {
				spec.ReplicationFactor = &rf
			}
			resp, err := c.CreateTopics(cmd.Context(), &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{spec}})
			if err != nil {
				return err
			}
			res := resp.GetResults()[0]
			if err := itemErr(res.GetError()); err != nil {
				if ifNotExists && res.GetError().GetCode() == errs.TopicAlreadyExists {
					err = nil
				}
				if err != nil {
					return err
				}
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				if res.GetError() != nil {
					fmt.Fprintf(w, "Topic %s already exists.\n", res.GetName())
					return nil
				}
				fmt.Fprintf(w, "Created topic %s (%d partitions, replication factor %d, id %s).\n",
					res.GetName(), res.GetNumPartitions(), res.GetReplicationFactor(), res.GetTopicId())
				return nil
			})
		},
	}
	cmd.Flags().Int32VarP(&partitions, "partitions", "p", 0, "Number of partitions (default: the cluster's num.partitions).")
	cmd.Flags().Int32VarP(&rf, "replication-factor", "r", 0, "Replication factor (default: the cluster's default.replication.factor).")
	cmd.Flags().StringArrayVarP(&configs, "config", "c", nil, "Topic config name=value, repeatable (retention.ms, cleanup.policy, min.insync.replicas, ...).")
	cmd.Flags().BoolVar(&ifNotExists, "if-not-exists", false, "Succeed if the topic already exists.")
	return cmd
}

func newTopicListCmd(g *globals) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.ListTopics(cmd.Context(), internal)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintln(w, "TOPIC\tPARTITIONS\tREPLICATION\tID")
				for _, t := range resp.GetTopics() {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", t.GetName(), t.GetNumPartitions(), t.GetReplicationFactor(), t.GetTopicId())
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "Include internal topics.")
	return cmd
}

func newTopicDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe [NAME...]",
		Short: "Describe topics: partitions, leaders, epochs, replicas, in-sync replicas, configs",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DescribeTopics(cmd.Context(), args...)
			if err != nil {
				return err
			}
			var errList []error
			for _, t := range resp.GetTopics() {
				errList = append(errList, itemErr(t.GetError()))
			}
			if err := g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				for _, t := range resp.GetTopics() {
					if t.GetError() != nil {
						continue
					}
					fmt.Fprintf(w, "Topic: %s  Id: %s  Partitions: %d  Configs: %s\n", t.GetName(), t.GetTopicId(), len(t.GetPartitions()), formatConfigs(t.GetConfigs()))
					fmt.Fprintln(w, "  PARTITION\tLEADER\tLEADER EPOCH\tREPLICAS\tISR\tOFFLINE\tELR")
					for _, p := range t.GetPartitions() {
						fmt.Fprintf(w, "  %d\t%s\t%d\t%s\t%s\t%s\t%s\n", p.GetPartition(), leaderText(p), p.GetLeaderEpoch(),
							ids(p.GetReplicas()), ids(p.GetIsr()), ids(p.GetOfflineReplicas()), ids(p.GetEligibleLeaderReplicas()))
					}
				}
				return nil
			}); err != nil {
				return err
			}
			return errors.Join(errList...)
		},
	}
}

func leaderText(p *commonv1.PartitionState) string {
	if p.GetLeaderId() < 0 {
		return "none"
	}
	return fmt.Sprint(p.GetLeaderId())
}

func ids(v []int32) string {
	if len(v) == 0 {
		return "-"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func formatConfigs(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func newTopicDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete topics (storage nodes remove the data in the background)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DeleteTopics(cmd.Context(), args...)
			if err != nil {
				return err
			}
			var errList []error
			for _, r := range resp.GetResults() {
				errList = append(errList, itemErr(r.GetError()))
			}
			if err := g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				for _, r := range resp.GetResults() {
					if r.GetError() == nil {
						fmt.Fprintf(w, "Deleted topic %s.\n", r.GetName())
					}
				}
				return nil
			}); err != nil {
				return err
			}
			return errors.Join(errList...)
		},
	}
}

func newTopicAlterCmd(g *globals) *cobra.Command {
	var set, del []string
	var partitions int32
	cmd := &cobra.Command{
		Use:   "alter NAME",
		Short: "Change a topic's configs (--config k=v, --delete-config k) or grow its partitions (--partitions N)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := parseConfigs(set)
			if err != nil {
				return err
			}
			if len(cfg) == 0 && len(del) == 0 && !cmd.Flags().Changed("partitions") {
				return errors.New("nothing to change: give --config, --delete-config or --partitions")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			if cmd.Flags().Changed("partitions") {
				resp, err := c.CreatePartitions(cmd.Context(), &controllerv1.CreatePartitionsRequest{
					Topics: []*controllerv1.PartitionIncrease{{Topic: args[0], TotalCount: partitions}}})
				if err != nil {
					return err
				}
				if err := itemErr(resp.GetResults()[0].GetError()); err != nil {
					return err
				}
				if g.output == "text" {
					fmt.Fprintf(out, "Topic %s now has %d partitions.\n", args[0], partitions)
				}
			}
			if len(cfg) == 0 && len(del) == 0 {
				return nil
			}
			var ops []*controllerv1.AlterConfigOp
			for k, v := range cfg {
				ops = append(ops, &controllerv1.AlterConfigOp{Name: k, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: v})
			}
			for _, k := range del {
				ops = append(ops, &controllerv1.AlterConfigOp{Name: k, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE})
			}
			resp, err := c.AlterConfigs(cmd.Context(), &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{{
				Resource: &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, Name: args[0]}, Ops: ops,
			}}})
			if err != nil {
				return err
			}
			if err := itemErr(resp.GetResults()[0].GetError()); err != nil {
				return err
			}
			return g.print(out, resp, func(w io.Writer) error {
				fmt.Fprintf(w, "Altered configs of topic %s.\n", args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringArrayVarP(&set, "config", "c", nil, "Set a config name=value (repeatable).")
	cmd.Flags().StringArrayVar(&del, "delete-config", nil, "Remove a config override so the default applies (repeatable).")
	cmd.Flags().Int32VarP(&partitions, "partitions", "p", 0, "New, larger partition count.")
	return cmd
}
