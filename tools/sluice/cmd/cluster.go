package cmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster"}
	cmd.AddCommand(&cobra.Command{
		Use:   "describe",
		Short: "Show the cluster id, the controllers (and which is active) and every node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DescribeCluster(cmd.Context())
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintf(w, "Cluster id:\t%s\n", resp.GetClusterId())
				active := "none (election in progress)"
				if resp.GetControllerId() >= 0 {
					active = fmt.Sprintf("node %d at %s (epoch %d)", resp.GetControllerId(), resp.GetControllerAddress(), resp.GetControllerEpoch())
				}
				fmt.Fprintf(w, "Active controller:\t%s\n\n", active)
				fmt.Fprintln(w, "CONTROLLER\tADDRESS\tETCD MEMBER\tACTIVE\tETCD LEADER")
				for _, m := range resp.GetControllers() {
					fmt.Fprintf(w, "%d\t%s\t%s\t%v\t%v\n", m.GetNodeId(), m.GetAddress(), m.GetEtcdMember(), m.GetActive(), m.GetEtcdLeader())
				}
				fmt.Fprintln(w)
				fmt.Fprintln(w, "NODE\tRACK\tADDRESS\tROLES\tSTATE\tEPOCH")
				for _, b := range resp.GetBrokers() {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\n", b.GetId(), dash(b.GetRack()), endpoints(b.GetEndpoints()),
						strings.Join(b.GetRoles(), ","), strings.TrimPrefix(b.GetState().String(), "BROKER_STATE_"), b.GetBrokerEpoch())
				}
				return nil
			})
		},
	})
	return cmd
}

func endpoints(eps []*commonv1.Endpoint) string {
	parts := make([]string, len(eps))
	for i, e := range eps {
		parts[i] = fmt.Sprintf("%s:%d", e.GetHost(), e.GetPort())
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
