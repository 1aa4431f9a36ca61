package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Small reports as the sub-benchmarks write them, each carrying its goals.
var summaryFixtures = map[string]string{
	// Before the invocation: must not be picked up.
	"2026-12-02-070000Z-kafka.json": `{"goals": [{"text": "produce: Kafka at >= 90 % of the native MB/s", "value": 0.5, "target": 0.9, "at_least": true, "known": true, "met": false, "margin": "old"}]}`,
	"2026-12-02-080102Z.json": `{"date": "2026-12-02 08:01:02 UTC", "goals": [
		{"id": "G1", "text": "produce acks=1, 1 KiB", "met": false, "conditions": [
			{"text": ">= 50% of the gRPC 1-stream ceiling", "value": 0.61, "target": 0.5, "at_least": true, "known": true, "met": true, "margin": "met, 1.22x the target"},
			{"text": ">= 5x JetStream 1 KiB async publish MB/s", "value": 4.2, "target": 5, "at_least": true, "known": true, "met": false, "margin": "missed by 16% (needs 1.19x)"}]},
		{"id": "G6", "text": "broker CPU", "met": false, "conditions": [
			{"text": ">= 300 MB/s produced per busy core", "target": 300, "at_least": true, "known": false, "margin": "not measured"}]}]}`,
	"2026-12-02-081500Z-txn.json": `{"goals": [
		{"text": "idempotent: costs under 3 % (MB/s >= 0.97x plain)", "value": 0.98, "target": 0.97, "at_least": true, "known": true, "met": true, "margin": "met, costs 2.0 % of plain's MB/s against a bound of 3 %"},
		{"text": "transactions, 100 ms commits: cost under 5 % (MB/s >= 0.95x plain)", "value": 0.9, "target": 0.95, "at_least": true, "known": true, "met": false, "margin": "missed, costs 10.0 %"}]}`,
	"2026-12-02-082000Z-kafka.json": `{"goals": [
		{"text": "produce: Kafka at >= 90 % of the native MB/s", "value": 1.1, "target": 0.9, "at_least": true, "known": true, "met": true, "margin": "met, 1.22x the target"},
		{"text": "consume: Kafka at >= 90 % of the native MB/s", "value": 0.8, "target": 0.9, "at_least": true, "known": true, "met": false, "margin": "missed by 11% (needs 1.12x)"}]}`,
	"2026-12-02-082500Z-security.json": `{"goals": [{"text": "grpc_produce: TLS with ACLs at >= 85 % of the plaintext MB/s", "value": 0.87, "target": 0.85, "at_least": true, "known": true, "met": true, "margin": "met, 1.02x the target"}]}`,
	// Not a goal report: left out of the table.
	"2026-12-02-082600Z-connections.json": `{"date": "2026-12-02 08:26:00 UTC"}`,
	"2026-12-02-083000Z-benchstat.txt": `# sluice-bench compare
goos: linux
pkg: github.com/sluice-io/sluice/libs/storage
         │    base     │                 new                 │
         │   sec/op    │   sec/op     vs base                │
Append-2   64.83µ ± 2%   75.00µ ± 1%  +15.69% (p=0.002 n=6)
Fetch-2    397.1µ ± 3%   395.0µ ± 2%        ~ (p=0.818 n=6)
geomean    160.4µ        172.1µ        +7.30%
`,
}

func writeSummaryFixtures(t *testing.T) string {
	dir := t.TempDir()
	for name, body := range summaryFixtures {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return dir
}

func TestSummarySince(t *testing.T) {
	dir := writeSummaryFixtures(t)
	since, err := parseSince("2026-12-02T08:00:00Z")
	require.NoError(t, err)
	paths, err := reportsSince(dir, since)
	require.NoError(t, err)
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	require.ElementsMatch(t, []string{"2026-12-02-080102Z.json", "2026-12-02-081500Z-txn.json", "2026-12-02-082000Z-kafka.json",
		"2026-12-02-082500Z-security.json", "2026-12-02-082600Z-connections.json", "2026-12-02-083000Z-benchstat.txt"}, names)

	md, err := buildSummary(dir, paths, time.Date(2026, 12, 2, 8, 31, 0, 0, time.UTC))
	require.NoError(t, err)
	lines := strings.Split(md, "\n")
	row := func(prefix string) string {
		t.Helper()
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no row starting with %q in:\n%s", prefix, md)
		return ""
	}

	require.Contains(t, md, "4 of 8 goal conditions met")
	require.Contains(t, row("| run | G1 produce acks=1, 1 KiB | >= 50% of the gRPC"), "| **met**, 1.22x the target | [2026-12-02-080102Z.md](2026-12-02-080102Z.md) |")
	require.Contains(t, row("| run | G1 produce acks=1, 1 KiB | >= 5x JetStream"), "| 4.20 | missed, by 16% (needs 1.19x)")
	require.Contains(t, row("| run | G6 broker CPU |"), "| - | not measured |")
	require.Contains(t, row("| txn | idempotent |"), "| 0.980 | **met**")
	require.Contains(t, row("| txn | transactions, 100 ms commits |"), "| 0.900 | missed")
	require.Contains(t, row("| kafka | produce |"), "| 1.10 | **met**")
	require.Contains(t, row("| kafka | consume |"), "| 0.800 | missed")
	require.Contains(t, row("| security | grpc_produce |"), "| 0.870 | **met**, 1.02x the target | [2026-12-02-082500Z-security.md](2026-12-02-082500Z-security.md) |")
	require.NotContains(t, md, "old")
	require.NotContains(t, md, "connections")

	require.Contains(t, md, "[2026-12-02-083000Z-benchstat.txt](2026-12-02-083000Z-benchstat.txt)")
	require.Contains(t, md, "libs/storage sec/op: Append-2   64.83µ ± 2%   75.00µ ± 1%  +15.69% (p=0.002 n=6)")
	require.NotContains(t, md, "Fetch-2")
	require.NotContains(t, md, "geomean")
}

func TestSummaryPaths(t *testing.T) {
	dir := writeSummaryFixtures(t)
	// Reports named on the command line; a missing kind is said, not
	// silently left out.
	md, err := buildSummary(dir, []string{filepath.Join(dir, "2026-12-02-082500Z-security.json")}, time.Now())
	require.NoError(t, err)
	require.Contains(t, md, "1 of 1 goal conditions met")
	require.Contains(t, md, "No run, txn, kafka report among these")

	// Two reports of one kind are two invocations mixed up.
	_, err = buildSummary(dir, []string{filepath.Join(dir, "2026-12-02-070000Z-kafka.json"), filepath.Join(dir, "2026-12-02-082000Z-kafka.json")}, time.Now())
	require.ErrorContains(t, err, "two kafka reports")
}

// A report without goals (an older sluice-bench's) is refused by name
// rather than summarised as if it had none.
func TestSummaryRefusesReportWithoutGoals(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "2026-12-02-081500Z-txn.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"variants": [{"id": "plain"}]}`), 0o644))
	_, err := buildSummary(dir, []string{p}, time.Now())
	require.ErrorIs(t, err, errNoGoals)
	require.ErrorContains(t, err, "081500Z-txn.json")
}
