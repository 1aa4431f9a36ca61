package cmd

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

func newPartitionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "partition", Short: "Move partitions and elect their leaders"}
	cmd.AddCommand(newReassignCmd(g), newElectCmd(g))
	return cmd
}

// parseTP reads TOPIC:PARTITION.
func parseTP(s string) (*commonv1.TopicPartition, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return nil, fmt.Errorf("%q: want TOPIC:PARTITION, such as orders:3", s)
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || p < 0 {
		return nil, fmt.Errorf("%q: the partition must be a number", s)
	}
	return &commonv1.TopicPartition{Topic: s[:i], Partition: int32(p)}, nil
}

func newReassignCmd(g *globals) *cobra.Command {
	var cancel, list bool
	var o reassignOpts
	cmd := &cobra.Command{
		Use:   "reassign [TOPIC:PARTITION=REPLICA,REPLICA,...]...",
		Short: "Move partitions to new replicas (first replica = preferred leader), plan moves, cancel, or list moves in progress",
		Long: `Move partitions: new replicas copy the data as followers; once all are in sync,
leadership moves if needed and the old replicas are dropped.

  sluice partition reassign orders:0=4,5,6 orders:1=5,6,4
  sluice partition reassign --cancel orders:0
  sluice partition reassign --list

Plan-driven moves (Kafka's reassignment JSON), to scale out or drain a node:

  sluice partition reassign --generate --topics orders,payments --brokers 1,2,3,4 > plan.txt
  sluice partition reassign --generate --remove-brokers 3      # every replica off node 3
  sluice partition reassign --execute --file plan.json --throttle 10485760
  sluice partition reassign --verify --file plan.json          # removes the throttle when done

--generate prints the current assignment of the partitions it moves (to roll
back with) and the proposed one: replicas and preferred leaders balanced over
the brokers, moving as few replicas as possible. --throttle bounds, per node,
the bytes/s its leaders send to replicas being added
(leader.replication.throttled.rate); ordinary followers are not throttled.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.planMode() && (len(args) > 0 || cancel || list) {
				return errors.New("--generate, --execute and --verify take no TOPIC:PARTITION arguments and no --cancel or --list")
			}
			if n := btoi(o.generate) + btoi(o.execute) + btoi(o.verify); n > 1 {
				return errors.New("use one of --generate, --execute and --verify")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			switch {
			case o.generate:
				return runGenerate(cmd.Context(), cmd.OutOrStdout(), c, &o)
			case o.execute:
				return runExecute(cmd.Context(), cmd.OutOrStdout(), c, &o)
			case o.verify:
				return runVerify(cmd.Context(), cmd.OutOrStdout(), c, &o)
			}
			if list {
				resp, err := c.ListPartitionReassignments(cmd.Context())
				if err != nil {
					return err
				}
				return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
					fmt.Fprintln(w, "PARTITION\tREPLICAS\tADDING\tREMOVING")
					for _, r := range resp.GetReassignments() {
						fmt.Fprintf(w, "%s:%d\t%s\t%s\t%s\n", r.GetPartition().GetTopic(), r.GetPartition().GetPartition(),
							ids(r.GetReplicas()), ids(r.GetAddingReplicas()), ids(r.GetRemovingReplicas()))
					}
					return nil
				})
			}
			if len(args) == 0 {
				return errors.New("name at least one TOPIC:PARTITION=REPLICAS, or use --list")
			}
			req := &controllerv1.AlterPartitionReassignmentsRequest{}
			for _, a := range args {
				tpText, replicasText, hasReplicas := strings.Cut(a, "=")
				tp, err := parseTP(tpText)
				if err != nil {
					return err
				}
				re := &controllerv1.PartitionReassignment{Partition: tp}
				switch {
				case cancel && hasReplicas:
					return fmt.Errorf("%q: --cancel takes TOPIC:PARTITION only", a)
				case !cancel && !hasReplicas:
					return fmt.Errorf("%q: want TOPIC:PARTITION=REPLICA,REPLICA,...", a)
				case hasReplicas:
					for _, r := range strings.Split(replicasText, ",") {
						id, err := strconv.ParseInt(strings.TrimSpace(r), 10, 32)
						if err != nil {
							return fmt.Errorf("%q: replica %q is not a node id", a, r)
						}
						re.Replicas = append(re.Replicas, int32(id))
					}
				}
				req.Reassignments = append(req.Reassignments, re)
			}
			resp, err := c.AlterPartitionReassignments(cmd.Context(), req)
			if err != nil {
				return err
			}
			var errList []error
			for _, r := range resp.GetResults() {
				if e := itemErr(r.GetError()); e != nil {
					errList = append(errList, fmt.Errorf("%s:%d: %w", r.GetPartition().GetTopic(), r.GetPartition().GetPartition(), e))
				}
			}
			if err := g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				for _, r := range resp.GetResults() {
					if r.GetError() == nil {
						fmt.Fprintf(w, "%s:%d: accepted\n", r.GetPartition().GetTopic(), r.GetPartition().GetPartition())
					}
				}
				return nil
			}); err != nil {
				return err
			}
			return errors.Join(errList...)
		},
	}
	cmd.Flags().BoolVar(&cancel, "cancel", false, "Cancel the reassignments of the named partitions.")
	cmd.Flags().BoolVar(&list, "list", false, "List reassignments in progress.")
	cmd.Flags().BoolVar(&o.generate, "generate", false, "Print a proposed plan over --brokers (or every storage node but --remove-brokers) for --topics, and the current assignment.")
	cmd.Flags().BoolVar(&o.execute, "execute", false, "Start the moves of the plan in --file.")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "Report each partition of the plan in --file as done or in progress; remove the throttle once all are done.")
	cmd.Flags().StringVar(&o.file, "file", "", "Plan file (JSON: {\"version\":1,\"partitions\":[{\"topic\",\"partition\",\"replicas\"}]}).")
	cmd.Flags().Int64Var(&o.throttle, "throttle", 0, "With --execute: bytes/s each node may send to replicas being added, until --verify removes it (0: no throttle).")
	cmd.Flags().StringVar(&o.topics, "topics", "", "With --generate: comma-separated topics to plan.")
	cmd.Flags().StringVar(&o.brokers, "brokers", "", "With --generate: comma-separated node ids to place replicas on (default: every storage node).")
	cmd.Flags().StringVar(&o.removeBrokers, "remove-brokers", "", "With --generate: node ids to move every replica off (all topics unless --topics), to remove the nodes.")
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func newElectCmd(g *globals) *cobra.Command {
	var unclean bool
	cmd := &cobra.Command{
		Use:   "elect-leaders [TOPIC:PARTITION...]",
		Short: "Move leadership back to preferred replicas (all partitions if none named), or --unclean elect an out-of-sync replica",
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &controllerv1.ElectLeadersRequest{ElectionType: controllerv1.ElectionType_ELECTION_TYPE_PREFERRED}
			if unclean {
				req.ElectionType = controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN
			}
			for _, a := range args {
				tp, err := parseTP(a)
				if err != nil {
					return err
				}
				req.Partitions = append(req.Partitions, tp)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.ElectLeaders(cmd.Context(), req)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintln(w, "PARTITION\tLEADER\tRESULT")
				for _, r := range resp.GetResults() {
					result := "elected"
					if e := itemErr(r.GetError()); e != nil {
						result = e.Error()
					}
					fmt.Fprintf(w, "%s:%d\t%s\t%s\n", r.GetPartition().GetTopic(), r.GetPartition().GetPartition(), leaderText(r.GetState()), result)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&unclean, "unclean", false, "Elect any live replica when no in-sync one is alive. Records it lacks are lost.")
	return cmd
}
