package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
	"github.com/sluice-io/sluice/libs/verify/netns"
)

// Topologies are the cluster shapes TopologySpec builds.
var Topologies = []string{"all-in-one", "dev3", "split"}

// TopologySpec returns the devcluster shape of a named topology (Sluiced
// and Dir are left to the caller):
//   - all-in-one: one process with every role (`make run`);
//   - dev3: 3 controllers and 3 storage nodes that also run replication
//     and both coordinators (`make dev`);
//   - split: 3 controllers, 3 storage nodes with no other role, one
//     replication worker, and 2 group and 2 transaction coordinators, each
//     a process of its own.
func TopologySpec(name string) (devcluster.Spec, error) {
	switch name {
	case "all-in-one":
		return devcluster.Spec{Controllers: 1, Combined: true}, nil
	case "dev3":
		return devcluster.Spec{Controllers: 3, StorageNodes: 3}, nil
	case "split":
		return devcluster.Spec{Controllers: 3, StorageNodes: 3, StorageRoles: role.Set{role.StorageNode},
			Workers: 1, GroupCoordinators: 2, TransactionCoordinators: 2}, nil
	}
	return devcluster.Spec{}, fmt.Errorf("unknown topology %q (known: %s)", name, strings.Join(Topologies, ", "))
}

// SpecProcesses returns how many processes a spec starts.
func SpecProcesses(s devcluster.Spec) int {
	return s.Controllers + s.StorageNodes + s.Workers + s.GroupCoordinators + s.TransactionCoordinators
}

// FaultAPI is the fault-injection endpoint of one process (the
// --unsafe.fault-injection HTTP handlers).
type FaultAPI interface {
	Crash(ctx context.Context, dropUnsynced bool) error
	Disk(ctx context.Context, detail string, d time.Duration) error
	Clock(ctx context.Context, offset time.Duration) error
	// Link slows down or duplicates the process's calls to peerAddr
	// (faultapi.AnyPeer for every peer) for d.
	Link(ctx context.Context, peerAddr string, l Link, d time.Duration) error
	Clear(ctx context.Context) error
}

// ClusterTarget runs schedules against a devcluster.
type ClusterTarget struct {
	// Cluster is the running cluster.
	Cluster *devcluster.Cluster
	// Client is an SDK client of the cluster, for finding roles (the
	// active controller, partition leaders, group coordinators) and for
	// reassignments.
	Client *client.Client
	// TopicPrefix selects the workload's topics and groups: leaders and
	// coordinators are looked for among names with this prefix.
	TopicPrefix string
	// Net is the network the processes run in, in process order; nil means
	// partitions are unavailable.
	Net *netns.Net
	// Faults returns the fault-injection endpoint of a process; nil means
	// crash, disk and clock faults are unavailable.
	Faults func(p *devcluster.Process) FaultAPI
	// ClientFaults are the workload clients' interceptors; nil means
	// client-side faults are unavailable.
	ClientFaults *ClientFaults
	// ReadyTimeout bounds the wait for a restarted process to be healthy
	// (default 90 s).
	ReadyTimeout time.Duration
	// Logf, if set, receives a line per action.
	Logf func(format string, args ...any)
}

func (t *ClusterTarget) logf(format string, args ...any) {
	if t.Logf != nil {
		t.Logf(format, args...)
	}
}

func (t *ClusterTarget) proc(name string) (*devcluster.Process, error) {
	p := t.Cluster.Process(name)
	if p == nil {
		return nil, fmt.Errorf("no process %q", name)
	}
	return p, nil
}

func (t *ClusterTarget) byID(id int32) *devcluster.Process {
	for _, p := range t.Cluster.Processes() {
		if p.NodeID == id {
			return p
		}
	}
	return nil
}

// withRole returns the running processes with r, or, if only is set, the
// ones whose only role is r.
func (t *ClusterTarget) withRole(r role.Role, only bool, busy map[string]bool) []*devcluster.Process {
	var out []*devcluster.Process
	for _, p := range t.Cluster.Processes() {
		if !p.Running() || busy[p.Name] || !p.Roles.Has(r) || (only && len(p.Roles) != 1) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func pick(ps []*devcluster.Process, rng *rand.Rand) *devcluster.Process {
	if len(ps) == 0 {
		return nil
	}
	return ps[rng.IntN(len(ps))]
}

// ErrNoTarget says no running process, other than those under another
// fault, plays a step's role. Resolve wraps it; Run waits for one and skips
// the step when none comes.
var ErrNoTarget = errors.New("no target")

// lookupTimeout bounds the calls that find a role.
const lookupTimeout = 5 * time.Second

// Resolve implements Target.
func (t *ClusterTarget) Resolve(ctx context.Context, r Role, busy map[string]bool, rng *rand.Rand) (Victim, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var v Victim
	var fallback []*devcluster.Process
	switch r {
	case Controller, StandbyController:
		fallback = t.withRole(role.Controller, false, busy)
		dc, err := t.Client.DescribeCluster(ctx)
		if err != nil {
			t.logf("nemesis: cannot find the active controller (%v); taking any controller", err)
			break
		}
		active := t.byID(dc.GetControllerId())
		if active == nil || !active.Running() || (r == Controller && busy[active.Name]) {
			break
		}
		if r == Controller {
			v = Victim{Name: active.Name, Why: "active controller"}
			break
		}
		standbys := slices.DeleteFunc(slices.Clone(fallback), func(p *devcluster.Process) bool { return p == active })
		if p := pick(standbys, rng); p != nil {
			v = Victim{Name: p.Name, Why: "standby controller"}
		}
	case StorageLeader, StorageFollower:
		fallback = t.withRole(role.StorageNode, false, busy)
		usable := func(ps *commonv1.PartitionState) bool {
			p := t.byID(ps.GetLeaderId())
			return r == StorageFollower || (p != nil && p.Running() && !busy[p.Name])
		}
		ps, err := t.workloadPartition(ctx, rng, usable)
		if err != nil {
			t.logf("nemesis: cannot find a workload partition (%v); taking any storage node", err)
			break
		}
		tp := fmt.Sprintf("%s/%d", ps.GetTopic(), ps.GetPartition())
		if r == StorageLeader {
			if p := t.byID(ps.GetLeaderId()); p != nil && p.Running() {
				v = Victim{Name: p.Name, Why: "leader of " + tp}
			}
			break
		}
		var followers []*devcluster.Process
		for _, id := range ps.GetReplicas() {
			if p := t.byID(id); p != nil && p.Running() && !busy[p.Name] && id != ps.GetLeaderId() {
				followers = append(followers, p)
			}
		}
		if p := pick(followers, rng); p != nil {
			v = Victim{Name: p.Name, Why: "follower of " + tp}
		}
	case ReplicationWorker:
		fallback = t.withRole(role.Replication, true, busy)
		if len(fallback) > 0 {
			v = Victim{Name: pick(fallback, rng).Name, Why: "replication worker"}
		} else {
			fallback = t.withRole(role.Replication, false, busy)
		}
	case GroupCoordinator:
		fallback = t.withRole(role.GroupCoordinator, false, busy)
		groups, err := t.Client.ListGroups(ctx, nil, nil)
		if err != nil {
			t.logf("nemesis: cannot list groups (%v); taking any group coordinator", err)
			break
		}
		var ids []string
		for _, g := range groups {
			if strings.HasPrefix(g.GetGroupId(), t.TopicPrefix) {
				ids = append(ids, g.GetGroupId())
			}
		}
		slices.Sort(ids)
		if len(ids) == 0 {
			break
		}
		g := ids[rng.IntN(len(ids))]
		id, _, err := t.Client.FindCoordinator(ctx, g)
		if err != nil {
			break
		}
		if p := t.byID(id); p != nil && p.Running() && !busy[p.Name] {
			v = Victim{Name: p.Name, Why: "coordinator of group " + g}
		}
	case TxnCoordinator:
		fallback = t.withRole(role.TransactionCoordinator, false, busy)
		if only := t.withRole(role.TransactionCoordinator, true, busy); len(only) > 0 {
			fallback = only
		}
	case AnyProcess:
		for _, p := range t.Cluster.Processes() {
			if p.Running() && !busy[p.Name] {
				fallback = append(fallback, p)
			}
		}
	default:
		return Victim{}, fmt.Errorf("unknown role %q", r)
	}
	if v.Name != "" {
		return v, nil
	}
	p := pick(fallback, rng)
	if p == nil {
		return Victim{}, fmt.Errorf("%w: no running process plays %s%s", ErrNoTarget, r, t.unavailable(r, busy))
	}
	return Victim{Name: p.Name, Why: string(r) + " (any)"}, nil
}

// serverRole is the sluiced role a nemesis role needs ("" for any process).
var serverRole = map[Role]role.Role{
	Controller: role.Controller, StandbyController: role.Controller,
	StorageLeader: role.StorageNode, StorageFollower: role.StorageNode,
	ReplicationWorker: role.Replication, GroupCoordinator: role.GroupCoordinator,
	TxnCoordinator: role.TransactionCoordinator,
}

// unavailable says why the processes with r's server role could not be
// taken: under another fault, or exited and how (a process that exited by
// itself is worth a look in its log).
func (t *ClusterTarget) unavailable(r Role, busy map[string]bool) string {
	var why []string
	for _, p := range t.Cluster.Processes() {
		if sr := serverRole[r]; sr != "" && !p.Roles.Has(sr) {
			continue
		}
		switch {
		case busy[p.Name]:
			why = append(why, p.Name+" is under another fault")
		case !p.Running():
			w := p.Name + " is not running"
			if err := p.ExitErr(); err != nil {
				w += " (" + err.Error() + ")"
			}
			why = append(why, w)
		}
	}
	if len(why) == 0 {
		return ""
	}
	return " (" + strings.Join(why, "; ") + ")"
}

// workloadPartition picks a partition of a workload topic that has a
// leader (and passes ok, if set).
func (t *ClusterTarget) workloadPartition(ctx context.Context, rng *rand.Rand, ok func(*commonv1.PartitionState) bool) (*commonv1.PartitionState, error) {
	md, err := t.Client.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var cands []*commonv1.PartitionState
	for _, ti := range md.GetTopics() {
		if ti.GetInternal() || !strings.HasPrefix(ti.GetName(), t.TopicPrefix) {
			continue
		}
		for _, ps := range ti.GetPartitions() {
			if ps.GetLeaderId() >= 0 && (ok == nil || ok(ps)) {
				cands = append(cands, ps)
			}
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("no partition of a topic named %q* has a leader", t.TopicPrefix)
	}
	slices.SortFunc(cands, func(a, b *commonv1.PartitionState) int {
		if c := strings.Compare(a.GetTopic(), b.GetTopic()); c != 0 {
			return c
		}
		return int(a.GetPartition() - b.GetPartition())
	})
	return cands[rng.IntN(len(cands))], nil
}

// Kill implements Target.
func (t *ClusterTarget) Kill(_ context.Context, name string) error {
	p, err := t.proc(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: SIGKILL %s", name)
	return p.Kill()
}

// Start implements Target: a process that is still running is left alone.
func (t *ClusterTarget) Start(ctx context.Context, name string) error {
	p, err := t.proc(name)
	if err != nil {
		return err
	}
	if p.Running() {
		return nil
	}
	t.logf("nemesis: starting %s", name)
	if err := p.Start(); err != nil {
		return err
	}
	timeout := t.ReadyTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	return p.WaitHealthy(ctx, timeout)
}

// Pause implements Target.
func (t *ClusterTarget) Pause(_ context.Context, name string) error {
	p, err := t.proc(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: SIGSTOP %s", name)
	return p.Pause()
}

// Resume implements Target.
func (t *ClusterTarget) Resume(_ context.Context, name string) error {
	p, err := t.proc(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: SIGCONT %s", name)
	return p.Resume()
}

// errNoFaultAPI says the cluster was started without fault injection.
var errNoFaultAPI = errors.New("processes have no fault-injection endpoint (ClusterTarget.Faults is nil)")

// Crash implements Target: it waits until the process has exited.
func (t *ClusterTarget) Crash(ctx context.Context, name string, dropUnsynced bool) error {
	p, err := t.proc(name)
	if err != nil {
		return err
	}
	if t.Faults == nil {
		return errNoFaultAPI
	}
	t.logf("nemesis: crash %s (drop unsynced: %v)", name, dropUnsynced)
	exited := p.Exited()
	cerr := t.Faults(p).Crash(ctx, dropUnsynced)
	select {
	case <-exited:
		// The process may exit before it answers: a broken connection is
		// the expected reply.
		return nil
	case <-time.After(10 * time.Second):
	}
	if cerr == nil {
		cerr = errors.New("still running 10 s after the crash request")
	}
	// Do not leave it half-crashed: the step ends with a restart.
	_ = p.Kill() // it may have exited meanwhile
	return fmt.Errorf("crash of %s: %w (killed instead)", name, cerr)
}

func (t *ClusterTarget) index(name string) (int, error) {
	for i, p := range t.Cluster.Processes() {
		if p.Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no process %q", name)
}

// Peers implements Target.
func (t *ClusterTarget) Peers(name string, storageOnly bool) []string {
	var out []string
	for _, p := range t.Cluster.Processes() {
		if p.Name != name && (!storageOnly || p.Roles.Has(role.StorageNode)) {
			out = append(out, p.Name)
		}
	}
	return out
}

// Isolate implements Target.
func (t *ClusterTarget) Isolate(_ context.Context, name string, from []string) error {
	if t.Net == nil {
		return errors.New("partitions need network namespaces, and this cluster runs without them")
	}
	i, err := t.index(name)
	if err != nil {
		return err
	}
	var js []int
	for _, f := range from {
		j, err := t.index(f)
		if err != nil {
			return err
		}
		js = append(js, j)
	}
	t.logf("nemesis: cutting %s off from %v", name, from)
	return t.Net.Isolate(i, js)
}

// Heal implements Target.
func (t *ClusterTarget) Heal(_ context.Context, name string) error {
	if t.Net == nil {
		return errors.New("partitions need network namespaces, and this cluster runs without them")
	}
	i, err := t.index(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: healing %s", name)
	return t.Net.Heal(i)
}

func (t *ClusterTarget) faultAPI(name string) (FaultAPI, error) {
	p, err := t.proc(name)
	if err != nil {
		return nil, err
	}
	if t.Faults == nil {
		return nil, errNoFaultAPI
	}
	return t.Faults(p), nil
}

// Disk implements Target.
func (t *ClusterTarget) Disk(ctx context.Context, name, detail string, d time.Duration) error {
	api, err := t.faultAPI(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: disk fault %s on %s for %v", detail, name, d)
	return api.Disk(ctx, detail, d)
}

// Clock implements Target.
func (t *ClusterTarget) Clock(ctx context.Context, name string, offset time.Duration) error {
	api, err := t.faultAPI(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: clock of %s shifted by %v", name, offset)
	return api.Clock(ctx, offset)
}

// Peer implements Target.
func (t *ClusterTarget) Peer(ctx context.Context, r Role, from string, rng *rand.Rand) (Victim, error) {
	if r == AnyProcess {
		return Victim{Name: faultapi.AnyPeer, Why: "every peer"}, nil
	}
	src, err := t.proc(from)
	if err != nil {
		return Victim{}, err
	}
	if r == StorageLeader || r == StorageFollower {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		// A partition that links the two: from follows it (r is its
		// leader) or leads it (r is a follower of it).
		var peer *devcluster.Process
		ps, err := t.workloadPartition(lctx, rng, func(ps *commonv1.PartitionState) bool {
			if r == StorageLeader {
				p := t.byID(ps.GetLeaderId())
				return p != nil && p != src && p.Running() && slices.Contains(ps.GetReplicas(), src.NodeID)
			}
			return ps.GetLeaderId() == src.NodeID && len(ps.GetReplicas()) > 1
		})
		if err == nil {
			tp := fmt.Sprintf("%s/%d", ps.GetTopic(), ps.GetPartition())
			if r == StorageLeader {
				peer = t.byID(ps.GetLeaderId())
				return Victim{Name: peer.Name, Why: "leader of " + tp}, nil
			}
			var followers []*devcluster.Process
			for _, id := range ps.GetReplicas() {
				if p := t.byID(id); p != nil && p != src && p.Running() {
					followers = append(followers, p)
				}
			}
			if peer = pick(followers, rng); peer != nil {
				return Victim{Name: peer.Name, Why: "follower of " + tp}, nil
			}
		}
		t.logf("nemesis: no workload partition links %s to a %s (%v); taking another", from, r, err)
	}
	// Any other process of the role: the same choice as a step's target,
	// with from passed over.
	return t.Resolve(ctx, r, map[string]bool{from: true}, rng)
}

// Link implements Target.
func (t *ClusterTarget) Link(ctx context.Context, name, peer string, l Link, d time.Duration) error {
	api, err := t.faultAPI(name)
	if err != nil {
		return err
	}
	addr := faultapi.AnyPeer
	if peer != faultapi.AnyPeer {
		p, err := t.proc(peer)
		if err != nil {
			return err
		}
		addr = p.Addr
	}
	t.logf("nemesis: link fault on %s's calls to %s (%s) for %v: %s", name, peer, addr, d, l)
	return api.Link(ctx, addr, l, d)
}

// Clear implements Target.
func (t *ClusterTarget) Clear(ctx context.Context, name string) error {
	api, err := t.faultAPI(name)
	if err != nil {
		return err
	}
	t.logf("nemesis: clearing faults of %s", name)
	return api.Clear(ctx)
}

// Move implements Target: it rotates one workload partition's replica list
// (the next replica becomes the preferred leader), waits for the
// reassignment to finish and runs a preferred election.
func (t *ClusterTarget) Move(ctx context.Context, rng *rand.Rand) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ps, err := t.workloadPartition(ctx, rng, nil)
	if err != nil {
		return "", err
	}
	reps := ps.GetReplicas()
	if len(reps) < 2 {
		return "", fmt.Errorf("%s/%d has one replica: nothing to move", ps.GetTopic(), ps.GetPartition())
	}
	moved := append(slices.Clone(reps[1:]), reps[0])
	tp := &commonv1.TopicPartition{Topic: ps.GetTopic(), Partition: ps.GetPartition()}
	what := fmt.Sprintf("%s/%d replicas %v -> %v", ps.GetTopic(), ps.GetPartition(), reps, moved)
	t.logf("nemesis: reassigning %s", what)
	resp, err := t.Client.AlterPartitionReassignments(ctx, &controllerv1.AlterPartitionReassignmentsRequest{
		Reassignments: []*controllerv1.PartitionReassignment{{Partition: tp, Replicas: moved}}})
	if err != nil {
		return what, err
	}
	for _, r := range resp.GetResults() {
		if e := errs.FromProto(r.GetError()); e != nil {
			return what, e
		}
	}
	for ctx.Err() == nil {
		lr, err := t.Client.ListPartitionReassignments(ctx, ps.GetTopic())
		if err == nil && len(lr.GetReassignments()) == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The preferred replica may still be catching up: retry the election
	// for a while, and settle for the reassignment alone if it never is.
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
	defer ecancel()
	var last error
	for ectx.Err() == nil {
		er, err := t.Client.ElectLeaders(ectx, &controllerv1.ElectLeadersRequest{
			ElectionType: controllerv1.ElectionType_ELECTION_TYPE_PREFERRED, Partitions: []*commonv1.TopicPartition{tp}})
		last = err
		if err == nil {
			for _, r := range er.GetResults() {
				if e := errs.FromProto(r.GetError()); e != nil && errs.Name(errs.CodeOf(e)) != "ELECTION_NOT_NEEDED" {
					last = e
				}
			}
		}
		if last == nil {
			return what, nil
		}
		select {
		case <-ectx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.logf("nemesis: preferred election of %s/%d not done: %v", ps.GetTopic(), ps.GetPartition(), last)
	return what + "; preferred election not done: " + last.Error(), nil
}

// StartClientFault implements Target.
func (t *ClusterTarget) StartClientFault(_ context.Context, k Kind, detail string, d time.Duration) error {
	if t.ClientFaults == nil {
		return errors.New("client-side faults need ClusterTarget.ClientFaults on the workload's clients")
	}
	t.logf("nemesis: client fault %s for %v", k, d)
	switch k {
	case LateEndTxn:
		t.ClientFaults.StartLateEndTxn(d)
	case StallMember:
		t.ClientFaults.StartStallMember(detail, d)
	case LateCommit:
		t.ClientFaults.StartLateCommit(detail, d)
	default:
		return fmt.Errorf("%s is not a client-side fault", k)
	}
	return nil
}

// StopClientFault implements Target.
func (t *ClusterTarget) StopClientFault(k Kind) string {
	if t.ClientFaults == nil {
		return ""
	}
	d := t.ClientFaults.Stop(k)
	t.logf("nemesis: client fault %s over: %s", k, d)
	return d
}
