package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	s := summarize([]float64{5, 1, 3})
	require.Equal(t, stat{Median: 3, Min: 1, Max: 5, N: 3}, s)
}

func TestConditionMargins(t *testing.T) {
	c := cond("x", 0.25, true, 0.5, true)
	require.False(t, c.Met)
	require.Equal(t, "missed by 50% (needs 2.00x)", c.Margin)
	c = cond("x", 1.0, true, 0.5, true)
	require.True(t, c.Met)
	require.Equal(t, "met, 2.00x the target", c.Margin)
	c = cond("x", 3, true, 2, false)
	require.False(t, c.Met)
	require.Equal(t, "missed: 1.50x the bound", c.Margin)
	c = cond("x", 1, true, 2, false)
	require.True(t, c.Met)
	require.Equal(t, "met, 50% of the bound", c.Margin)
	c = cond("x", 0, false, 2, false)
	require.False(t, c.Met)
	require.Equal(t, "not measured", c.Margin)
}

func TestReportFromSamples(t *testing.T) {
	var samples []sample
	for r, v := range []float64{100, 300, 200} {
		samples = append(samples,
			sample{Figure: "limit.grpc_1stream", Round: r + 1, Values: figures{"mb_per_s": 1000}},
			sample{Figure: "sluice.produce_1k", Round: r + 1, Values: figures{"mb_per_s": v * 3, "mb_per_server_cpu_s": 400}},
			sample{Figure: "nats.pub_1k", Round: r + 1, Values: figures{"mb_per_s": 100}},
		)
	}
	samples = append(samples, sample{Figure: "sluice.rf3_produce_1k", Round: 1, Error: "cluster not ready\nlog tail"})
	h := &harness{cfg: config{rounds: 3}, samples: samples, servers: map[string]string{}}
	r := buildReport(h, 0)

	v, ok := r.med("sluice.produce_1k", "mb_per_s")
	require.True(t, ok)
	require.Equal(t, 600.0, v)
	require.Equal(t, "±50%", r.spread("sluice.produce_1k"))

	byID := map[string]goal{}
	for _, g := range r.Goals {
		byID[g.ID] = g
	}
	g1 := byID["G1"]
	require.True(t, g1.Met, "600 MB/s is 60%% of 1000 and 6x JetStream: %+v", g1)
	require.True(t, byID["G6"].Met)
	require.False(t, byID["RF3"].Met)
	require.Equal(t, "not measured", byID["RF3"].Conditions[0].Margin)

	md := r.markdown()
	require.Contains(t, md, "| G1 **met**: produce acks=1, 1 KiB |")
	require.Contains(t, md, "- sluice.rf3_produce_1k, round 1: cluster not ready\n")
	require.Contains(t, md, "| sluice.produce_1k | mb_per_s | 300 | 900 | 600 |")
	require.True(t, strings.Contains(r.goalsText(), "RF3  MISSED"), r.goalsText())
}
