// Command sluice-bench measures Sluice side by side with a peer (NATS
// JetStream, file store, one replica) and with the machine's own limits
// (the grpc-go stream ceiling, fdatasync every 1 MiB, page-cache reads), in
// one invocation: every figure is measured in each of several interleaved
// rounds and reported as the median, with its ratio to the peer and to the
// limit, and the goals met or missed. `make bench` runs it.
//
//	sluice-bench run --bin bin --out bench/results
//
// The other subcommands are the measurements the run starts as processes of
// their own, printing one JSON object of figures each; the report lists
// them as the exact commands that reproduce a figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "run":
		err = runMain(args)
	case "txn":
		err = txnMain(args)
	case "kafka":
		err = kafkaMain(args)
	case "security":
		err = securityMain(args)
	case "connections":
		err = connectionsMain(args)
	case "summary":
		err = summaryMain(args)
	case "compare":
		err = compareMain(args)
	case "connections-crowd":
		err = connectionsCrowd(args)
	case "kafka-produce":
		err = kafkaProduce(args)
	case "kafka-consume":
		err = kafkaConsume(args)
	case "limit-grpc":
		err = limitGRPC(args)
	case "limit-fsync":
		err = limitFsync(args)
	case "limit-read":
		err = limitRead(args)
	case "limit-aead":
		err = limitAEAD(args)
	case "nats-pub":
		err = natsPublish(args)
	case "nats-consume":
		err = natsConsume(args)
	case "nats-e2e":
		err = natsE2E(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: sluice-bench run [flags]        the whole comparison; writes the report
       sluice-bench txn [flags]        idempotence and transactions against a plain producer
       sluice-bench kafka [flags]      franz-go over the Kafka listener against the SDK over gRPC
       sluice-bench security [flags]   TLS and ACLs against plaintext, over gRPC and Kafka
       sluice-bench connections [flags] idle connections and partition replicas on one node
       sluice-bench summary --out DIR (--since TIME | REPORT...)  every goal of one make bench in one table
       sluice-bench compare [flags] PKGDIR...  Go micro-benchmarks at a base revision against the working tree (benchstat)
       sluice-bench kafka-produce|kafka-consume [flags]
       sluice-bench limit-grpc|limit-fsync|limit-read|limit-aead [flags]
       sluice-bench nats-pub|nats-consume|nats-e2e [flags]`)
	os.Exit(2)
}

// config is the run's plan: counts, sizes and where things are.
type config struct {
	binDir, outDir, tmpParent string
	rounds                    int
	records1K                 int64 // 1 KiB produce (acks=1, fsync) and consume
	records100                int64 // 100 B produce
	recordsFsyncPeer          int64 // JetStream with an fsync per message
	recordsRF3                int64
	recordsDefaults1K         int64 // 1 KiB produce with the perf tool's defaults
	recordsDefaults100        int64
	sustainedGiB              int
	only                      map[string]bool // blocks to run; nil: all
	e2eRecords                int64
	e2eRate                   float64
	batchSize                 int
	partitions                int
	idleThreshold             float64
	idleMax, idleBudget       time.Duration
}

// blockNames are the parts of a run, for --only.
var blockNames = []string{"limits", "sluice", "nats", "rf3", "defaults", "sustained"}

// runs says whether the run includes the block.
func (c config) runs(block string) bool { return c.only == nil || c.only[block] }

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var c config
	fs.StringVar(&c.binDir, "bin", "bin", "directory with sluiced, sluice and nats-server")
	fs.StringVar(&c.outDir, "out", "bench/results", "directory for <date>.md and <date>.json")
	fs.StringVar(&c.tmpParent, "tmp", "", "parent of the temporary data directory (default $TMPDIR); its disk is the one measured")
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds; figures are medians over rounds")
	fs.Int64Var(&c.records1K, "records-1k", 1_000_000, "1 KiB records per produce run (acks=1 and fsync) and consume run")
	fs.Int64Var(&c.records100, "records-100", 1_000_000, "100 B records per produce run")
	fs.Int64Var(&c.recordsFsyncPeer, "records-fsync-peer", 20_000, "1 KiB messages per JetStream fsync-per-message run (about 4k/s)")
	fs.Int64Var(&c.recordsRF3, "records-rf3", 1_000_000, "1 KiB records per RF=3 produce run")
	fs.Int64Var(&c.recordsDefaults1K, "records-defaults-1k", 1_000_000, "1 KiB records per produce run with sluice perf's defaults (both durabilities)")
	fs.Int64Var(&c.recordsDefaults100, "records-defaults-100", 1_000_000, "100 B records per produce run with sluice perf's defaults (both durabilities)")
	fs.IntVar(&c.sustainedGiB, "sustained-gb", 10, "GiB of 1 KiB records per sustained run, once after the rounds (0: no sustained block)")
	only := fs.String("only", "", "comma-separated blocks to run, of "+strings.Join(blockNames, ", ")+" (default: all)")
	fs.Int64Var(&c.e2eRecords, "e2e-records", 100_000, "records per end-to-end latency run")
	fs.Float64Var(&c.e2eRate, "e2e-rate", 10_000, "records/s of the end-to-end latency runs")
	fs.IntVar(&c.batchSize, "batch-size", 256<<10, "Sluice producer batch size (at least 64 KiB)")
	fs.IntVar(&c.partitions, "partitions", 1, "partitions of the Sluice topics")
	fs.Float64Var(&c.idleThreshold, "idle-threshold", 15, "CPU busy percent below which the machine counts as idle")
	fs.DurationVar(&c.idleMax, "idle-max", 30*time.Second, "longest wait for an idle CPU before one measurement")
	fs.DurationVar(&c.idleBudget, "idle-budget", 6*time.Minute, "longest total wait for an idle CPU over the run")
	_ = fs.Parse(args) // ExitOnError
	if c.rounds < 1 {
		return fmt.Errorf("--rounds must be at least 1")
	}
	if *only != "" {
		c.only = map[string]bool{}
		for _, b := range strings.Split(*only, ",") {
			if !slices.Contains(blockNames, b) {
				return fmt.Errorf("--only: no block %q (blocks: %s)", b, strings.Join(blockNames, ", "))
			}
			c.only[b] = true
		}
	}
	bins := []string{"sluiced", "sluice"}
	if c.runs("nats") {
		bins = append(bins, "nats-server")
	}
	for _, name := range bins {
		if _, err := os.Stat(filepath.Join(c.binDir, name)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make build bench-tools` first", name, c.binDir)
		}
	}
	var err error
	if c.binDir, err = filepath.Abs(c.binDir); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp(c.tmpParent, "sluice-bench-")
	if err != nil {
		return err
	}
	h := &harness{cfg: c, tmp: tmp, procs: &processes{marker: tmp},
		idle: idleGate{threshold: c.idleThreshold, maxWait: c.idleMax, budget: c.idleBudget}, servers: map[string]string{}}
	// Every exit path stops what was started and removes the data.
	defer func() {
		h.procs.stopAll()
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(os.Stderr, "removing %s: %v\n", tmp, err)
		}
	}()
	if h.self, err = os.Executable(); err != nil {
		return err
	}
	start := time.Now()
	h.facts = machineFacts(c, tmp)
	h.logf("sluice-bench: %d rounds, data in %s (%s)", c.rounds, tmp, h.facts.Disk)
	var blocks []func(context.Context, int)
	for _, b := range []struct {
		name string
		run  func(context.Context, int)
	}{{"limits", h.limitsBlock}, {"sluice", h.sluiceBlock}, {"nats", h.natsBlock}, {"rf3", h.rf3Block}, {"defaults", h.defaultsBlock}} {
		if c.runs(b.name) {
			blocks = append(blocks, b.run)
		}
	}
	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		// Rotate the order each round, so slow drift (page cache, disk
		// writeback, a neighbour's load) does not always favour one system.
		for i := range blocks {
			if ctx.Err() != nil {
				break
			}
			// Each block starts from a page cache holding no file data: on
			// a machine whose memory is full of cache, every page written
			// first has to be reclaimed, and runs swing by 2x between the
			// two states.
			h.dropCaches()
			blocks[(i+r-1)%len(blocks)](ctx, r)
		}
	}
	if c.runs("sustained") && c.sustainedGiB > 0 && ctx.Err() == nil {
		h.sustainedBlock(ctx)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; no report written")
	}
	rep := buildReport(h, time.Since(start))
	md, js, err := rep.write(c.outDir)
	if err != nil {
		return err
	}
	h.logf("report: %s and %s (%.1f min)", md, js, time.Since(start).Minutes())
	fmt.Print(rep.goalsText())
	return nil
}
