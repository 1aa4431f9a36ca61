package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/role"
)

// Phases of a roll, in the order they run. Storage nodes go first because
// they hold the data and every later phase depends on them being whole;
// controllers go last so the metadata every other restart relies on stays
// up as long as possible, and the active controller is the very last so
// leadership of the metadata moves once, not once per controller.
const (
	phaseStorage     = "storage-node"
	phaseReplication = "replication"
	phaseCoordinator = "coordinator"
	phaseController  = "controller"
)

var phaseRank = map[string]int{phaseStorage: 0, phaseReplication: 1, phaseCoordinator: 2, phaseController: 3}

// rollStep is one process to restart.
type rollStep struct {
	NodeID int32
	Addr   string
	Roles  []string
	Phase  string
	// Active is set on the active controller when the plan was made.
	Active bool
	// Registered nodes (every role but the controller) get a new broker
	// epoch on each start: the sign that the restart really happened.
	Registered bool
}

func (s rollStep) String() string {
	what := fmt.Sprintf("node %d (%s) at %s", s.NodeID, strings.Join(s.Roles, ","), dash(s.Addr))
	if s.Active {
		what += ", active controller"
	}
	return what
}

// rollPlan orders every process of the cluster for a rolling restart: storage
// nodes one at a time, then replication workers, then coordinators, then
// controllers with the active one last. A process that runs the controller
// role among others is restarted with the controllers.
func rollPlan(resp *controllerv1.DescribeClusterResponse) []rollStep {
	byID := map[int32]*rollStep{}
	get := func(id int32) *rollStep {
		s, ok := byID[id]
		if !ok {
			s = &rollStep{NodeID: id}
			byID[id] = s
		}
		return s
	}
	for _, b := range resp.GetBrokers() {
		s := get(b.GetId())
		s.Roles = append(s.Roles, b.GetRoles()...)
		s.Registered = true
		s.Addr = grpcEndpoint(b.GetEndpoints())
	}
	for _, m := range resp.GetControllers() {
		s := get(m.GetNodeId())
		s.Roles = append([]string{string(role.Controller)}, s.Roles...)
		if m.GetAddress() != "" {
			s.Addr = m.GetAddress()
		}
		s.Active = m.GetNodeId() == resp.GetControllerId()
	}
	steps := make([]rollStep, 0, len(byID))
	for _, s := range byID {
		switch {
		case slices.Contains(s.Roles, string(role.Controller)):
			s.Phase = phaseController
		case slices.Contains(s.Roles, string(role.StorageNode)):
			s.Phase = phaseStorage
		case slices.Contains(s.Roles, string(role.Replication)):
			s.Phase = phaseReplication
		default:
			s.Phase = phaseCoordinator
		}
		steps = append(steps, *s)
	}
	sort.Slice(steps, func(i, j int) bool {
		a, b := steps[i], steps[j]
		if phaseRank[a.Phase] != phaseRank[b.Phase] {
			return phaseRank[a.Phase] < phaseRank[b.Phase]
		}
		if a.Active != b.Active {
			return b.Active
		}
		return a.NodeID < b.NodeID
	})
	return steps
}

// grpcEndpoint picks the gRPC listener among a node's endpoints.
func grpcEndpoint(eps []*commonv1.Endpoint) string {
	for _, e := range eps {
		if e.GetName() == "grpc" || e.GetName() == "" {
			return net.JoinHostPort(e.GetHost(), fmt.Sprint(e.GetPort()))
		}
	}
	if len(eps) > 0 {
		return net.JoinHostPort(eps[0].GetHost(), fmt.Sprint(eps[0].GetPort()))
	}
	return ""
}

// expandRestartCmd fills the placeholders of an operator's restart command.
func expandRestartCmd(tmpl string, s rollStep) string {
	host, port, _ := net.SplitHostPort(s.Addr)
	return strings.NewReplacer(
		"{node}", fmt.Sprint(s.NodeID),
		"{addr}", s.Addr,
		"{host}", host,
		"{port}", port,
		"{roles}", strings.Join(s.Roles, ","),
		"{role}", s.Phase,
	).Replace(tmpl)
}

type rollOptions struct {
	restartCmd   string
	stepTimeout  time.Duration
	pollInterval time.Duration
	dryRun       bool
}

func newClusterRollCmd(g *globals) *cobra.Command {
	var o rollOptions
	cmd := &cobra.Command{
		Use:   "roll --restart-cmd COMMAND",
		Short: "Restart every process of the cluster one at a time, waiting for the cluster to recover after each",
		Long: `Rolling restart (and upgrade, when the command starts a new binary): the
order comes from the cluster's registry: storage nodes one at a time, then
replication workers, then coordinators, then controllers, the active
controller last.

For each process the restart COMMAND runs through "sh -c", with
placeholders filled in: {node} (node id), {addr} (gRPC host:port), {host},
{port}, {roles} (comma-separated) and {role} (storage-node, replication,
coordinator or controller). The same values are in the environment as
SLUICE_NODE_ID, SLUICE_NODE_ADDR, SLUICE_NODE_ROLES and SLUICE_NODE_PHASE.
Examples:

  --restart-cmd 'systemctl restart sluice@{node}'
  --restart-cmd 'docker restart sluice-{node}'
  --restart-cmd 'ssh {host} sudo systemctl restart sluice'

The command must stop the process gracefully (SIGTERM: a storage node hands
its leaderships over first) and start it again. After it, the roll waits
until the process has restarted (a registered node has a new broker epoch; a
controller was seen down), answers SERVING, is registered and alive, no
partition is under-replicated (every ISR holds every replica), and, for
controllers, the quorum has every member and an active controller is
elected. Only then does the next process restart. A step that does not
recover within --step-timeout stops the roll with an error that says what
was missing; nothing more is restarted.

The roll refuses to start on a cluster that is not healthy to begin with.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.restartCmd == "" && !o.dryRun {
				return errors.New("--restart-cmd is required (or --dry-run to print the plan)")
			}
			if o.stepTimeout <= 0 || o.pollInterval <= 0 {
				return errors.New("--step-timeout and --poll-interval must be positive")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			r := &roller{g: g, c: c, o: o, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), addrs: strings.Split(g.bootstrap, ",")}
			return r.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.restartCmd, "restart-cmd", "", "Command that restarts one process, run with sh -c; placeholders {node} {addr} {host} {port} {roles} {role}.")
	cmd.Flags().DurationVar(&o.stepTimeout, "step-timeout", 5*time.Minute, "Longest wait for one process's restart command and recovery before the roll stops.")
	cmd.Flags().DurationVar(&o.pollInterval, "poll-interval", 500*time.Millisecond, "How often to check the cluster while waiting.")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "Print the plan (and the command each step would run) and restart nothing.")
	return cmd
}

type roller struct {
	g      *globals
	c      *client.Client
	o      rollOptions
	out    io.Writer
	errOut io.Writer
	addrs  []string
	start  time.Time
}

func (r *roller) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *roller) run(ctx context.Context) error {
	r.start = time.Now()
	desc, err := r.describe(ctx)
	if err != nil {
		return fmt.Errorf("roll: reading the cluster's registry: %w", err)
	}
	plan := rollPlan(desc)
	fmt.Fprintf(r.out, "Plan: %d processes\n", len(plan))
	for i, s := range plan {
		fmt.Fprintf(r.out, "  %d. %-12s %s\n", i+1, s.Phase, s)
		if r.o.restartCmd != "" {
			fmt.Fprintf(r.out, "     $ %s\n", expandRestartCmd(r.o.restartCmd, s))
		}
	}
	for _, s := range plan {
		if s.Addr == "" {
			return fmt.Errorf("roll: node %d has no known address (an unreachable controller never seen by the others?); bring it up before rolling", s.NodeID)
		}
	}
	if r.o.dryRun {
		return nil
	}
	if why := r.unhealthy(ctx, nil, 0); why != "" {
		return fmt.Errorf("roll: the cluster is not healthy before the roll, so nothing was restarted: %s", why)
	}
	r.logf("cluster healthy: no under-replicated partition, every node alive, controller quorum whole")
	for i, s := range plan {
		if s.Phase == phaseController {
			// The active controller may have moved since the plan was made
			// (a standby's restart can take it over): keep it last.
			s, plan = r.nextController(ctx, plan, i)
		}
		if err := r.step(ctx, i, len(plan), s); err != nil {
			return fmt.Errorf("roll stopped at step %d of %d (%s): %w; processes after it were not restarted", i+1, len(plan), s, err)
		}
	}
	r.logf("roll complete: %d processes restarted", len(plan))
	fmt.Fprintln(r.out, "Leadership may now be uneven across storage nodes; `sluice partition elect-leaders` moves it back to the preferred replicas (the controller also does so on its own every --controller.leader-imbalance-check-interval).")
	return nil
}

// nextController returns the step to run at index i, swapping the active
// controller with a later standby if it is not the last controller left.
func (r *roller) nextController(ctx context.Context, plan []rollStep, i int) (rollStep, []rollStep) {
	desc, err := r.describe(ctx)
	if err != nil || desc.GetControllerId() < 0 || i == len(plan)-1 {
		return plan[i], plan
	}
	plan = slices.Clone(plan)
	for k := i; k < len(plan); k++ {
		plan[k].Active = plan[k].NodeID == desc.GetControllerId()
	}
	if plan[i].Active {
		plan[i], plan[len(plan)-1] = plan[len(plan)-1], plan[i]
	}
	return plan[i], plan
}

// step restarts one process and waits for the cluster to recover.
func (r *roller) step(ctx context.Context, i, n int, s rollStep) error {
	tag := fmt.Sprintf("step %d/%d node %d", i+1, n, s.NodeID)
	ctx, cancel := context.WithTimeout(ctx, r.o.stepTimeout)
	defer cancel()
	var epochBefore int64
	if s.Registered {
		desc, err := r.describe(ctx)
		if err != nil {
			return fmt.Errorf("reading its broker epoch: %w", err)
		}
		b := findBroker(desc, s.NodeID)
		if b == nil {
			return errors.New("not registered")
		}
		epochBefore = b.GetBrokerEpoch()
	}
	// Watch the process's health from before the command runs, so a
	// restart that leaves no trace in the registry (a controller) is seen
	// as the process going away.
	var sawDown atomic.Bool
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go r.watchDown(watchCtx, s.Addr, &sawDown)

	line := expandRestartCmd(r.o.restartCmd, s)
	r.logf("%s: restarting %s: %s", tag, s, line)
	sh := exec.CommandContext(ctx, "sh", "-c", line)
	sh.Env = append(os.Environ(),
		fmt.Sprintf("SLUICE_NODE_ID=%d", s.NodeID), "SLUICE_NODE_ADDR="+s.Addr,
		"SLUICE_NODE_ROLES="+strings.Join(s.Roles, ","), "SLUICE_NODE_PHASE="+s.Phase)
	sh.Stdout, sh.Stderr = r.errOut, r.errOut
	t0 := time.Now()
	if err := sh.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the restart command did not finish within --step-timeout %v", r.o.stepTimeout)
		}
		return fmt.Errorf("the restart command failed: %w", err)
	}
	r.logf("%s: restart command done in %.1fs", tag, time.Since(t0).Seconds())

	// Restarted: a new incarnation is visible.
	var epochAfter int64
	if err := r.await(ctx, "the process to restart", func() string {
		if !s.Registered {
			if sawDown.Load() {
				return ""
			}
			return "it was never seen down: did the command restart it?"
		}
		desc, err := r.describe(ctx)
		if err != nil {
			return err.Error()
		}
		b := findBroker(desc, s.NodeID)
		switch {
		case b == nil:
			return "not registered"
		case b.GetBrokerEpoch() == epochBefore:
			return fmt.Sprintf("broker epoch still %d (the old incarnation's)", epochBefore)
		}
		epochAfter = b.GetBrokerEpoch()
		return ""
	}); err != nil {
		return err
	}
	if s.Registered {
		r.logf("%s: restarted (broker epoch %d -> %d)", tag, epochBefore, epochAfter)
	} else {
		r.logf("%s: restarted (seen down during the command)", tag)
	}
	stopWatch()
	if err := r.await(ctx, "the process to be healthy and the cluster whole", func() string {
		return r.unhealthy(ctx, &s, epochAfter)
	}); err != nil {
		return err
	}
	r.logf("%s: healthy, registered, under-replicated partitions 0%s; step took %.1fs", tag,
		map[bool]string{true: ", controller quorum whole with an active controller", false: ""}[s.Phase == phaseController],
		time.Since(t0).Seconds())
	return nil
}

// await polls check until it returns "" or ctx ends; the error names what
// was awaited and the last reason it was not there yet.
func (r *roller) await(ctx context.Context, what string, check func() string) error {
	t := time.NewTicker(r.o.pollInterval)
	defer t.Stop()
	for {
		why := check()
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s after --step-timeout %v: %s", what, r.o.stepTimeout, why)
		case <-t.C:
		}
	}
}

// unhealthy says why the cluster is not ready for the next restart, or ""
// when it is. With s, it also checks that process: SERVING, and (with a
// registration) alive at epoch, or (a controller) a reachable quorum member.
func (r *roller) unhealthy(ctx context.Context, s *rollStep, epoch int64) string {
	if s != nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := checkHealth(cctx, s.Addr, "", r.dialCreds())
		cancel()
		if err != nil {
			return err.Error()
		}
	}
	desc, err := r.describe(ctx)
	if err != nil {
		return "describing the cluster: " + err.Error()
	}
	for _, b := range desc.GetBrokers() {
		if b.GetState() != commonv1.BrokerState_BROKER_STATE_ALIVE {
			return fmt.Sprintf("node %d is %s", b.GetId(), strings.TrimPrefix(b.GetState().String(), "BROKER_STATE_"))
		}
	}
	if s != nil && s.Registered {
		if b := findBroker(desc, s.NodeID); b == nil || b.GetBrokerEpoch() != epoch {
			return fmt.Sprintf("node %d is not registered at epoch %d", s.NodeID, epoch)
		}
	}
	if q := desc.GetQuorum(); q != nil && (!q.GetHasMajority() || len(q.GetUnreachable()) > 0) {
		return "controller quorum: " + quorumLine(q)
	}
	if desc.GetControllerId() < 0 {
		return "no active controller"
	}
	for _, m := range desc.GetControllers() {
		if m.GetState() == controllerv1.ControllerState_CONTROLLER_STATE_UNREACHABLE {
			return fmt.Sprintf("controller %d is unreachable", m.GetNodeId())
		}
	}
	urp, example, err := underReplicated(ctx, r.c)
	if err != nil {
		return "counting under-replicated partitions: " + err.Error()
	}
	if urp > 0 {
		return fmt.Sprintf("%d under-replicated partitions (such as %s)", urp, example)
	}
	return ""
}

// underReplicated counts partitions, internal topics included, whose ISR
// lacks a replica or that have no leader; example describes one of them.
func underReplicated(ctx context.Context, c *client.Client) (int, string, error) {
	list, err := c.ListTopics(ctx, true)
	if err != nil {
		return 0, "", err
	}
	if len(list.GetTopics()) == 0 {
		return 0, "", nil
	}
	names := make([]string, len(list.GetTopics()))
	for i, t := range list.GetTopics() {
		names[i] = t.GetName()
	}
	desc, err := c.DescribeTopics(ctx, names...)
	if err != nil {
		return 0, "", err
	}
	n, example := 0, ""
	for _, t := range desc.GetTopics() {
		if t.GetError() != nil {
			continue // deleted since it was listed
		}
		for _, p := range t.GetPartitions() {
			if p.GetLeaderId() >= 0 && len(p.GetIsr()) >= len(p.GetReplicas()) {
				continue
			}
			if n++; example == "" {
				example = fmt.Sprintf("%s-%d leader %s replicas %s isr %s", t.GetName(), p.GetPartition(), leaderText(p), ids(p.GetReplicas()), ids(p.GetIsr()))
			}
		}
	}
	return n, example, nil
}

// describe asks the controllers for the cluster, any of them answering, so
// it works while the active one restarts.
func (r *roller) describe(ctx context.Context) (*controllerv1.DescribeClusterResponse, error) {
	if resp := describeAny(ctx, r.c, r.addrs); resp != nil && (resp.GetQuorum() == nil || resp.GetQuorum().GetHasMajority()) {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return r.c.DescribeCluster(cctx)
}

// watchDown sets down once addr stops answering SERVING.
func (r *roller) watchDown(ctx context.Context, addr string, down *atomic.Bool) {
	conn, err := grpc.NewClient("passthrough:///"+addr, r.dialCreds())
	if err != nil {
		return
	}
	defer conn.Close() // only the answers matter here
	hc := healthpb.NewHealthClient(conn)
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			down.Store(true)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *roller) dialCreds() grpc.DialOption {
	if tc, err := r.g.clientTLS(); err == nil && tc != nil {
		return grpc.WithTransportCredentials(credentials.NewTLS(tc))
	}
	return grpc.WithTransportCredentials(insecure.NewCredentials())
}

func findBroker(desc *controllerv1.DescribeClusterResponse, id int32) *commonv1.Broker {
	for _, b := range desc.GetBrokers() {
		if b.GetId() == id {
			return b
		}
	}
	return nil
}
