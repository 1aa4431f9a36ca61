package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/libs/client"
)

// The transactions benchmark (`sluice-bench txn`, `make bench-txn`): what
// idempotence and transactions cost a producer of 1 KiB records with
// acks=all, against the same producer with idempotence off, measured side
// by side on one `sluiced --roles=all` in interleaved rounds. Kafka's own
// figure is about 3 % for transactions committed every 100 ms.

// txnVariant is one way of producing.
type txnVariant struct {
	id, label string
	args      func(round int) []string
}

func txnVariantArgs(ms int) func(int) []string {
	return func(round int) []string {
		// A transactional id per round: a round never fences another's
		// producer, and every round pays the same InitProducerId.
		return []string{"--transactional-id", fmt.Sprintf("bench-txn-%dms-r%d", ms, round), "--txn-interval", fmt.Sprintf("%dms", ms)}
	}
}

var txnVariants = []txnVariant{
	{"plain", "plain (idempotence off)", func(int) []string { return []string{"--idempotence=false"} }},
	{"idempotent", "idempotent (the default)", func(int) []string { return nil }},
	{"txn_1000ms", "transactions, commit every 1000 ms", txnVariantArgs(1000)},
	{"txn_100ms", "transactions, commit every 100 ms", txnVariantArgs(100)},
	{"txn_10ms", "transactions, commit every 10 ms", txnVariantArgs(10)},
}

type txnConfig struct {
	binDir, outDir, tmpParent string
	rounds                    int
	roundSeconds              float64
	records                   int64
	batchSize                 int
	idleThreshold             float64
	idleMax, idleBudget       time.Duration
}

func txnMain(args []string) error {
	fs := flag.NewFlagSet("txn", flag.ExitOnError)
	var c txnConfig
	fs.StringVar(&c.binDir, "bin", "bin", "directory with sluiced and sluice")
	fs.StringVar(&c.outDir, "out", "bench/results", "directory for <date>-txn.md and <date>-txn.json")
	fs.StringVar(&c.tmpParent, "tmp", "", "parent of the temporary data directory (default $TMPDIR)")
	fs.IntVar(&c.rounds, "rounds", 5, "interleaved rounds of every variant; figures are medians over rounds")
	fs.Float64Var(&c.roundSeconds, "round-seconds", 12, "target length of one measurement: --records is set from a calibration run of the plain producer")
	fs.Int64Var(&c.records, "records", 0, "1 KiB records per measurement (0: from --round-seconds)")
	fs.IntVar(&c.batchSize, "batch-size", 256<<10, "producer batch size")
	fs.Float64Var(&c.idleThreshold, "idle-threshold", 15, "CPU busy percent below which the machine counts as idle")
	fs.DurationVar(&c.idleMax, "idle-max", 10*time.Second, "longest wait for an idle CPU before one measurement")
	fs.DurationVar(&c.idleBudget, "idle-budget", time.Minute, "longest total wait for an idle CPU over the run")
	_ = fs.Parse(args) // ExitOnError
	if c.rounds < 1 || c.roundSeconds <= 0 {
		return fmt.Errorf("--rounds must be at least 1 and --round-seconds positive")
	}
	h, cleanup, err := openHarness(c.binDir, c.tmpParent, "sluice-bench-txn-", idleGate{threshold: c.idleThreshold, maxWait: c.idleMax, budget: c.idleBudget})
	if err != nil {
		return err
	}
	defer cleanup()
	tmp := h.tmp
	c.binDir = h.cfg.binDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	loadStart := loadAvg()
	h.logf("sluice-bench txn: %d rounds, data in %s (%s), load average %s", c.rounds, tmp, h.facts.Disk, loadStart)

	srv, addr, err := h.startSluiced(ctx, "sluiced-txn")
	if err != nil {
		return err
	}
	admin, err := client.New(client.Config{Bootstrap: []string{addr}, RequestTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer admin.Close()

	produce := func(topic string, n int64, extra ...string) []string {
		return append([]string{filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "produce",
			"--topic", topic, "--partitions", "1", "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=false",
			"--num-records", strconv.FormatInt(n, 10), "--record-size", "1024", "--acks", "all",
			"--batch-size", strconv.Itoa(c.batchSize)}, extra...)
	}
	// Warm-up: creates the transaction state topic (50 partitions) and
	// loads its coordinators, so no round pays for that; the plain run
	// gives the rate that sizes the rounds.
	// The calibration run is long enough (about 3 s) for the first
	// second's ramp-up not to halve its rate.
	var rate float64
	for _, w := range []struct {
		name string
		n    int64
		args []string
	}{{"warmup-txn", 200_000, []string{"--transactional-id", "bench-txn-warmup", "--txn-interval", "100ms"}},
		{"calibrate", 1_000_000, []string{"--idempotence=false"}}} {
		res, err := runCommand(ctx, filepath.Join(tmp, w.name+".log"), 5*time.Minute, produce(w.name, w.n, w.args...))
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		f, err := parseFigures(res.stdout, true)
		if err != nil {
			return err
		}
		rate = f["records_per_s"]
		h.deleteTopic(ctx, admin, w.name)
	}
	if c.records == 0 {
		c.records = max(int64(math.Round(rate*c.roundSeconds/10_000))*10_000, 50_000)
	}
	h.logf("plain producer at %.0f records/s in the calibration run: %d records per measurement", rate, c.records)

	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		for i := range txnVariants {
			if ctx.Err() != nil {
				break
			}
			// Rotate the order each round, so drift does not favour one
			// variant.
			v := txnVariants[(i+r-1)%len(txnVariants)]
			topic := fmt.Sprintf("%s-r%d", strings.ReplaceAll(v.id, "_", "-"), r)
			load0 := loadAvg1()
			h.measure(ctx, r, measurement{figure: "txn." + v.id, sluicePerf: true, server: srv, cpu: true, bytes: c.records * 1024,
				argv: produce(topic, c.records, v.args(r)...)})
			s := &h.samples[len(h.samples)-1]
			if s.Values != nil {
				s.Values["load1_before"], s.Values["load1_after"] = load0, loadAvg1()
				if cpu, ok := s.Values["client_cpu_s"]; ok {
					s.Values["client_cpu_s_per_gb"] = cpu / (float64(c.records*1024) / 1e9)
				}
			}
			// Frees the disk; every measurement writes to a fresh topic.
			h.deleteTopic(ctx, admin, topic)
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; no report written")
	}
	if d := srv.died(); d != "" {
		h.logf("%s", d)
	}
	rep := buildTxnReport(h, c, time.Since(start), loadStart, loadAvg())
	md, js, err := rep.write(c.outDir)
	if err != nil {
		return err
	}
	h.logf("report: %s and %s (%.1f min)", md, js, time.Since(start).Minutes())
	fmt.Print(rep.summaryText())
	return nil
}

func (h *harness) deleteTopic(ctx context.Context, c *client.Client, topic string) {
	if _, err := c.DeleteTopics(ctx, topic); err != nil {
		h.logf("deleting topic %s: %v", topic, err)
	}
}

// loadAvg returns /proc/loadavg's 1, 5 and 15 minute figures.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func loadAvg1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ---- report ----

type txnRow struct {
	ID    string          `json:"id"`
	Label string          `json:"label"`
	Stats map[string]stat `json:"stats"`
	// RatioOfMedians and MedianRatio compare with the plain producer:
	// this variant's median over plain's, and the median over rounds of
	// the ratio within each round.
	RatioOfMedians map[string]float64 `json:"ratio_of_medians_to_plain"`
	MedianRatio    map[string]float64 `json:"median_per_round_ratio_to_plain"`
	Command        string             `json:"command"`
	Failures       []string           `json:"failures,omitempty"`
}

type txnReport struct {
	Date       string            `json:"date"`
	Minutes    float64           `json:"duration_min"`
	Facts      facts             `json:"machine"`
	Plan       map[string]any    `json:"plan"`
	LoadBefore string            `json:"load_average_before"`
	LoadAfter  string            `json:"load_average_after"`
	Servers    map[string]string `json:"servers"`
	Rows       []txnRow          `json:"variants"`
	Goals      []condition       `json:"goals"`
	Samples    []sample          `json:"samples"`
}

func buildTxnReport(h *harness, c txnConfig, d time.Duration, load0, load1 string) *txnReport {
	r := &txnReport{
		Date: time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), Minutes: math.Round(d.Minutes()*10) / 10,
		Facts: h.facts, Servers: h.servers, Samples: h.samples, LoadBefore: load0, LoadAfter: load1,
		Plan: map[string]any{"rounds": c.rounds, "records": c.records, "record_size": 1024, "batch_size": c.batchSize,
			"acks": "all", "partitions": 1, "replication_factor": 1, "fsync_before_ack": false, "idle_threshold_pct": c.idleThreshold},
	}
	// Per round, the plain producer's figures, for per-round ratios.
	plain := map[int]figures{}
	for _, s := range h.samples {
		if s.Figure == "txn.plain" && s.Error == "" {
			plain[s.Round] = s.Values
		}
	}
	for _, v := range txnVariants {
		row := txnRow{ID: v.id, Label: v.label, Stats: map[string]stat{}, RatioOfMedians: map[string]float64{}, MedianRatio: map[string]float64{}}
		vals, ratios := map[string][]float64{}, map[string][]float64{}
		for _, s := range h.samples {
			if s.Figure != "txn."+v.id {
				continue
			}
			if row.Command == "" {
				row.Command = s.Command
			}
			if s.Error != "" {
				row.Failures = append(row.Failures, fmt.Sprintf("round %d: %s", s.Round, firstLine(s.Error)))
				continue
			}
			for k, x := range s.Values {
				vals[k] = append(vals[k], x)
				if p, ok := plain[s.Round][k]; ok && p != 0 {
					ratios[k] = append(ratios[k], x/p)
				}
			}
		}
		for k, x := range vals {
			row.Stats[k] = summarize(x)
		}
		for k, x := range ratios {
			row.MedianRatio[k] = median(x)
		}
		r.Rows = append(r.Rows, row)
	}
	if len(r.Rows) > 0 {
		for i := range r.Rows {
			for k, s := range r.Rows[i].Stats {
				if p, ok := r.Rows[0].Stats[k]; ok && p.Median != 0 {
					r.Rows[i].RatioOfMedians[k] = s.Median / p.Median
				}
			}
		}
	}
	goal := func(text, id string, target float64) condition {
		for _, row := range r.Rows {
			if row.ID == id {
				x, ok := row.RatioOfMedians["mb_per_s"]
				c := cond(text, x, ok, target, true)
				if ok {
					c.Margin = fmt.Sprintf("costs %.1f %% of plain's MB/s against a bound of %.0f %%", 100*(1-x), 100*(1-target))
				}
				return c
			}
		}
		return cond(text, 0, false, target, true)
	}
	r.Goals = []condition{
		goal("idempotent: costs under 3 % (MB/s >= 0.97x plain)", "idempotent", 0.97),
		goal("transactions, 100 ms commits: cost under 5 % (MB/s >= 0.95x plain)", "txn_100ms", 0.95),
	}
	return r
}

func (r *txnReport) write(dir string) (string, string, error) {
	return writeReport(dir, r.Date, "txn", r, r.markdown())
}

func (r *txnReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice transactions and idempotence benchmark, %s\n\n", r.Date)
	fmt.Fprintf(&b, "`sluice-bench txn` (`make bench-txn`), %.1f min. Commit %s; %s, %d cores, %s GiB; Linux %s; %s.\n",
		r.Minutes, r.Facts.Commit, r.Facts.CPU, r.Facts.Cores, r.Facts.MemoryGiB, r.Facts.Kernel, r.Facts.Go)
	fmt.Fprintf(&b, "Disk: %s. Load average (1, 5, 15 min) before: %s; after: %s.\n\n", r.Facts.Disk, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(&b, "One `sluice perf produce` per variant and round, %v records of 1 KiB, acks=all, one producer, one partition, RF=1, "+
		"`sluice.fsync.before.ack=false`, a fresh topic per measurement (deleted after it), %v rounds in rotating order, one server for the whole run. "+
		"Medians over rounds; ± is half the min-max spread relative to the median; ratios are to the plain producer "+
		"(ratio of the medians, then the median of the per-round ratios).\n\n", r.Plan["records"], r.Plan["rounds"])
	b.WriteString("| variant | MB/s | ± | records/s | MB/s / plain | per-round ratio | client CPU s/GB | server CPU s/GB | commits/s | commit p50 / p99 ms | EndTxn p50 / p99 ms | load (1 min) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		med := func(k string) string {
			if s, ok := row.Stats[k]; ok {
				return num(s.Median)
			}
			return "-"
		}
		spread := "-"
		if s, ok := row.Stats["mb_per_s"]; ok && s.Median != 0 {
			spread = fmt.Sprintf("±%.0f%%", 50*(s.Max-s.Min)/s.Median)
		}
		rat := func(m map[string]float64) string {
			if x, ok := m["mb_per_s"]; ok {
				return fmt.Sprintf("%.3f", x)
			}
			return "-"
		}
		load := "-"
		if s, ok := row.Stats["load1_before"]; ok {
			load = fmt.Sprintf("%.1f-%.1f", s.Min, s.Max)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s |\n", row.Label, med("mb_per_s"), spread,
			med("records_per_s"), rat(row.RatioOfMedians), rat(row.MedianRatio), med("client_cpu_s_per_gb"), med("server_cpu_s_per_gb"),
			med("commits_per_s"), med("commit_p50_ms"), med("commit_p99_ms"), med("end_txn_p50_ms"), med("end_txn_p99_ms"), load)
	}
	writeGoals(&b, "Goals (Kafka's anchor: about 3 % for transactions committed every 100 ms, 1 KiB records)", r.Goals)
	b.WriteString("\nPer round, MB/s (order rotates):\n\n| round |")
	for _, v := range txnVariants {
		fmt.Fprintf(&b, " %s |", v.id)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(txnVariants)) + "\n")
	rounds, _ := r.Plan["rounds"].(int)
	for rd := 1; rd <= rounds; rd++ {
		fmt.Fprintf(&b, "| %d |", rd)
		for _, v := range txnVariants {
			cell := "-"
			for _, s := range r.Samples {
				if s.Figure == "txn."+v.id && s.Round == rd {
					if s.Error != "" {
						cell = "failed"
					} else {
						cell = num(s.Values["mb_per_s"])
					}
				}
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	writeFailures(&b, r.Rows, func(row txnRow) (string, []string) { return row.ID, row.Failures })
	b.WriteString("\nCommands (round 1; later rounds differ in topic and transactional id):\n\n```\n")
	for _, row := range r.Rows {
		b.WriteString(row.Command + "\n")
	}
	b.WriteString(r.Servers["sluiced"] + "\n```\n")
	return b.String()
}

func (r *txnReport) summaryText() string {
	var b strings.Builder
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-40s %8.1f MB/s  %.3fx plain (per-round %.3fx)\n", row.Label, row.Stats["mb_per_s"].Median,
			row.RatioOfMedians["mb_per_s"], row.MedianRatio["mb_per_s"])
	}
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "%s: met=%v (%.3fx; %s)\n", g.Text, g.Met, g.Value, g.Margin)
	}
	return b.String()
}
