package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// stat is one value over the rounds.
type stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// figureInfo describes a figure for the report.
type figureInfo struct {
	id, label string
	main      string // the value whose spread stands for the figure's noise
}

var figureCatalog = []figureInfo{
	{"limit.grpc_1stream", "gRPC 1 client stream, 1 MiB raw messages, loopback", "mb_per_s"},
	{"limit.fdatasync_1mib", "write + fdatasync every 1 MiB", "mb_per_s"},
	{"limit.pagecache_read", "page-cache read, 1 MiB reads", "mb_per_s"},
	{"sluice.produce_1k", "Sluice (a) produce 1 KiB, RF=1, acks=1", "mb_per_s"},
	{"sluice.produce_100b", "Sluice (a) produce 100 B, RF=1, acks=1", "records_per_s"},
	{"sluice.produce_1k_fsync", "Sluice (b) produce 1 KiB, RF=1, acks=all, fsync before ack", "mb_per_s"},
	{"sluice.ack_1k_fsync", "Sluice (b) ack latency, acks=all, fsync before ack, 10k x 1 KiB/s, linger 1 ms", "ack_p99_ms"},
	{"sluice.consume_1k", "Sluice (c) catch-up consume 1 KiB, page cache", "mb_per_s"},
	{"sluice.e2e_1k", "Sluice (d) end-to-end at 10k x 1 KiB/s", "lat_p99_ms"},
	{"sluice.rf3_produce_1k", "Sluice (e) 3 storage nodes, RF=3, acks=all, min.insync=2", "mb_per_s"},
	{"defaults.produce_1k_acks1", "Sluice perf defaults + acks=1, no fsync, produce 1 KiB", "mb_per_s"},
	{"defaults.produce_100b_acks1", "Sluice perf defaults + acks=1, no fsync, produce 100 B", "records_per_s"},
	{"defaults.produce_1k", "Sluice perf defaults (acks=all, fsync before ack), produce 1 KiB", "mb_per_s"},
	{"defaults.produce_100b", "Sluice perf defaults (acks=all, fsync before ack), produce 100 B", "records_per_s"},
	{"nats.pub_1k", "JetStream async publish 1 KiB", "mb_per_s"},
	{"nats.pub_100b", "JetStream async publish 100 B", "records_per_s"},
	{"nats.pub_1k_fsync", "JetStream publish 1 KiB, fsync per message", "records_per_s"},
	{"nats.consume_1k", "JetStream ordered consume 1 KiB", "mb_per_s"},
	{"nats.e2e_1k", "JetStream end-to-end at 10k x 1 KiB/s", "lat_p99_ms"},
}

// figureResult is a figure's values over the rounds.
type figureResult struct {
	ID       string          `json:"id"`
	Label    string          `json:"label"`
	Stats    map[string]stat `json:"stats"`
	Command  string          `json:"command"`
	Failures []string        `json:"failures,omitempty"`
}

// ratio is one figure divided by another (medians).
type ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	OK    bool    `json:"ok"`
}

// condition is one part of a goal: value compared with target.
type condition struct {
	Text   string  `json:"text"`
	Value  float64 `json:"value"`
	Target float64 `json:"target"`
	// AtLeast: the goal is value >= target; else value <= target.
	AtLeast bool   `json:"at_least"`
	Known   bool   `json:"known"`
	Met     bool   `json:"met"`
	Margin  string `json:"margin"`
}

type goal struct {
	ID         string      `json:"id"`
	Text       string      `json:"text"`
	Conditions []condition `json:"conditions"`
	Met        bool        `json:"met"`
}

type report struct {
	Date      string            `json:"date"`
	Minutes   float64           `json:"duration_min"`
	Facts     facts             `json:"machine"`
	Plan      map[string]any    `json:"plan"`
	Servers   map[string]string `json:"servers"`
	Figures   []figureResult    `json:"figures"`
	Ratios    []ratio           `json:"ratios"`
	Goals     []goal            `json:"goals"`
	IdleWaitS float64           `json:"idle_wait_total_s"`
	BusyMax   float64           `json:"cpu_busy_before_max_pct"`
	Samples   []sample          `json:"samples"`
	Sustained []sustainedRun    `json:"sustained,omitempty"`
	byID      map[string]*figureResult
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func summarize(v []float64) stat {
	return stat{Median: median(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v)}
}

// aggregate turns samples into per-figure statistics, in catalog order.
func aggregate(samples []sample) []figureResult {
	var out []figureResult
	for _, fi := range figureCatalog {
		fr := figureResult{ID: fi.id, Label: fi.label, Stats: map[string]stat{}}
		vals := map[string][]float64{}
		seen := false
		for _, s := range samples {
			if s.Figure != fi.id {
				continue
			}
			seen = true
			if fr.Command == "" {
				fr.Command = s.Command
			}
			if s.Error != "" {
				fr.Failures = append(fr.Failures, fmt.Sprintf("round %d: %s", s.Round, firstLine(s.Error)))
				continue
			}
			for k, v := range s.Values {
				vals[k] = append(vals[k], v)
			}
		}
		if !seen {
			continue
		}
		for k, v := range vals {
			fr.Stats[k] = summarize(v)
		}
		out = append(out, fr)
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// med returns a figure's median value, if it was measured.
func (r *report) med(id, key string) (float64, bool) {
	f, ok := r.byID[id]
	if !ok {
		return 0, false
	}
	s, ok := f.Stats[key]
	if !ok || s.N == 0 {
		return 0, false
	}
	return s.Median, true
}

func (r *report) ratio(name, numID, numKey, denID, denKey string) ratio {
	n, ok1 := r.med(numID, numKey)
	d, ok2 := r.med(denID, denKey)
	if !ok1 || !ok2 || d == 0 {
		return ratio{Name: name}
	}
	return ratio{Name: name, Value: n / d, OK: true}
}

// cond builds a goal condition from a ratio or value.
func cond(text string, v float64, known bool, target float64, atLeast bool) condition {
	c := condition{Text: text, Value: v, Target: target, AtLeast: atLeast, Known: known}
	if !known {
		c.Margin = "not measured"
		return c
	}
	if atLeast {
		c.Met = v >= target
		if c.Met {
			c.Margin = fmt.Sprintf("met, %.2fx the target", v/target)
		} else {
			c.Margin = fmt.Sprintf("missed by %.0f%% (needs %.2fx)", 100*(1-v/target), target/v)
		}
	} else {
		c.Met = v <= target
		if c.Met {
			c.Margin = fmt.Sprintf("met, %.0f%% of the bound", 100*v/target)
		} else {
			c.Margin = fmt.Sprintf("missed: %.2fx the bound", v/target)
		}
	}
	return c
}

func buildReport(h *harness, d time.Duration) *report {
	c := h.cfg
	r := &report{
		Date: time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), Minutes: math.Round(d.Minutes()*10) / 10,
		Facts: h.facts, Servers: h.servers, Samples: h.samples, byID: map[string]*figureResult{},
		Plan: map[string]any{
			"rounds": c.rounds, "records_1k": c.records1K, "records_100b": c.records100, "records_fsync_peer": c.recordsFsyncPeer,
			"records_rf3": c.recordsRF3, "e2e_records": c.e2eRecords, "e2e_rate": c.e2eRate, "batch_size": c.batchSize,
			"partitions": c.partitions, "idle_threshold_pct": c.idleThreshold,
			"page_cache_dropped": h.cacheNotDropped == "", "page_cache_not_dropped_because": h.cacheNotDropped,
			"records_defaults_1k": c.recordsDefaults1K, "records_defaults_100b": c.recordsDefaults100,
			"sustained_gib_asked": c.sustainedGiB, "sustained_gib": h.sustainedGiB, "sustained_note": h.sustainedNote,
			"blocks": blocksRun(c),
		},
		Sustained: h.sustained,
	}
	r.Figures = aggregate(h.samples)
	for i := range r.Figures {
		r.byID[r.Figures[i].ID] = &r.Figures[i]
	}
	for _, s := range h.samples {
		r.IdleWaitS += s.IdleWaitS
		r.BusyMax = max(r.BusyMax, s.BusyBefore)
	}
	r.computeRatiosAndGoals()
	return r
}

func (r *report) computeRatiosAndGoals() {
	g := "limit.grpc_1stream"
	fd := "limit.fdatasync_1mib"
	r.Ratios = []ratio{
		r.ratio("(a) 1 KiB MB/s / gRPC 1-stream ceiling", "sluice.produce_1k", "mb_per_s", g, "mb_per_s"),
		r.ratio("(a) 1 KiB MB/s / JetStream async publish 1 KiB", "sluice.produce_1k", "mb_per_s", "nats.pub_1k", "mb_per_s"),
		r.ratio("(a) 100 B records/s / JetStream async publish 100 B", "sluice.produce_100b", "records_per_s", "nats.pub_100b", "records_per_s"),
		r.ratio("(b) fsync MB/s / fdatasync every 1 MiB", "sluice.produce_1k_fsync", "mb_per_s", fd, "mb_per_s"),
		r.ratio("(b) fsync records/s / JetStream fsync per message", "sluice.produce_1k_fsync", "records_per_s", "nats.pub_1k_fsync", "records_per_s"),
		r.ratio("(b) ack p99 at 10k/s / fdatasync p99", "sluice.ack_1k_fsync", "ack_p99_ms", fd, "sync_p99_ms"),
		r.ratio("(c) consume MB/s / gRPC 1-stream ceiling", "sluice.consume_1k", "mb_per_s", g, "mb_per_s"),
		r.ratio("(c) consume MB/s / page-cache read", "sluice.consume_1k", "mb_per_s", "limit.pagecache_read", "mb_per_s"),
		r.ratio("(c) consume MB/s / JetStream ordered consume", "sluice.consume_1k", "mb_per_s", "nats.consume_1k", "mb_per_s"),
		r.ratio("(d) e2e p50 / JetStream e2e p50", "sluice.e2e_1k", "lat_p50_ms", "nats.e2e_1k", "lat_p50_ms"),
		r.ratio("(d) e2e p99 / JetStream e2e p99", "sluice.e2e_1k", "lat_p99_ms", "nats.e2e_1k", "lat_p99_ms"),
		r.ratio("(d) e2e p99.9 / JetStream e2e p99.9", "sluice.e2e_1k", "lat_p999_ms", "nats.e2e_1k", "lat_p999_ms"),
		r.ratio("(e) RF=3 acks=all MB/s / RF=1 acks=1 MB/s", "sluice.rf3_produce_1k", "mb_per_s", "sluice.produce_1k", "mb_per_s"),
		r.ratio("broker MB per CPU second, Sluice (a) / JetStream", "sluice.produce_1k", "mb_per_server_cpu_s", "nats.pub_1k", "mb_per_server_cpu_s"),
		r.ratio("defaults + acks=1 1 KiB MB/s / tuned (a)", "defaults.produce_1k_acks1", "mb_per_s", "sluice.produce_1k", "mb_per_s"),
		r.ratio("defaults + acks=1 100 B records/s / tuned (a)", "defaults.produce_100b_acks1", "records_per_s", "sluice.produce_100b", "records_per_s"),
		r.ratio("defaults 1 KiB MB/s / tuned fsync (b)", "defaults.produce_1k", "mb_per_s", "sluice.produce_1k_fsync", "mb_per_s"),
	}
	sus := len(r.Ratios)
	for _, run := range r.Sustained {
		x, ok := lastOverFirst(run.Slices)
		r.Ratios = append(r.Ratios, ratio{Name: run.ID + " last GiB MB/s / first GiB", Value: x, OK: ok})
	}
	rt := func(i int) (float64, bool) { return r.Ratios[i].Value, r.Ratios[i].OK }
	p999, okP999 := r.med("sluice.e2e_1k", "lat_p999_ms")
	perCore, okCore := r.med("sluice.produce_1k", "mb_per_server_cpu_s")
	mk := func(id, text string, cs ...condition) goal {
		gl := goal{ID: id, Text: text, Conditions: cs, Met: true}
		for _, c := range cs {
			gl.Met = gl.Met && c.Known && c.Met
		}
		return gl
	}
	v := func(i int, text string, target float64, atLeast bool) condition {
		x, ok := rt(i)
		return cond(text, x, ok, target, atLeast)
	}
	r.Goals = []goal{
		mk("G1", "produce acks=1, 1 KiB",
			v(0, ">= 50% of the gRPC 1-stream ceiling", 0.5, true),
			v(1, ">= 5x JetStream 1 KiB async publish MB/s", 5, true)),
		mk("G2", "produce with fsync before ack (group commit)",
			v(3, ">= 65% of fdatasync-every-1-MiB MB/s", 0.65, true),
			v(4, ">= 50x JetStream fsync-per-message records/s", 50, true),
			v(5, "ack p99 <= 2x the fdatasync p99", 2, false)),
		mk("G3", "100 B records", v(2, ">= 10x JetStream 100 B records/s", 10, true)),
		mk("G4", "catch-up consume",
			v(6, ">= 90% of the gRPC 1-stream ceiling", 0.9, true),
			v(8, ">= 5x JetStream ordered consume MB/s", 5, true)),
		mk("G5", "end-to-end latency at 10k x 1 KiB/s",
			v(9, "p50 <= JetStream p50", 1, false),
			v(10, "p99 <= JetStream p99", 1, false),
			cond("p99.9 <= 5 ms", p999, okP999, 5, false)),
		mk("G6", "broker CPU", cond(">= 300 MB/s produced per busy core", perCore, okCore, 300, true)),
		mk("RF3", "3 nodes, RF=3, acks=all", v(12, ">= 40% of the RF=1 figure", 0.4, true)),
		mk("DEF", "sluice perf defaults reach >= 80% of the best tuned figure",
			v(14, "1 KiB, acks=1, no fsync: >= 80% of tuned (a)", 0.8, true),
			v(15, "100 B, acks=1, no fsync: >= 80% of tuned (a)", 0.8, true),
			v(16, "1 KiB, acks=all, fsync before ack: >= 80% of tuned (b)", 0.8, true)),
	}
	if len(r.Sustained) == 0 && r.Plan["sustained_note"] == "" {
		return // not part of this run
	}
	var cs []condition
	for _, want := range sustainedVariants {
		c := cond(want.label+": last GiB >= 90% of the first", 0, false, 0.9, true)
		for j, got := range r.Sustained {
			if got.ID == want.id {
				c = v(sus+j, c.Text, 0.9, true)
			}
		}
		cs = append(cs, c)
	}
	r.Goals = append(r.Goals, mk("SUS", "sustained produce, 1 KiB, one topic", cs...))
}

// blocksRun lists the blocks a run includes.
func blocksRun(c config) []string {
	var out []string
	for _, b := range blockNames {
		if c.runs(b) && (b != "sustained" || c.sustainedGiB > 0) {
			out = append(out, b)
		}
	}
	return out
}

// write stores <date>.md and <date>.json in dir.
func (r *report) write(dir string) (string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	stamp := strings.NewReplacer(" ", "-", ":", "").Replace(strings.TrimSuffix(r.Date, " UTC")) + "Z"
	md := filepath.Join(dir, stamp+".md")
	js := filepath.Join(dir, stamp+".json")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(md, []byte(r.markdown()), 0o644); err != nil {
		return "", "", err
	}
	return md, js, nil
}

// num formats a figure with about three significant digits.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func (r *report) cell(id, key string) string {
	if v, ok := r.med(id, key); ok {
		return num(v)
	}
	return "-"
}

func (r *report) spread(id string) string {
	f, ok := r.byID[id]
	if !ok {
		return "-"
	}
	var main string
	for _, fi := range figureCatalog {
		if fi.id == id {
			main = fi.main
		}
	}
	s, ok := f.Stats[main]
	if !ok || s.Median == 0 {
		return "-"
	}
	return fmt.Sprintf("±%.0f%%", 50*(s.Max-s.Min)/s.Median)
}

func ratioCell(x ratio) string {
	if !x.OK {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x.Value)
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	f := r.Facts
	w("# Sluice benchmark, %s\n\n", r.Date)
	w("Medians of %v interleaved rounds (the order of the blocks rotates each round); ", r.Plan["rounds"])
	w("±x%% is half the min-max range over the rounds, relative to the median. MB = 10^6 bytes of record values. ")
	w("Whole run: %.1f min.\n\n", r.Minutes)
	w("Machine: %s, %d cores, %s GiB; kernel %s; %s; disk %s. ", f.CPU, f.Cores, f.MemoryGiB, f.Kernel, f.Go, f.Disk)
	w("grpc-go %s, nats-server %s, nats.go %s. Commit %s.\n\n", f.GRPC, f.NATSServer, f.NATSClient, f.Commit)
	if r.Plan["page_cache_dropped"] == true {
		blocks, _ := r.Plan["blocks"].([]string)
		w("Each block (%s) starts with the page cache dropped (sync, drop_caches=1). ", strings.Join(blocks, ", "))
	} else {
		w("The page cache could not be dropped between blocks (%v). ", r.Plan["page_cache_not_dropped_because"])
	}
	w("Before each measurement the run calls sync(2), so no dirty pages from an earlier one are written back during it, then waits for CPU busy <= %v%% (1 s sample); %.0f s waited in all; ", r.Plan["idle_threshold_pct"], r.IdleWaitS)
	w("busiest start %.0f%% (per-sample values in the JSON).\n\n", r.BusyMax)

	w("## Goals\n\n| goal | condition | measured | result |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		for i, c := range g.Conditions {
			id := ""
			if i == 0 {
				state := "**missed**"
				if g.Met {
					state = "**met**"
				}
				id = fmt.Sprintf("%s %s: %s", g.ID, state, g.Text)
			}
			val := "-"
			if c.Known {
				val = num(c.Value)
			}
			w("| %s | %s | %s | %s |\n", id, c.Text, val, c.Margin)
		}
	}

	R := func(i int) string { return ratioCell(r.Ratios[i]) }
	w("\n## Results\n\n")
	w("| measurement | Sluice | ± | JetStream | Sluice / JetStream | limit | Sluice / limit |\n|---|---|---|---|---|---|---|\n")
	w("| (a) produce 1 KiB, acks=1, MB/s | %s | %s | %s | %s | gRPC %s | %s |\n", r.cell("sluice.produce_1k", "mb_per_s"), r.spread("sluice.produce_1k"),
		r.cell("nats.pub_1k", "mb_per_s"), R(1), r.cell("limit.grpc_1stream", "mb_per_s"), R(0))
	w("| (a) produce 1 KiB, acks=1, records/s | %s | | %s | | | |\n", r.cell("sluice.produce_1k", "records_per_s"), r.cell("nats.pub_1k", "records_per_s"))
	w("| (a) produce 100 B, acks=1, records/s | %s | %s | %s | %s | | |\n", r.cell("sluice.produce_100b", "records_per_s"), r.spread("sluice.produce_100b"),
		r.cell("nats.pub_100b", "records_per_s"), R(2))
	w("| (b) produce 1 KiB, acks=all, fsync before ack, MB/s | %s | %s | %s | | fdatasync/1 MiB %s | %s |\n", r.cell("sluice.produce_1k_fsync", "mb_per_s"),
		r.spread("sluice.produce_1k_fsync"), r.cell("nats.pub_1k_fsync", "mb_per_s"), r.cell("limit.fdatasync_1mib", "mb_per_s"), R(3))
	w("| (b) produce 1 KiB, fsync before ack, records/s | %s | | %s | %s | | |\n", r.cell("sluice.produce_1k_fsync", "records_per_s"),
		r.cell("nats.pub_1k_fsync", "records_per_s"), R(4))
	w("| (b) ack latency p50 / p99 ms, fsync, 10k x 1 KiB/s, linger 1 ms | %s / %s | %s | | | fdatasync p50 / p99 %s / %s | %s (p99) |\n",
		r.cell("sluice.ack_1k_fsync", "ack_p50_ms"), r.cell("sluice.ack_1k_fsync", "ack_p99_ms"), r.spread("sluice.ack_1k_fsync"),
		r.cell("limit.fdatasync_1mib", "sync_p50_ms"), r.cell("limit.fdatasync_1mib", "sync_p99_ms"), R(5))
	w("| (c) catch-up consume 1 KiB, MB/s | %s | %s | %s | %s | gRPC %s / page cache %s | %s / %s |\n", r.cell("sluice.consume_1k", "mb_per_s"),
		r.spread("sluice.consume_1k"), r.cell("nats.consume_1k", "mb_per_s"), R(8), r.cell("limit.grpc_1stream", "mb_per_s"),
		r.cell("limit.pagecache_read", "mb_per_s"), R(6), R(7))
	w("| (d) end-to-end p50 / p99 / p99.9 ms, 10k x 1 KiB/s | %s / %s / %s | %s | %s / %s / %s | %s / %s / %s | | |\n",
		r.cell("sluice.e2e_1k", "lat_p50_ms"), r.cell("sluice.e2e_1k", "lat_p99_ms"), r.cell("sluice.e2e_1k", "lat_p999_ms"), r.spread("sluice.e2e_1k"),
		r.cell("nats.e2e_1k", "lat_p50_ms"), r.cell("nats.e2e_1k", "lat_p99_ms"), r.cell("nats.e2e_1k", "lat_p999_ms"), R(9), R(10), R(11))
	w("| (e) RF=3, acks=all, min.insync=2, 1 KiB, MB/s | %s | %s | | | RF=1 (a) %s | %s |\n", r.cell("sluice.rf3_produce_1k", "mb_per_s"),
		r.spread("sluice.rf3_produce_1k"), r.cell("sluice.produce_1k", "mb_per_s"), R(12))
	w("| broker CPU s per GB produced, 1 KiB acks=1 | %s | | %s | | | |\n", r.cell("sluice.produce_1k", "server_cpu_s_per_gb"), r.cell("nats.pub_1k", "server_cpu_s_per_gb"))
	w("| MB/s produced per busy broker core | %s | | %s | %s | | |\n", r.cell("sluice.produce_1k", "mb_per_server_cpu_s"), r.cell("nats.pub_1k", "mb_per_server_cpu_s"), R(13))
	w("| broker CPU s per GB: fsync (b) / RF=3 (e, 4 processes) | %s / %s | | fsync %s | | | |\n", r.cell("sluice.produce_1k_fsync", "server_cpu_s_per_gb"),
		r.cell("sluice.rf3_produce_1k", "server_cpu_s_per_gb"), r.cell("nats.pub_1k_fsync", "server_cpu_s_per_gb"))
	b.WriteString(r.defaultsMarkdown())
	if len(r.Sustained) > 0 || r.Plan["sustained_note"] != "" {
		gib, _ := r.Plan["sustained_gib"].(int)
		note, _ := r.Plan["sustained_note"].(string)
		b.WriteString(sustainedMarkdown(r.Sustained, gib, note))
	}

	w("\n## Every figure\n\n| figure | records/s | MB/s | latency p50 / p99 / p99.9 ms | server CPU s/GB | client CPU s | ± | rounds |\n|---|---|---|---|---|---|---|---|\n")
	for _, fr := range r.Figures {
		lat := "-"
		if _, ok := fr.Stats["lat_p50_ms"]; ok {
			lat = fmt.Sprintf("%s / %s / %s", r.cell(fr.ID, "lat_p50_ms"), r.cell(fr.ID, "lat_p99_ms"), r.cell(fr.ID, "lat_p999_ms"))
		} else if _, ok := fr.Stats["sync_p50_ms"]; ok {
			lat = fmt.Sprintf("fdatasync %s / %s / -", r.cell(fr.ID, "sync_p50_ms"), r.cell(fr.ID, "sync_p99_ms"))
		}
		if _, ok := fr.Stats["ack_p50_ms"]; ok && fr.ID == "sluice.ack_1k_fsync" {
			lat = fmt.Sprintf("ack %s / %s / %s", r.cell(fr.ID, "ack_p50_ms"), r.cell(fr.ID, "ack_p99_ms"), r.cell(fr.ID, "ack_p999_ms"))
		}
		n := 0
		for _, s := range fr.Stats {
			n = max(n, s.N)
		}
		rounds := fmt.Sprint(n)
		if len(fr.Failures) > 0 {
			rounds += fmt.Sprintf(" (%d failed)", len(fr.Failures))
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", fr.Label, r.cell(fr.ID, "records_per_s"), r.cell(fr.ID, "mb_per_s"), lat,
			r.cell(fr.ID, "server_cpu_s_per_gb"), r.cell(fr.ID, "client_cpu_s"), r.spread(fr.ID), rounds)
	}
	var failures []string
	for _, fr := range r.Figures {
		for _, f := range fr.Failures {
			failures = append(failures, fmt.Sprintf("- %s, %s", fr.ID, f))
		}
	}
	if len(failures) > 0 {
		w("\nFailures:\n\n%s\n", strings.Join(failures, "\n"))
	}

	w("\n## Commands\n\nServers (the last round's; $TMP is the run's temporary directory, removed at the end; ports are picked free each round):\n\n```\n")
	keys := make([]string, 0, len(r.Servers))
	for k := range r.Servers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("# %s\n%s\n", k, r.Servers[k])
	}
	w("```\n\nMeasurements (round 1's; each prints one JSON object):\n\n```\n")
	for _, fr := range r.Figures {
		w("# %s\n%s\n", fr.ID, fr.Command)
	}
	w("```\n\nPer round (the figure's main value; \"busy\" marks a measurement that started while other work kept the CPUs busier than the idle threshold):\n\n| figure | value |")
	rounds, _ := r.Plan["rounds"].(int)
	for i := 1; i <= rounds; i++ {
		w(" round %d |", i)
	}
	w("\n|---|---|")
	for i := 1; i <= rounds; i++ {
		w("---|")
	}
	w("\n")
	for _, fi := range figureCatalog {
		if _, ok := r.byID[fi.id]; !ok {
			continue
		}
		w("| %s | %s |", fi.id, fi.main)
		for i := 1; i <= rounds; i++ {
			cell := "-"
			for _, s := range r.Samples {
				if s.Figure == fi.id && s.Round == i && s.Error == "" {
					cell = num(s.Values[fi.main])
					if th, ok := r.Plan["idle_threshold_pct"].(float64); ok && s.BusyBefore > th {
						cell += fmt.Sprintf(" (busy %.0f%%)", s.BusyBefore)
					}
				}
			}
			w(" %s |", cell)
		}
		w("\n")
	}
	return b.String()
}

// defaultsMarkdown sets each figure of `sluice perf produce` without
// tuning flags beside the tuned figure of the same durability.
func (r *report) defaultsMarkdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("\n## Defaults against tuned\n\n")
	w("Defaults: `sluice perf produce` with no tuning flags (acks=all, idempotent, 64 KiB batches growing to 1 MiB under load, linger 5 ms, ")
	batch, _ := r.Plan["batch_size"].(int)
	w("the topic's default sluice.fsync.before.ack=true), on a sluiced of its own, %v x 1 KiB and %v x 100 B per run; ", r.Plan["records_defaults_1k"], r.Plan["records_defaults_100b"])
	w("tuned: the Sluice block's figures (%d KiB batches).\n\n", batch>>10)
	w("| measurement | defaults | ± | tuned | defaults / tuned | server CPU s/GB, defaults / tuned |\n|---|---|---|---|---|---|\n")
	row := func(label, def, tuned, key string, ri int) {
		rc := "-"
		if ri >= 0 {
			rc = ratioCell(r.Ratios[ri])
		}
		tc, tcpu := "-", "-"
		if tuned != "" {
			tc, tcpu = r.cell(tuned, key), r.cell(tuned, "server_cpu_s_per_gb")
		}
		w("| %s | %s | %s | %s | %s | %s / %s |\n", label, r.cell(def, key), r.spread(def), tc, rc, r.cell(def, "server_cpu_s_per_gb"), tcpu)
	}
	row("1 KiB, acks=1, no fsync, MB/s", "defaults.produce_1k_acks1", "sluice.produce_1k", "mb_per_s", 14)
	row("100 B, acks=1, no fsync, records/s", "defaults.produce_100b_acks1", "sluice.produce_100b", "records_per_s", 15)
	row("1 KiB, acks=all, fsync before ack, MB/s", "defaults.produce_1k", "sluice.produce_1k_fsync", "mb_per_s", 16)
	row("100 B, acks=all, fsync before ack, records/s (no tuned figure)", "defaults.produce_100b", "", "records_per_s", -1)
	return b.String()
}

// goalsText is the short summary printed at the end of a run.
func (r *report) goalsText() string {
	var b strings.Builder
	for _, g := range r.Goals {
		state := "MISSED"
		if g.Met {
			state = "met"
		}
		fmt.Fprintf(&b, "%-4s %-7s %s:", g.ID, state, g.Text)
		for _, c := range g.Conditions {
			val := "-"
			if c.Known {
				val = num(c.Value)
			}
			fmt.Fprintf(&b, " [%s: %s, %s]", c.Text, val, c.Margin)
		}
		b.WriteString("\n")
	}
	return b.String()
}
