package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSliceBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuMark{at: t0, utime: 500, stime: 200, ticks: 100}
	b := cpuMark{at: t0.Add(4 * time.Second), utime: 650, stime: 400, ticks: 100}
	s := sliceBetween(3, a, b, 1<<30, 250)
	require.Equal(t, 3, s.GiB)
	require.Equal(t, 250.0, s.MBPerS)
	require.Equal(t, 4.0, s.WallS)
	require.InDelta(t, 1.5, s.ServerUserS, 1e-9)
	require.InDelta(t, 2.0, s.ServerSysS, 1e-9)
	require.InDelta(t, 50.0, s.SysPct, 1e-9, "2 s of system CPU in 4 s is half a core")
	require.InDelta(t, 3.5/1.073741824, s.CPUPerGB, 1e-9)
}

func TestLastOverFirst(t *testing.T) {
	_, ok := lastOverFirst(nil)
	require.False(t, ok)
	_, ok = lastOverFirst([]sustainedSlice{{MBPerS: 100}})
	require.False(t, ok, "one slice has no last to compare")
	x, ok := lastOverFirst([]sustainedSlice{{MBPerS: 200}, {MBPerS: 50}, {MBPerS: 170}})
	require.True(t, ok)
	require.InDelta(t, 0.85, x, 1e-9)
}

func TestSustainedSize(t *testing.T) {
	n, note := sustainedSize(10, 25<<30)
	require.Equal(t, 10, n)
	require.Empty(t, note)
	n, note = sustainedSize(10, 24<<30+(1<<29))
	require.Equal(t, 9, n, "24.5 GiB free holds 9 GiB twice and 5 to spare, not 10")
	require.Contains(t, note, "10 GiB asked for, 9 GiB run")
	n, _ = sustainedSize(10, 6<<30)
	require.Equal(t, 0, n)
	n, note = sustainedSize(0, 100<<30)
	require.Equal(t, 0, n)
	require.Empty(t, note)
}

func TestReportDefaultsAndSustained(t *testing.T) {
	var samples []sample
	for r := 1; r <= 3; r++ {
		samples = append(samples,
			sample{Figure: "sluice.produce_1k", Round: r, Values: figures{"mb_per_s": 400}},
			sample{Figure: "sluice.produce_100b", Round: r, Values: figures{"records_per_s": 1e6}},
			sample{Figure: "sluice.produce_1k_fsync", Round: r, Values: figures{"mb_per_s": 200}},
			sample{Figure: "defaults.produce_1k_acks1", Round: r, Values: figures{"mb_per_s": 360}},
			sample{Figure: "defaults.produce_100b_acks1", Round: r, Values: figures{"records_per_s": 7e5}},
			sample{Figure: "defaults.produce_1k", Round: r, Values: figures{"mb_per_s": 180, "server_cpu_s_per_gb": 2.5}},
			sample{Figure: "defaults.produce_100b", Round: r, Values: figures{"records_per_s": 4e5}},
		)
	}
	h := &harness{cfg: config{rounds: 3, sustainedGiB: 3}, samples: samples, servers: map[string]string{}, sustainedGiB: 3,
		sustained: []sustainedRun{
			{ID: "sustained.acks1", Label: "defaults + acks=1, no fsync", Command: "bin/sluice perf produce",
				Slices: []sustainedSlice{{GiB: 1, MBPerS: 300, SysPct: 40, CPUPerGB: 2}, {GiB: 2, MBPerS: 290}, {GiB: 3, MBPerS: 280}}},
			{ID: "sustained.fsync", Label: "defaults (acks=all, fsync before ack)", Command: "bin/sluice perf produce",
				Slices: []sustainedSlice{{GiB: 1, MBPerS: 200}, {GiB: 2, MBPerS: 150}}, Error: "sluice: exit status 1\ntail"},
		}}
	r := buildReport(h, 0)
	byID := map[string]goal{}
	for _, g := range r.Goals {
		byID[g.ID] = g
	}

	def := byID["DEF"]
	require.Len(t, def.Conditions, 3)
	require.InDelta(t, 0.9, def.Conditions[0].Value, 1e-9)
	require.True(t, def.Conditions[0].Met)
	require.InDelta(t, 0.7, def.Conditions[1].Value, 1e-9)
	require.False(t, def.Conditions[1].Met, "100 B at 70% of tuned misses 80%")
	require.InDelta(t, 0.9, def.Conditions[2].Value, 1e-9, "defaults with fsync against the tuned fsync figure")
	require.False(t, def.Met)

	sus := byID["SUS"]
	require.Len(t, sus.Conditions, 2)
	require.InDelta(t, 280.0/300, sus.Conditions[0].Value, 1e-9)
	require.True(t, sus.Conditions[0].Met)
	require.InDelta(t, 0.75, sus.Conditions[1].Value, 1e-9)
	require.False(t, sus.Met)

	md := r.markdown()
	require.Contains(t, md, "| DEF **missed**: sluice perf defaults reach >= 80% of the best tuned figure | 1 KiB, acks=1, no fsync: >= 80% of tuned (a) | 0.900 | met, 1.12x the target |")
	require.Contains(t, md, "| 1 KiB, acks=1, no fsync, MB/s | 360 | ±0% | 400 | 0.90x |")
	require.Contains(t, md, "| 1 KiB, acks=all, fsync before ack, MB/s | 180 | ±0% | 200 | 0.90x | 2.50 / - |")
	require.Contains(t, md, "| 100 B, acks=all, fsync before ack, records/s (no tuned figure) | 400.0k | ±0% | - | - |")
	require.Contains(t, md, "| 1 | 300 | 40 | 2.00 | 200 | 0 | 0.000 |")
	require.Contains(t, md, "| 3 | 280 | 0 | 0.000 | - | - | - |")
	require.Contains(t, md, "| last / first | 0.93x | | | 0.75x | | |")
	require.Contains(t, md, "sustained.fsync failed after 2 GiB: sluice: exit status 1\n")
}

func TestReportSustainedNotRun(t *testing.T) {
	h := &harness{cfg: config{rounds: 1}, servers: map[string]string{}}
	r := buildReport(h, 0)
	for _, g := range r.Goals {
		require.NotEqual(t, "SUS", g.ID, "a run without the sustained block has no sustained goal")
	}
	require.NotContains(t, r.markdown(), "## Sustained rate")

	h.sustainedNote = "10 GiB asked for, 0 GiB run"
	r = buildReport(h, 0)
	require.Equal(t, "SUS", r.Goals[len(r.Goals)-1].ID)
	require.Equal(t, "not measured", r.Goals[len(r.Goals)-1].Conditions[0].Margin)
	require.Contains(t, r.markdown(), "10 GiB asked for, 0 GiB run.\n\nNot run.")
}
