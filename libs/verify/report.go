package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// The report files, in Config.Out.
const (
	SummaryFile  = "summary.txt"
	ResultFile   = "result.json"
	HistoryFile  = "history.json"
	TimelineFile = "timeline.svg"
)

// Verdict is the first line of the summary: "VALID", or "INVALID: N
// anomalies (kinds)".
func (r *Report) Verdict() string {
	v, _, _ := strings.Cut(r.Result.Summary(), "\n")
	return v
}

// writeOps are the operation kinds that write records.
var writeOps = []string{OpProducePlain, OpProduceIdempotent, OpTxn}

// opKind names the kind of a recorded transaction.
func opKind(t check.Txn) string {
	switch {
	case t.TransactionalID != "":
		return OpTxn
	case t.Idempotent:
		return OpProduceIdempotent
	}
	return OpProducePlain
}

func add(c *OpCounts, o check.Outcome) {
	switch o {
	case check.OK:
		c.OK++
	case check.Fail:
		c.Fail++
	default:
		c.Info++
	}
}

// countOps counts a history's operations per kind by outcome. A group
// commit counts once per partition.
func countOps(h check.History) map[string]OpCounts {
	m := map[string]OpCounts{}
	bump := func(kind string, o check.Outcome) {
		c := m[kind]
		add(&c, o)
		m[kind] = c
	}
	for _, t := range h.Txns {
		bump(opKind(t), t.Outcome)
	}
	for _, in := range h.Inits {
		bump(OpInit, in.Outcome)
	}
	for _, p := range h.Polls {
		if !p.Final {
			bump(OpPoll, check.OK)
		}
	}
	for _, c := range h.Commits {
		if c.Kind == check.CommitFetched {
			bump(OpOffsetFetch, c.Outcome)
		} else {
			bump(OpGroupCommit, c.Outcome)
		}
	}
	return m
}

// percentile returns the p-th percentile (0..1) of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func latencyOf(ms []float64) Latency {
	slices.Sort(ms)
	if len(ms) == 0 {
		return Latency{}
	}
	return Latency{Count: len(ms), P50: percentile(ms, 0.5), P90: percentile(ms, 0.9), P99: percentile(ms, 0.99), Max: ms[len(ms)-1]}
}

// latencies sums up the latency of operations that ended OK, per kind.
func latencies(h check.History) map[string]Latency {
	byKind := map[string][]float64{}
	for _, t := range h.Txns {
		if t.Outcome == check.OK && t.Start > 0 && t.End >= t.Start {
			byKind[opKind(t)] = append(byKind[opKind(t)], float64(t.End-t.Start)/1e6)
		}
	}
	for _, in := range h.Inits {
		if in.Outcome == check.OK && in.Start > 0 && in.End >= in.Start {
			byKind[OpInit] = append(byKind[OpInit], float64(in.End-in.Start)/1e6)
		}
	}
	out := map[string]Latency{}
	for k, ms := range byKind {
		out[k] = latencyOf(ms)
	}
	return out
}

// okRecords counts the records of writes that ended OK, within [from, to]
// by their end time (all when to is 0).
func okRecords(h check.History, from, to int64) int {
	n := 0
	for _, t := range h.Txns {
		if t.Outcome == check.OK && (to == 0 || t.End >= from && t.End <= to) {
			n += len(t.Sends)
		}
	}
	return n
}

// span returns the first start and last end of the history's writes (0, 0
// without any).
func span(h check.History) (int64, int64) {
	var first, last int64
	for _, t := range h.Txns {
		if t.Start > 0 && (first == 0 || t.Start < first) {
			first = t.Start
		}
		if t.End > last {
			last = t.End
		}
	}
	return first, last
}

// checkHistory checks a history and builds the report. start and end
// bound the workload; zero takes them from the history.
func checkHistory(h check.History, seed int64, start, end time.Time) (*Report, error) {
	for i := range h.Copies {
		if h.Copies[i].Map == nil {
			// Saved histories lose the function: the workload's copies
			// name their input after a colon.
			h.Copies[i].Map = copyValueInput
		}
	}
	res, err := check.Check(h, check.Options{})
	if err != nil {
		return nil, fmt.Errorf("verify: checking the history: %w", err)
	}
	first, last := span(h)
	if start.IsZero() && first > 0 {
		start = time.Unix(0, first)
	}
	if end.IsZero() && last > 0 {
		end = time.Unix(0, last)
	}
	rep := &Report{Seed: seed, Start: start, End: end, Result: res, Ops: countOps(h), Latency: latencies(h),
		Faults: slices.Clone(h.Faults)}
	if secs := end.Sub(start).Seconds(); secs > 0 {
		rep.Throughput = float64(okRecords(h, start.UnixNano(), end.UnixNano())) / secs
	}
	rep.history = h
	return rep, nil
}

// CheckHistory checks a saved history (what `sluice verify --check-only`
// does) and returns the report; with out set it writes summary.txt,
// result.json and timeline.svg there.
func CheckHistory(h check.History, out string) (*Report, error) {
	rep, err := checkHistory(h, 0, time.Time{}, time.Time{})
	if err != nil {
		return nil, err
	}
	if out != "" {
		if err := rep.writeFiles(out, false); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Summary is the text of summary.txt: the verdict, the counts, then the
// checker's findings with examples.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintln(&b, r.Verdict())
	fmt.Fprintln(&b)
	if r.Seed != 0 {
		fmt.Fprintf(&b, "seed %d\n", r.Seed)
	}
	if !r.Start.IsZero() {
		fmt.Fprintf(&b, "workload %s to %s (%s)\n", r.Start.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339),
			r.End.Sub(r.Start).Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "throughput %.1f records/s acknowledged\n\n", r.Throughput)
	fmt.Fprintf(&b, "%-20s %8s %8s %8s   %9s %9s %9s\n", "operation", "ok", "fail", "info", "p50 ms", "p99 ms", "max ms")
	kinds := make([]string, 0, len(r.Ops))
	for k := range r.Ops {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		c := r.Ops[k]
		fmt.Fprintf(&b, "%-20s %8d %8d %8d", k, c.OK, c.Fail, c.Info)
		if l, ok := r.Latency[k]; ok && l.Count > 0 {
			fmt.Fprintf(&b, "   %9.1f %9.1f %9.1f", l.P50, l.P99, l.Max)
		}
		fmt.Fprintln(&b)
	}
	if len(r.Faults) > 0 {
		fmt.Fprintf(&b, "\nfaults (%d):\n", len(r.Faults))
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "  %s %s %s", offsetString(r.Start, f.Start), f.Kind, f.Target)
			if f.End > 0 {
				fmt.Fprintf(&b, " for %s", time.Duration(f.End-f.Start).Round(time.Millisecond))
			}
			if f.Detail != "" {
				fmt.Fprintf(&b, " (%s)", f.Detail)
			}
			fmt.Fprintln(&b)
		}
	}
	// The checker's counts and examples, after its verdict line.
	_, findings, _ := strings.Cut(r.Result.Summary(), "\n")
	fmt.Fprintf(&b, "\n%s\n", findings)
	return b.String()
}

// offsetString renders a time as seconds after the start of the workload.
func offsetString(start time.Time, t int64) string {
	if start.IsZero() {
		return time.Unix(0, t).UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("+%.1fs", float64(t-start.UnixNano())/1e9)
}

// write writes every report file into dir, the history included.
func (r *Report) write(dir string, h check.History) error {
	r.history = h
	return r.writeFiles(dir, true)
}

func (r *Report) writeFiles(dir string, withHistory bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("verify: report directory: %w", err)
	}
	r.Files = Files{Summary: filepath.Join(dir, SummaryFile), Result: filepath.Join(dir, ResultFile),
		Timeline: filepath.Join(dir, TimelineFile)}
	if withHistory {
		r.Files.History = filepath.Join(dir, HistoryFile)
		if err := writeFile(r.Files.History, func(w io.Writer) error { return r.history.Write(w) }); err != nil {
			return err
		}
	}
	if err := writeFile(r.Files.Summary, func(w io.Writer) error {
		_, err := io.WriteString(w, r.Summary())
		return err
	}); err != nil {
		return err
	}
	if err := writeFile(r.Files.Result, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}); err != nil {
		return err
	}
	return writeFile(r.Files.Timeline, func(w io.Writer) error { return writeTimeline(w, r.history, r.Start) })
}

// writeFile writes a file through fn, atomically (a temporary file renamed
// into place), so a reader never sees half a report.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("verify: writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("verify: writing %s: %w", path, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("verify: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("verify: writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("verify: writing %s: %w", path, err)
	}
	return nil
}
