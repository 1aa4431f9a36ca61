package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster and restart it process by process"}
	cmd.AddCommand(newClusterRollCmd(g))
	cmd.AddCommand(&cobra.Command{
		Use:   "describe",
		Short: "Show the cluster id, every controller (active, standby or unreachable), the quorum's health and every node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp := describeAny(cmd.Context(), c, strings.Split(g.bootstrap, ","))
			if resp == nil {
				if resp, err = c.DescribeCluster(cmd.Context()); err != nil {
					return err
				}
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintf(w, "Cluster id:\t%s\n", resp.GetClusterId())
				active := "none (election in progress)"
				if q := resp.GetQuorum(); q != nil && !q.GetHasMajority() {
					active = "none (the controller quorum has no majority)"
				}
				if resp.GetControllerId() >= 0 {
					active = fmt.Sprintf("node %d at %s (epoch %d)", resp.GetControllerId(), resp.GetControllerAddress(), resp.GetControllerEpoch())
				}
				fmt.Fprintf(w, "Active controller:\t%s\n", active)
				if q := resp.GetQuorum(); q != nil {
					fmt.Fprintf(w, "Controller quorum:\t%s\n", quorumLine(q))
				}
				fmt.Fprintln(w)
				fmt.Fprintln(w, "CONTROLLER\tADDRESS\tETCD MEMBER\tSTATE\tETCD ROLE")
				for _, m := range resp.GetControllers() {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", m.GetNodeId(), dash(m.GetAddress()), dash(m.GetEtcdMember()),
						controllerState(m), etcdRole(m))
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

// describeAny asks every bootstrap address at once for its view of the
// cluster, so the answer comes even when the active controller is dead or
// the quorum has no majority (the usual route goes through the active
// controller). It prefers a controller that sees a majority; nil when no
// address answers.
func describeAny(ctx context.Context, c *client.Client, addrs []string) *controllerv1.DescribeClusterResponse {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	answers := make(chan *controllerv1.DescribeClusterResponse, len(addrs))
	for _, addr := range addrs {
		addr = strings.TrimSpace(addr)
		go func() {
			conn, err := c.Conn(addr)
			if err != nil {
				answers <- nil
				return
			}
			// A node without the controller role answers Unimplemented.
			resp, _ := controllerv1.NewControllerServiceClient(conn).DescribeCluster(ctx, &controllerv1.DescribeClusterRequest{})
			answers <- resp
		}()
	}
	var best *controllerv1.DescribeClusterResponse
	for range addrs {
		resp := <-answers
		if resp == nil {
			continue
		}
		if resp.GetQuorum() == nil || resp.GetQuorum().GetHasMajority() {
			return resp
		}
		if best == nil {
			best = resp
		}
	}
	return best
}

// quorumLine says whether the controller quorum has a majority and which
// members the answering controller reaches.
func quorumLine(q *controllerv1.QuorumStatus) string {
	reachable, needed := len(q.GetReachable()), int(q.GetVoters()/2+1)
	health := fmt.Sprintf("majority (%d of %d voting members reachable)", reachable, q.GetVoters())
	switch {
	case q.GetHasMajority():
	case reachable >= needed:
		// has_majority also needs a raft leader: enough members answer,
		// but an election is under way (or the answering member is cut
		// off from the leader), so metadata changes wait for it.
		health = fmt.Sprintf("ELECTING: %d of %d voting members reachable but no raft leader yet; metadata changes wait for the election",
			reachable, q.GetVoters())
	default:
		health = fmt.Sprintf("NO MAJORITY: metadata cannot change (%d of %d voting members reachable, %d needed)",
			reachable, q.GetVoters(), needed)
	}
	return fmt.Sprintf("%s; reachable %v, unreachable %v (as seen by node %d)", health, q.GetReachable(), q.GetUnreachable(), q.GetAnsweredBy())
}

func controllerState(m *controllerv1.ControllerMember) string {
	if m.GetState() == controllerv1.ControllerState_CONTROLLER_STATE_UNSPECIFIED {
		// An older server: only the active flag.
		if m.GetActive() {
			return "active"
		}
		return "standby"
	}
	return strings.ToLower(strings.TrimPrefix(m.GetState().String(), "CONTROLLER_STATE_"))
}

func etcdRole(m *controllerv1.ControllerMember) string {
	if m.GetEtcdRole() == controllerv1.EtcdRole_ETCD_ROLE_UNSPECIFIED {
		if m.GetEtcdLeader() {
			return "leader"
		}
		return "-"
	}
	return strings.ToLower(strings.TrimPrefix(m.GetEtcdRole().String(), "ETCD_ROLE_"))
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
