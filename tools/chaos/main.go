// Command sluice-chaos runs the checked workload (libs/verify) against real
// sluiced processes while the nemesis (libs/verify/nemesis) injects faults,
// and reports the checker's verdict with the seed that replays it.
//
//	sluice-chaos run --sluiced bin/sluiced                      # the PR tier
//	sluice-chaos run --sluiced bin/sluiced --tier soak --duration 1h
//	sluice-chaos run --sluiced bin/sluiced --seed 12345         # replay one case
//	sluice-chaos run --sluiced bin/sluiced-planted --planted all
//	sluice-chaos run --sluiced bin/sluiced --negative [--control]
//	sluice-chaos list
//
// Every case starts its own cluster (all-in-one, dev3 or split) with
// --unsafe.fault-injection, writes its report (summary.txt, result.json,
// history.json, timeline.svg) and the process logs under --out/<case>, and
// prints one line. results.jsonl in --out has one JSON object per case.
// Partitions need root, iproute2 and nftables; where network namespaces
// cannot be made, partition steps are skipped and the output says so.
//
// Exit status: 0 when every case is valid (with --planted: when every
// planted bug was caught with an expected anomaly kind; with --negative:
// when every negative control's unsafe settings were caught so; with
// --control, when every case was valid without them), 1 when not, 2 on a
// usage error or a run that could not be carried out.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func usage() {
	fmt.Fprintln(os.Stderr, `usage: sluice-chaos run --sluiced PATH [--tier pr|soak] [--case NAME] [--seed N] [--duration D]
                   [--topology all-in-one|dev3|split] [--workload default|txn|groups|produce]
                   [--planted NAME|all | --negative] [--control] [--out DIR] [-v]
       sluice-chaos list`)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "run":
		os.Exit(runMain(os.Args[2:]))
	case "list":
		listCases()
	default:
		usage()
	}
}

func listCases() {
	fmt.Println("PR tier:")
	for _, c := range prCases {
		fmt.Printf("  %-22s seed %-4d %-10s %-8s %v: %s\n", c.Name, c.Seed, c.Topology, c.Workload, c.Duration, c.Why)
		for _, s := range c.Steps {
			fmt.Printf("      %s\n", s)
		}
	}
	fmt.Println("Planted bugs (run with a sluice_planted build):")
	for _, c := range plantedCases {
		fmt.Printf("  %-26s seed %-4d %-10s %-8s %v, expects %v: %s\n", c.Planted, c.Seed, c.Topology, c.Workload, c.Duration, c.Expect, c.Why)
	}
	fmt.Println("Negative controls (--negative, on the normal build):")
	for _, c := range negativeCases {
		fmt.Printf("  %-26s seed %-4d %-10s %-8s %v, %s, expects %v: %s\n", c.Name, c.Seed, c.Topology, c.Workload, c.Duration, c.unsafe(), c.Expect, c.Why)
		for _, s := range c.Steps {
			fmt.Printf("      %s\n", s)
		}
	}
}

func runMain(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	sluiced := fs.String("sluiced", "bin/sluiced", "sluiced binary to run (a sluice_planted build for --planted)")
	tier := fs.String("tier", "pr", "pr (the fixed cases) or soak (random seeds until --duration is spent)")
	caseName := fs.String("case", "", "run only this PR-tier case")
	seed := fs.Int64("seed", 0, "run the one case of this seed (a PR-tier or planted case's seed, or else a soak case drawn from it)")
	duration := fs.Duration("duration", 0, "soak: how long to keep running cases (default 10m); other tiers: override each case's workload duration")
	topology := fs.String("topology", "", "override the topology of the cases run")
	workload := fs.String("workload", "", "override the workload of the cases run")
	planted := fs.String("planted", "", "run the case built to catch this planted bug (or all of them) and require it caught")
	control := fs.Bool("control", false, "with --planted: run the cases without the bug (SLUICE_PLANTED unset) and require them valid; "+
		"with --negative: run the cases with acks=all and the workload's safe topic configs and require them valid")
	negative := fs.Bool("negative", false, "run the negative controls (acks=1 and unclean leader election on the normal build) and require "+
		"the checker to report lost or inconsistent records")
	out := fs.String("out", "", "directory for reports and logs (default $TMPDIR/sluice-chaos-<time>)")
	verbose := fs.Bool("v", false, "print the workload's progress lines")
	faultsOnly := fs.Bool("faults-only", false, "run the fault schedules without the workload (to try the fault machinery)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sluice-chaos: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if _, err := os.Stat(*sluiced); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-chaos: sluiced binary: %v (build it with make build)\n", err)
		return 2
	}
	if *tier != "pr" && *tier != "soak" {
		fmt.Fprintf(os.Stderr, "sluice-chaos: --tier is pr or soak, not %q\n", *tier)
		return 2
	}
	if *topology != "" && !slices.Contains([]string{"all-in-one", "dev3", "split"}, *topology) {
		fmt.Fprintf(os.Stderr, "sluice-chaos: unknown topology %q (all-in-one, dev3, split)\n", *topology)
		return 2
	}
	if *workload != "" && !slices.Contains(workloads, *workload) {
		fmt.Fprintf(os.Stderr, "sluice-chaos: unknown workload %q (%s)\n", *workload, strings.Join(workloads, ", "))
		return 2
	}
	if *out == "" {
		*out = filepath.Join(os.TempDir(), "sluice-chaos-"+time.Now().UTC().Format("20060102-150405"))
	}
	abs, err := filepath.Abs(*sluiced)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-chaos: %v\n", err)
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-chaos: %v\n", err)
		return 2
	}
	results, err := os.OpenFile(filepath.Join(*out, "results.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-chaos: %v\n", err)
		return 2
	}
	defer results.Close()
	r := &runner{sluiced: abs, out: *out, verbose: *verbose, faultsOnly: *faultsOnly, stdout: os.Stdout, results: results}
	r.probe()
	if r.netErr != nil {
		r.printf("partitions unavailable, partition steps are skipped: %v", r.netErr)
	}
	if r.faultErr != nil {
		r.printf("fault endpoints unavailable, crash, disk, clock, delay and duplicate steps are skipped: %v", r.faultErr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A closed stdout (sluice-chaos | head) must not kill the runner
	// before it stops its clusters: with SIGPIPE caught, writes fail with
	// EPIPE instead.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	override := func(c chaosCase) chaosCase {
		if *topology != "" {
			c.Topology = *topology
		}
		if *workload != "" {
			c.Workload = *workload
		}
		if *duration != 0 && *tier != "soak" {
			c.Duration = *duration
		}
		return c
	}

	if *negative && *planted != "" {
		fmt.Fprintln(os.Stderr, "sluice-chaos: --negative and --planted are separate runs (negative controls run on the normal build)")
		return 2
	}
	switch {
	case *negative:
		cases := slices.Clone(negativeCases)
		if *control {
			for i := range cases {
				cases[i] = cases[i].safe()
			}
		}
		return r.runList(ctx, cases, override, !*control)
	case *planted != "":
		var cases []chaosCase
		if *planted == "all" {
			cases = slices.Clone(plantedCases)
		} else {
			c, err := plantedCase(*planted)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sluice-chaos: %v\n", err)
				return 2
			}
			cases = []chaosCase{c}
		}
		if *control {
			for i := range cases {
				cases[i].Name += "-control"
				cases[i].Planted, cases[i].Expect = "", nil
			}
		}
		return r.runList(ctx, cases, override, !*control)
	case *seed != 0:
		c := seedCase(*seed)
		return r.runList(ctx, []chaosCase{c}, override, c.Planted != "" || c.unsafe() != "")
	case *tier == "soak":
		d := *duration
		if d == 0 {
			d = 10 * time.Minute
		}
		return r.soak(ctx, d, override)
	default:
		cases := prCases
		if *caseName != "" {
			i := slices.IndexFunc(prCases, func(c chaosCase) bool { return c.Name == *caseName })
			if i < 0 {
				fmt.Fprintf(os.Stderr, "sluice-chaos: no PR-tier case %q (see sluice-chaos list)\n", *caseName)
				return 2
			}
			cases = prCases[i : i+1]
		}
		return r.runList(ctx, cases, override, false)
	}
}

// runList runs cases in order and returns the exit status.
func (r *runner) runList(ctx context.Context, cases []chaosCase, override func(chaosCase) chaosCase, planted bool) int {
	start := time.Now()
	status := 0
	var lines []string
	for _, c := range cases {
		if ctx.Err() != nil {
			return 2
		}
		res := r.run(ctx, override(c))
		r.printf("%s", res.line())
		lines = append(lines, res.line())
		switch {
		case res.Error != "":
			status = max(status, 2)
			r.printf("   replay: make chaos SEED=%d", res.Seed)
		case planted && !res.Caught:
			status = max(status, 1)
			r.printf("%s", indent(res.Summary))
		case !planted && !res.Valid:
			status = max(status, 1)
			r.printf("%s", indent(res.Summary))
			r.printf("   replay: make chaos SEED=%d", res.Seed)
		}
	}
	r.printf("\n%d cases in %.0fs:", len(cases), time.Since(start).Seconds())
	for _, l := range lines {
		r.printf("  %s", l)
	}
	return status
}

// soak runs cases of random seeds until d is spent.
func (r *runner) soak(ctx context.Context, d time.Duration, override func(chaosCase) chaosCase) int {
	deadline := time.Now().Add(d)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	totals := map[string]int{}
	var failed []int64
	n, status := 0, 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c := override(seedCase(1 + rng.Int64N(1<<40)))
		res := r.run(ctx, c)
		n++
		r.printf("%s", res.line())
		for _, f := range res.Faults {
			totals[faultClass(f)]++
		}
		if res.Error != "" || !res.Valid {
			failed = append(failed, res.Seed)
			status = max(status, 1)
			if res.Error != "" {
				status = 2
			} else {
				r.printf("%s", indent(res.Summary))
			}
			r.printf("   replay: make chaos SEED=%d", res.Seed)
		}
	}
	r.printf("\nsoak: %d cases, %d failed", n, len(failed))
	r.printf("faults injected:")
	keys := make([]string, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r.printf("  %-40s %d", k, totals[k])
	}
	for _, s := range failed {
		r.printf("FAILED: make chaos SEED=%d", s)
	}
	return status
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = append(lines[:40], fmt.Sprintf("... (%d more lines in the report)", len(lines)-40))
	}
	return "   | " + strings.Join(lines, "\n   | ")
}
