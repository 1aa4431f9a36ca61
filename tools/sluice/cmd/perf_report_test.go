package cmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLatencySummaryPercentiles(t *testing.T) {
	l := newLatencyRecorder()
	// 1..1000 ms, one each: p50 is 500 ms, p99 990 ms, max 1000 ms.
	for i := 1; i <= 1000; i++ {
		l.record(time.Duration(i) * time.Millisecond)
	}
	s := l.summary()
	require.Equal(t, int64(1000), s.Count)
	// HdrHistogram with 3 significant digits: within 0.1 %.
	require.InDelta(t, 500, s.P50, 0.5)
	require.InDelta(t, 950, s.P95, 1)
	require.InDelta(t, 990, s.P99, 1)
	require.InDelta(t, 999, s.P999, 1)
	require.InDelta(t, 1000, s.Max, 1)
	require.InDelta(t, 500.5, s.Mean, 0.5)

	// The interval histogram empties on every take; the total does not.
	require.Equal(t, int64(1000), l.takeInterval().Count)
	require.Equal(t, int64(0), l.takeInterval().Count)
	require.Equal(t, int64(1000), l.summary().Count)
}

func TestLatencyOutOfRangeIsClamped(t *testing.T) {
	l := newLatencyRecorder()
	l.record(0)
	l.record(time.Hour)
	s := l.summary()
	require.Equal(t, int64(2), s.Count)
	require.InDelta(t, 0.001, s.P50, 0.0001)
	require.InDelta(t, float64(10*time.Minute/time.Millisecond), s.Max, 600)
}

func TestPerfSummaryText(t *testing.T) {
	s := newPerfSummary("produce", "t", 1_000_000, 1_024_000_000, 0, 4*time.Second)
	s.Latency = &latencySummary{Count: 1_000_000, Mean: 1.5, P50: 1.234, P95: 12.34, P99: 123.4, P999: 1234, Max: 2000}
	require.Equal(t, 250000.0, s.RecordsPerSec)
	require.Equal(t, 256.0, s.MBPerSec)
	require.Equal(t,
		"1000000 records sent in 4.00 s: 250000.0 records/s (256.00 MB/s); 0 errors\n"+
			"latency: p50 1.234, p95 12.3, p99 123, p99.9 1234, max 2000 ms (mean 1.500)\n",
		s.text())
}

func TestPerfSummaryJSON(t *testing.T) {
	s := newPerfSummary("e2e", "t", 10, 10240, 1, time.Second)
	s.FirstError = "boom"
	s.Latency = &latencySummary{Count: 10, P50: 0.5, P999: 2}
	var buf bytes.Buffer
	require.NoError(t, s.write(&buf, "json"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.Equal(t, "e2e", got["mode"])
	require.Equal(t, 10.0, got["records_per_s"])
	require.Equal(t, 0.01, got["mb_per_s"])
	require.Equal(t, "boom", got["first_error"])
	lat := got["latency_ms"].(map[string]any)
	require.Equal(t, 0.5, lat["p50"])
	require.Equal(t, 2.0, lat["p99_9"])
	require.NotContains(t, got, "ack_latency_ms")
}

func TestProgressLine(t *testing.T) {
	line := progressLine(3*time.Second, 50_000, 51_200_000, 500*time.Millisecond,
		&latencySummary{Count: 1, P50: 0.5, P99: 12.5, Max: 150}, 2)
	require.True(t, strings.HasPrefix(line, "   3.0s"), line)
	require.Contains(t, line, "100000.0 records/s")
	require.Contains(t, line, "102.40 MB/s")
	require.Contains(t, line, "latency ms p50 0.500 p99 12.5 max 150")
	require.Contains(t, line, "errors 2")
	require.NotContains(t, progressLine(time.Second, 1, 1, time.Second, nil, 0), "latency")
}

func TestPacerDue(t *testing.T) {
	start := time.Unix(0, 0)
	p := pacer{start: start, rate: 1000}
	require.Equal(t, int64(1), p.due(start, 100))
	require.Equal(t, int64(51), p.due(start.Add(50*time.Millisecond), 100))
	require.Equal(t, int64(100), p.due(start.Add(time.Hour), 100))
	require.Equal(t, int64(100), pacer{start: start}.due(start, 100), "no rate: everything is due")
}
