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
	cmd := &cobra.Command{
		Use:   "reassign [TOPIC:PARTITION=REPLICA,REPLICA,...]...",
		Short: "Move partitions to new replicas (first replica = preferred leader), cancel, or list moves in progress",
		Long: `Move partitions: new replicas copy the data as followers; once all are in sync,
leadership moves if needed and the old replicas are dropped.

  sluice partition reassign orders:0=4,5,6 orders:1=5,6,4
  sluice partition reassign --cancel orders:0
  sluice partition reassign --list`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
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
	return cmd
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
