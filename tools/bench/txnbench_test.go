package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTxnReportRatiosAndGoals(t *testing.T) {
	var samples []sample
	// Plain drifts from round to round; the idempotent producer stays at
	// 0.98x of it and 100 ms transactions at 0.9x.
	for r, plain := range []float64{100, 200, 150} {
		round := r + 1
		samples = append(samples,
			sample{Figure: "txn.plain", Round: round, Values: figures{"mb_per_s": plain}},
			sample{Figure: "txn.idempotent", Round: round, Values: figures{"mb_per_s": plain * 0.98}},
			sample{Figure: "txn.txn_100ms", Round: round, Values: figures{"mb_per_s": plain * 0.9, "commits_per_s": 9}},
		)
	}
	samples = append(samples, sample{Figure: "txn.txn_10ms", Round: 1, Error: "sluice: exit status 1\nlog tail"})
	h := &harness{samples: samples, servers: map[string]string{}}
	r := buildTxnReport(h, txnConfig{rounds: 3, records: 1000}, 0, "1, 1, 1", "2, 2, 2")

	rows := map[string]txnRow{}
	for _, row := range r.Rows {
		rows[row.ID] = row
	}
	require.InDelta(t, 150, rows["plain"].Stats["mb_per_s"].Median, 1e-9)
	require.InDelta(t, 0.98, rows["idempotent"].RatioOfMedians["mb_per_s"], 1e-9)
	require.InDelta(t, 0.98, rows["idempotent"].MedianRatio["mb_per_s"], 1e-9)
	require.InDelta(t, 0.9, rows["txn_100ms"].MedianRatio["mb_per_s"], 1e-9)
	require.Len(t, rows["txn_10ms"].Failures, 1)

	require.True(t, r.Goals[0].Met, "%+v", r.Goals[0])
	require.False(t, r.Goals[1].Met, "%+v", r.Goals[1])
	require.Contains(t, r.Goals[1].Margin, "costs 10.0 %")
	md := r.markdown()
	require.Contains(t, md, "| 2 | 200 | 196 | - | 180 | - |")
	require.Contains(t, md, "- txn_10ms, round 1: sluice: exit status 1\n")
}
