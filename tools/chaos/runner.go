package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/verify"
	"github.com/sluice-io/sluice/libs/verify/check"
	"github.com/sluice-io/sluice/libs/verify/nemesis"
	"github.com/sluice-io/sluice/libs/verify/netns"
)

// serverArgs make sessions and rebalances short, so a case sees failover
// within seconds, and turn the fault endpoints on.
var serverArgs = []string{
	"--controller.session-timeout=" + sessionTimeout.String(), "--controller.heartbeat-interval=500ms",
	"--group.initial-rebalance-delay=0s", "--group.min-session-timeout=1s",
	"--group.consumer-session-timeout=3s", "--group.consumer-heartbeat-interval=500ms",
}

// netNames name the network namespaces of a case apart from those of the
// integration tests (integration/netns), which may run at the same time.
var netNames = netns.Names{Bridge: "slcb", Host: "slc", Subnet: "10.232", Table: "sluicechaos"}

// faultFlag turns on the fault endpoints (crash, disk, clock, link).
const faultFlag = "--unsafe.fault-injection"

// needsFaultAPI says whether steps of kind k go through the fault
// endpoints.
func needsFaultAPI(k nemesis.Kind) bool {
	switch k {
	case nemesis.Crash, nemesis.Disk, nemesis.Clock, nemesis.Delay, nemesis.Duplicate:
		return true
	}
	return false
}

// runner runs cases and prints their lines.
type runner struct {
	sluiced string
	out     string
	verbose bool
	// faultsOnly runs the schedules without the workload.
	faultsOnly bool
	// netErr says why partitions are unavailable ("" when they are).
	netErr error
	// faultErr says why the fault endpoints are unavailable.
	faultErr error
	// clientErr says why client-side faults are unavailable.
	clientErr error
	stdout    io.Writer
	results   *os.File
}

// caseResult is one case's outcome, printed as a line and appended to
// results.jsonl.
type caseResult struct {
	Name     string `json:"name"`
	Seed     int64  `json:"seed"`
	Topology string `json:"topology"`
	Workload string `json:"workload"`
	Planted  string `json:"planted,omitempty"`
	// Unsafe names the unsafe settings of a negative control.
	Unsafe string         `json:"unsafe,omitempty"`
	Valid  bool           `json:"valid"`
	Counts map[string]int `json:"counts,omitempty"`
	// Caught says, for a planted case, whether an expected kind was found.
	Caught  bool          `json:"caught,omitempty"`
	Expect  []string      `json:"expect,omitempty"`
	Faults  []check.Fault `json:"faults"`
	Skipped []string      `json:"skipped,omitempty"`
	WallS   float64       `json:"wall_s"`
	Dir     string        `json:"dir"`
	Summary string        `json:"summary,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// probe checks which fault machinery this machine and binary offer.
func (r *runner) probe() {
	r.netErr = netns.Available()
	r.clientErr = setDialOptions(&verify.Config{}, nil)
	out, err := exec.Command(r.sluiced, "--help").CombinedOutput()
	if !strings.Contains(string(out), strings.TrimPrefix(faultFlag, "--")) {
		r.faultErr = fmt.Errorf("%s has no %s flag (help: %v)", r.sluiced, faultFlag, err)
	}
}

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.stdout, format+"\n", args...)
}

// steps returns the case's schedule without the steps this machine cannot
// run, and what was left out.
func (r *runner) steps(c chaosCase) ([]nemesis.Step, []string, error) {
	steps := c.Steps
	if steps == nil {
		o := c.Plan
		o.Duration = c.Duration - 3*time.Second
		if r.netErr != nil {
			o.Partitions = false
		}
		if r.faultErr != nil {
			o.Kinds = slices.DeleteFunc(slices.Clone(o.Kinds), func(k nemesis.Kind) bool {
				return needsFaultAPI(k)
			})
		}
		if r.clientErr != nil {
			o.Kinds = slices.DeleteFunc(slices.Clone(o.Kinds), func(k nemesis.Kind) bool {
				return k == nemesis.LateEndTxn || k == nemesis.StallMember
			})
		}
		if !o.Partitions {
			o.Kinds = slices.DeleteFunc(slices.Clone(o.Kinds), func(k nemesis.Kind) bool { return k == nemesis.Partition })
		}
		var err error
		if steps, err = nemesis.Plan(c.Seed, o); err != nil {
			return nil, nil, err
		}
	}
	var keep []nemesis.Step
	var skipped []string
	for _, s := range steps {
		switch {
		case s.Kind == nemesis.Partition && r.netErr != nil:
			skipped = append(skipped, fmt.Sprintf("%s: no network namespaces: %v", s, r.netErr))
		case needsFaultAPI(s.Kind) && r.faultErr != nil:
			skipped = append(skipped, fmt.Sprintf("%s: %v", s, r.faultErr))
		case s.Target == nemesis.Clients && r.clientErr != nil:
			skipped = append(skipped, fmt.Sprintf("%s: %v", s, r.clientErr))
		default:
			keep = append(keep, s)
		}
	}
	return keep, skipped, nil
}

// run runs one case: starts its cluster, runs the workload with the
// nemesis, checks, stops the cluster.
func (r *runner) run(ctx context.Context, c chaosCase) caseResult {
	start := time.Now()
	res := caseResult{Name: c.Name, Seed: c.Seed, Topology: c.Topology, Workload: c.Workload, Planted: c.Planted,
		Unsafe: c.unsafe(), Dir: filepath.Join(r.out, c.Name)}
	for _, k := range c.Expect {
		res.Expect = append(res.Expect, string(k))
	}
	err := r.runCase(ctx, c, &res)
	var se *setupError
	if errors.As(err, &se) && ctx.Err() == nil {
		// The workload could not set up (topics not yet known to every
		// node) before any fault: an accident of the start, not a finding.
		// One more try on a fresh cluster.
		r.printf("   workload setup failed before any fault (%v); starting the case again", se.err)
		res.Faults, res.Skipped = nil, nil
		err = r.runCase(ctx, c, &res)
	}
	res.WallS = time.Since(start).Seconds()
	if err != nil {
		res.Error = err.Error()
	}
	if r.results != nil {
		b, _ := json.Marshal(res) // plain data
		_, _ = r.results.Write(append(b, '\n'))
	}
	return res
}

func (r *runner) runCase(ctx context.Context, c chaosCase, res *caseResult) error {
	steps, skipped, err := r.steps(c)
	if err != nil {
		return err
	}
	res.Skipped = skipped
	cfg, err := workloadConfig(c.Workload)
	if err != nil {
		return err
	}
	if c.Acks != "" {
		cfg.Acks = c.Acks
	}
	if len(c.TopicConfigs) > 0 {
		cfg.TopicConfigs = maps.Clone(c.TopicConfigs)
	}
	spec, err := nemesis.TopologySpec(c.Topology)
	if err != nil {
		return err
	}
	r.printf("== %s: seed %d, %s, workload %s, %v; %s", c.Name, c.Seed, c.Topology, c.Workload, c.Duration, c.Why)
	for _, s := range steps {
		r.printf("   fault %s", s)
	}
	for _, s := range skipped {
		r.printf("   SKIPPED %s", s)
	}
	if err := os.RemoveAll(res.Dir); err != nil {
		return err
	}
	spec.Sluiced, spec.Dir = r.sluiced, filepath.Join(res.Dir, "cluster")
	spec.ExtraArgs = slices.Concat(serverArgs, c.ServerArgs)
	if r.faultErr == nil {
		spec.ExtraArgs = append(spec.ExtraArgs, faultFlag)
	}
	if c.Planted != "" {
		spec.Env = []string{"SLUICE_PLANTED=" + c.Planted}
	}
	spec.ReadyTimeout = 90 * time.Second
	var net *netns.Net
	if r.netErr == nil && slices.ContainsFunc(steps, func(s nemesis.Step) bool { return s.Kind == nemesis.Partition }) {
		if net, err = netns.New(nemesis.SpecProcesses(spec), netNames); err != nil {
			return fmt.Errorf("network namespaces: %w", err)
		}
		defer net.Close()
		spec.Hosts, spec.Wrap = net.IPs(), net.Exec
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	cl, err := devcluster.Start(sctx, spec)
	scancel()
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	defer cl.StopAll()
	sdk, err := client.New(client.Config{Bootstrap: cl.Bootstrap()})
	if err != nil {
		return err
	}
	defer sdk.Close()

	prefix := fmt.Sprintf("chaos-%d-", c.Seed)
	cf := &nemesis.ClientFaults{GroupPrefix: prefix}
	var flog nemesis.Log
	target := &nemesis.ClusterTarget{Cluster: cl, Client: sdk, TopicPrefix: prefix, Net: net, ClientFaults: cf,
		Logf: func(format string, args ...any) {
			r.printf("   %s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}}
	if r.faultErr == nil {
		target.Faults = nemesis.HTTPFaults
	}
	level := slog.LevelError
	if r.verbose {
		level = slog.LevelInfo
	}
	cfg.Bootstrap, cfg.Duration, cfg.Seed, cfg.TopicPrefix = cl.Bootstrap(), c.Duration, c.Seed, prefix
	cfg.Out = filepath.Join(res.Dir, "report")
	cfg.Logger = slog.New(slog.NewTextHandler(r.stdout, &slog.HandlerOptions{Level: level})).With("case", c.Name)
	cfg.Faults = &flog
	if err := setDialOptions(&cfg, cf.DialOptions()); err != nil {
		target.ClientFaults = nil
	}

	nctx, ncancel := context.WithCancel(ctx)
	nemesisDone := make(chan error, 1)
	topics := cfg.Topics
	if topics == 0 {
		topics = 3 // verify's default
	}
	if r.faultsOnly {
		topics = 1
	}
	go func() {
		// The schedule's times count from the moment the workload's topics
		// have leaders, so the first fault hits a running workload rather
		// than topic creation.
		waitTopics(nctx, sdk, prefix, topics)
		nemesisDone <- nemesis.Run(nctx, steps, target, flog.Add)
	}()
	if r.faultsOnly {
		// The schedule alone, to try the fault machinery: create a topic
		// for the roles to be found in, wait out the duration.
		if _, err := sdk.CreateTopic(ctx, prefix+"t0", 3, int32(min(3, len(cl.StorageNodes())+boolInt(spec.Combined))), nil); err != nil {
			ncancel()
			return errors.Join(fmt.Errorf("creating a topic: %w", err), <-nemesisDone)
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.Duration):
		}
		nerr := r.skips(<-nemesisDone, res)
		ncancel()
		res.Faults, res.Valid = flog.Faults(), true
		if nerr != nil {
			return fmt.Errorf("nemesis: %w", nerr)
		}
		return cl.WaitHealthy(ctx, 30*time.Second)
	}
	report, verr := verify.Run(ctx, cfg)
	ncancel()
	nerr := r.skips(<-nemesisDone, res)
	res.Faults = flog.Faults()
	if verr != nil {
		var ce *verify.ConnectError
		if errors.As(verr, &ce) && len(res.Faults) == 0 {
			return &setupError{err: errors.Join(verr, nerr)}
		}
		return errors.Join(fmt.Errorf("verify: %w", verr), nerr)
	}
	res.Valid = report.Valid()
	res.Counts = map[string]int{}
	counts := report.Result.Counts()
	for k, n := range counts {
		if n > 0 {
			res.Counts[string(k)] = n
		}
	}
	res.Summary = report.Result.Summary()
	for _, k := range c.Expect {
		if counts[k] > 0 {
			res.Caught = true
		}
	}
	if nerr != nil {
		// The verdict stands, but a fault that was not undone (a process
		// that did not come back) is an error of the run.
		return fmt.Errorf("nemesis: %w", nerr)
	}
	if res.Valid && c.Planted == "" {
		// Keep the logs and the report, not the data.
		for _, p := range cl.Processes() {
			_ = os.RemoveAll(p.DataDir) // only saves disk
		}
	}
	return nil
}

// skips takes the steps the nemesis skipped for want of a target out of
// its error, prints them and adds them to res.Skipped; it returns the
// failures left.
func (r *runner) skips(nerr error, res *caseResult) error {
	skipped, failed := nemesis.Skipped(nerr)
	for _, s := range skipped {
		r.printf("   SKIPPED %v", s)
		res.Skipped = append(res.Skipped, s.Error())
	}
	return failed
}

// line renders a case result as one line.
func (res caseResult) line() string {
	verdict := "VALID"
	if !res.Valid {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(res.Counts)) {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, res.Counts[k]))
		}
		verdict = "INVALID (" + strings.Join(kinds, " ") + ")"
	}
	if res.Error != "" {
		verdict = "ERROR: " + res.Error
	}
	if what := cmp.Or(res.Planted, res.Unsafe); what != "" && res.Error == "" {
		if res.Caught {
			verdict = "CAUGHT " + what + ": " + verdict
		} else {
			verdict = "NOT CAUGHT " + what + " (expected " + strings.Join(res.Expect, " or ") + "): " + verdict
		}
	}
	return fmt.Sprintf("%s seed=%d %s/%s: %s in %.0fs, faults: %s; %s", res.Name, res.Seed, res.Topology, res.Workload,
		verdict, res.WallS, faultCounts(res.Faults), res.Dir)
}

// faultClass names a fault for the totals: its kind and the role of what
// it hit.
func faultClass(f check.Fault) string {
	role := "process"
	// The role is named before the first ';' (what follows, such as a
	// partition's "cut from [controller-1 ...]", names other processes).
	d, _, _ := strings.Cut(f.Detail, ";")
	switch {
	case strings.Contains(f.Detail, "failed:"):
		return f.Kind + " (failed)"
	case f.Kind == string(nemesis.Move) || f.Target == string(nemesis.Clients):
		return f.Kind
	case strings.HasPrefix(d, "leader of"):
		role = "storage leader"
	case strings.HasPrefix(d, "follower of"):
		role = "storage follower"
	case strings.HasPrefix(d, "active controller"):
		role = "active controller"
	case strings.Contains(d, "controller"):
		role = "controller"
	case strings.Contains(d, "coordinator of group"), strings.HasPrefix(d, "group-coordinator"):
		role = "group coordinator"
	case strings.HasPrefix(d, "txn-coordinator"):
		role = "txn coordinator"
	case strings.Contains(d, "replication"):
		role = "replication worker"
	case strings.HasPrefix(d, "storage"):
		role = "storage node"
	}
	k := f.Kind + " " + role
	if f.Kind == string(nemesis.Crash) && strings.Contains(f.Detail, "drop-unsynced") {
		k += " (unsynced dropped)"
	}
	return k
}

func faultCounts(fs []check.Fault) string {
	if len(fs) == 0 {
		return "none"
	}
	m := map[string]int{}
	for _, f := range fs {
		m[faultClass(f)]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitTopics waits (up to a minute) until n topics named prefix* exist and
// every partition of them has a leader.
func waitTopics(ctx context.Context, sdk *client.Client, prefix string, n int) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if md, err := sdk.Metadata(ctx); err == nil {
			ready := 0
			for _, ti := range md.GetTopics() {
				if !strings.HasPrefix(ti.GetName(), prefix) || len(ti.GetPartitions()) == 0 {
					continue
				}
				led := true
				for _, ps := range ti.GetPartitions() {
					led = led && ps.GetLeaderId() >= 0
				}
				if led {
					ready++
				}
			}
			if ready >= n {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setupError is a workload that could not start before any fault.
type setupError struct{ err error }

func (e *setupError) Error() string { return "workload setup: " + e.err.Error() }
