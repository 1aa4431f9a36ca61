package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// A summary gathers the goals of the reports one `make bench` wrote (run,
// txn, kafka, security) into one table, so nobody has to open four reports
// to see what was met, and links the micro-benchmark comparison with the
// previous commit (`sluice-bench compare`) if there is one.

// reportName matches the names writeReport and report.write give:
// <yyyy-mm-dd-hhmmss>Z[-<kind>].json, and the comparison's -benchstat.txt.
var reportName = regexp.MustCompile(`^(\d{4}-\d\d-\d\d-\d{6})Z(?:-([a-z0-9]+))?\.(json|txt)$`)

// summaryKinds are the reports whose goals the summary shows, in its order.
// connections has no goals; the consumer-group benchmarks write no report
// (make bench-groups prints them) and are not part of make bench.
var summaryKinds = []string{"run", "txn", "kafka", "security"}

// summaryRow is one condition of one goal.
type summaryRow struct {
	Kind, Report string // Report: the .md the row comes from, relative to the summary
	Goal         string
	Cond         condition
}

func summaryMain(args []string) error {
	fs := flag.NewFlagSet("summary", flag.ExitOnError)
	out := fs.String("out", "bench/results", "directory of the reports; <date>-summary.md is written there")
	since := fs.String("since", "", "take every report in --out written at or after this UTC time (RFC 3339, or the reports' own yyyy-mm-dd-hhmmssZ); else the report paths given as arguments")
	_ = fs.Parse(args) // ExitOnError
	paths := fs.Args()
	if *since != "" {
		t, err := parseSince(*since)
		if err != nil {
			return err
		}
		found, err := reportsSince(*out, t)
		if err != nil {
			return err
		}
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		return fmt.Errorf("no reports: give --since or report paths")
	}
	now := time.Now().UTC()
	md, err := buildSummary(*out, paths, now)
	if err != nil {
		return err
	}
	name := filepath.Join(*out, now.Format("2006-01-02-150405")+"Z-summary.md")
	if err := os.WriteFile(name, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("summary: %s\n", name)
	return nil
}

func parseSince(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02-150405Z"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want RFC 3339 (2006-01-02T15:04:05Z) or 2006-01-02-150405Z", s)
}

// reportsSince lists the JSON reports and benchstat files in dir whose
// names date them at or after t. The name, not the modification time,
// counts: a report is named after the time it was written, and a copied or
// checked-out file keeps its name.
func reportsSince(dir string, t time.Time) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range entries {
		m := reportName.FindStringSubmatch(e.Name())
		if m == nil || (m[3] == "txt") != (m[2] == "benchstat") {
			continue
		}
		at, err := time.Parse("2006-01-02-150405", m[1])
		if err != nil || at.Before(t.Truncate(time.Second)) {
			continue
		}
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	return paths, nil
}

// reportKind says which benchmark wrote a report, from its name.
func reportKind(path string) string {
	m := reportName.FindStringSubmatch(filepath.Base(path))
	switch {
	case m == nil:
		return ""
	case m[2] == "":
		return "run"
	default:
		return m[2]
	}
}

// buildSummary reads the reports (JSON, and a -benchstat.txt) and returns
// the summary's markdown; links are relative to dir, where it is written.
func buildSummary(dir string, paths []string, now time.Time) (string, error) {
	sort.Strings(paths) // by date: names start with it
	var rows []summaryRow
	var benchstat []string
	seen := map[string]string{}
	for _, p := range paths {
		kind := reportKind(p)
		if kind == "benchstat" {
			benchstat = append(benchstat, p)
			continue
		}
		if !slices.Contains(summaryKinds, kind) {
			continue
		}
		if prev, ok := seen[kind]; ok {
			return "", fmt.Errorf("two %s reports (%s and %s): give one invocation's reports", kind, prev, p)
		}
		seen[kind] = p
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		rs, err := goalRows(kind, b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		link := relLink(dir, strings.TrimSuffix(p, ".json")+".md")
		for i := range rs {
			rs[i].Kind, rs[i].Report = kind, link
		}
		rows = append(rows, rs...)
	}
	if len(seen) == 0 && len(benchstat) == 0 {
		return "", fmt.Errorf("none of %v is a run, txn, kafka, security or benchstat report", paths)
	}

	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Sluice benchmark summary, %s\n\n", now.Format("2006-01-02 15:04:05 UTC"))
	met := 0
	for _, r := range rows {
		if r.Cond.Known && r.Cond.Met {
			met++
		}
	}
	w("%d of %d goal conditions met. Every goal of the reports of one `make bench`; each row links the report with the figures, the commands and the spread over rounds.\n\n", met, len(rows))
	var missing []string
	for _, k := range summaryKinds {
		if _, ok := seen[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		w("No %s report among these (the benchmark failed, was interrupted or was not run).\n\n", strings.Join(missing, ", "))
	}
	if len(rows) > 0 {
		w("| benchmark | goal | condition | measured | result | report |\n|---|---|---|---|---|---|\n")
		for _, r := range rows {
			val, res := "-", "not measured"
			if r.Cond.Known {
				val = num(r.Cond.Value)
				res = "missed"
				if r.Cond.Met {
					res = "**met**"
				}
				// cond's margins repeat the verdict; keep the rest.
				m := r.Cond.Margin
				for _, p := range []string{"met, ", "missed: ", "missed "} {
					m = strings.TrimPrefix(m, p)
				}
				res += ", " + m
			}
			w("| %s | %s | %s | %s | %s | [%s](%s) |\n", r.Kind, r.Goal, r.Cond.Text, val, res, filepath.Base(r.Report), r.Report)
		}
	}
	for _, p := range benchstat {
		w("\n## Micro-benchmarks against the previous commit\n\n[%s](%s) (`make bench-compare`: benchstat of `go test -bench` at the base and at this tree, runs alternated).", filepath.Base(p), relLink(dir, p))
		changed, err := benchstatChanges(p)
		if err != nil {
			return "", err
		}
		if len(changed) == 0 {
			w(" No significant change (p < 0.05).\n")
			continue
		}
		w(" Significant changes (p < 0.05):\n\n```\n%s\n```\n", strings.Join(changed, "\n"))
	}
	return b.String(), nil
}

// goalRows returns a report's goals, one row per condition. Every
// sub-benchmark writes its goals into its JSON; the summary only gathers
// them.
func goalRows(kind string, b []byte) ([]summaryRow, error) {
	if kind == "run" {
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if len(r.Goals) == 0 {
			return nil, errNoGoals
		}
		var rows []summaryRow
		for _, g := range r.Goals {
			for _, c := range g.Conditions {
				rows = append(rows, summaryRow{Goal: g.ID + " " + g.Text, Cond: c})
			}
		}
		return rows, nil
	}
	var side struct {
		Goals []condition `json:"goals"`
	}
	if err := json.Unmarshal(b, &side); err != nil {
		return nil, err
	}
	if len(side.Goals) == 0 {
		return nil, errNoGoals
	}
	rows := make([]summaryRow, 0, len(side.Goals))
	for _, c := range side.Goals {
		// Side reports name the goal and its condition in one text,
		// "<what>: <condition>".
		what, text, ok := strings.Cut(c.Text, ": ")
		if !ok {
			what, text = kind, c.Text
		}
		c.Text = text
		rows = append(rows, summaryRow{Goal: what, Cond: c})
	}
	return rows, nil
}

var errNoGoals = errors.New("the report's JSON has no goals (written by an older sluice-bench?)")

// benchstatChanges returns the lines of a benchstat table whose change is
// significant: benchstat prints "~" for the others, and geomean lines carry
// no p-value.
func benchstatChanges(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	unit, pkg := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/sluice-io/sluice/")
		}
		if strings.Contains(line, "vs base") {
			// "│ sec/op │ sec/op vs base │": the unit of the rows below.
			if f := strings.Fields(strings.ReplaceAll(line, "│", " ")); len(f) > 0 {
				unit = f[0]
			}
		}
		i := strings.Index(line, "(p=")
		if i < 0 || strings.HasSuffix(strings.TrimSpace(line[:i]), "~") {
			continue
		}
		out = append(out, pkg+" "+unit+": "+strings.TrimSpace(line))
	}
	return out, nil
}

func relLink(dir, path string) string {
	if rel, err := filepath.Rel(dir, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}
