package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 us to 10 minutes, with 3
// significant digits (HdrHistogram's usual precision: 0.1 % error).
const (
	latencyLowestUs  = 1
	latencyHighestUs = int64(10 * time.Minute / time.Microsecond)
	latencySigFigs   = 3
)

func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(latencyLowestUs, latencyHighestUs, latencySigFigs)
}

// latencyRecorder collects latencies from many goroutines into a histogram
// of the whole run and one of the current progress interval.
type latencyRecorder struct {
	mu       sync.Mutex
	total    *hdrhistogram.Histogram
	interval *hdrhistogram.Histogram
}

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{total: newLatencyHistogram(), interval: newLatencyHistogram()}
}

// record adds one latency; values beyond the histogram's range count as its
// highest value rather than being dropped.
func (l *latencyRecorder) record(d time.Duration) {
	us := max(int64(d/time.Microsecond), latencyLowestUs)
	us = min(us, latencyHighestUs)
	l.mu.Lock()
	_ = l.total.RecordValue(us)    // in range by construction
	_ = l.interval.RecordValue(us) // in range by construction
	l.mu.Unlock()
}

// takeInterval returns the latencies of the interval since the last call.
func (l *latencyRecorder) takeInterval() latencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := summarizeLatency(l.interval)
	l.interval.Reset()
	return s
}

// summary returns the latencies of the whole run.
func (l *latencyRecorder) summary() latencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarizeLatency(l.total)
}

// latencySummary is a latency distribution in milliseconds.
type latencySummary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

func summarizeLatency(h *hdrhistogram.Histogram) latencySummary {
	if h.TotalCount() == 0 {
		return latencySummary{}
	}
	ms := func(us int64) float64 { return roundTo(float64(us)/1000, 3) }
	return latencySummary{
		Count: h.TotalCount(),
		Mean:  roundTo(h.Mean()/1000, 3),
		P50:   ms(h.ValueAtQuantile(50)),
		P95:   ms(h.ValueAtQuantile(95)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// text renders the distribution on one line.
func (s latencySummary) text() string {
	if s.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s, p95 %s, p99 %s, p99.9 %s, max %s ms (mean %s)",
		fmtMs(s.P50), fmtMs(s.P95), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max), fmtMs(s.Mean))
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func roundTo(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// perfSummary is the result of one perf run, printed as text or JSON.
type perfSummary struct {
	Mode       string  `json:"mode"`
	Topic      string  `json:"topic"`
	Records    int64   `json:"records"`
	Bytes      int64   `json:"bytes"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ElapsedSec float64 `json:"elapsed_s"`
	// RecordsPerSec and MBPerSec are over the whole run (MB = 10^6 bytes
	// of keys and values, as Kafka's perf tools count them).
	RecordsPerSec float64 `json:"records_per_s"`
	MBPerSec      float64 `json:"mb_per_s"`
	// Latency is the produce latency (Produce to acknowledgement) or, for
	// e2e, the end-to-end latency (send time to consumer receipt).
	Latency *latencySummary `json:"latency_ms,omitempty"`
	// AckLatency is e2e's produce acknowledgement latency.
	AckLatency *latencySummary `json:"ack_latency_ms,omitempty"`
	// FirstRecordSec is, for consume, how long the first record took.
	FirstRecordSec *float64 `json:"first_record_s,omitempty"`
	// JoinSec is, for consume with a group, how long the first assignment
	// took; the fetch rates leave it out (Kafka's fetch.MB.sec).
	JoinSec            *float64 `json:"join_s,omitempty"`
	FetchRecordsPerSec float64  `json:"fetch_records_per_s,omitempty"`
	FetchMBPerSec      float64  `json:"fetch_mb_per_s,omitempty"`
	// Transactions are produce's commit figures with --transactional-id.
	Transactions *txnPerfSummary `json:"transactions,omitempty"`
	Config       map[string]any  `json:"config"`
}

// txnPerfSummary is what committing every --txn-interval cost.
type txnPerfSummary struct {
	Commits       int64   `json:"commits"`
	CommitsPerSec float64 `json:"commits_per_s"`
	// CommitLatency runs from the commit's start (the wait for the
	// transaction's records) to its end; EndTxnLatency is the part after
	// the records were acknowledged.
	CommitLatency *latencySummary `json:"commit_latency_ms"`
	EndTxnLatency *latencySummary `json:"end_txn_latency_ms"`
}

func newPerfSummary(mode, topic string, records, bytes, errors int64, elapsed time.Duration) *perfSummary {
	s := &perfSummary{Mode: mode, Topic: topic, Records: records, Bytes: bytes, Errors: errors,
		ElapsedSec: roundTo(elapsed.Seconds(), 3), Config: map[string]any{}}
	if sec := elapsed.Seconds(); sec > 0 {
		s.RecordsPerSec = roundTo(float64(records)/sec, 1)
		s.MBPerSec = roundTo(float64(bytes)/sec/1e6, 2)
	}
	return s
}

// write prints the summary: indented JSON with --output json, else text.
func (s *perfSummary) write(w io.Writer, output string) error {
	if output == "json" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	_, err := io.WriteString(w, s.text())
	return err
}

func (s *perfSummary) text() string {
	var b strings.Builder
	verb := map[string]string{"produce": "sent", "consume": "consumed", "e2e": "sent and consumed"}[s.Mode]
	fmt.Fprintf(&b, "%d records %s in %.2f s: %.1f records/s (%.2f MB/s); %d errors\n",
		s.Records, verb, s.ElapsedSec, s.RecordsPerSec, s.MBPerSec, s.Errors)
	if s.Latency != nil {
		label := "latency"
		if s.Mode == "e2e" {
			label = "end-to-end latency"
		}
		fmt.Fprintf(&b, "%s: %s\n", label, s.Latency.text())
	}
	if s.AckLatency != nil {
		fmt.Fprintf(&b, "produce ack latency: %s\n", s.AckLatency.text())
	}
	if t := s.Transactions; t != nil {
		fmt.Fprintf(&b, "%d transactions committed, %.1f/s; commit latency: %s; EndTxn part: %s\n",
			t.Commits, t.CommitsPerSec, t.CommitLatency.text(), t.EndTxnLatency.text())
	}
	if s.JoinSec != nil {
		fmt.Fprintf(&b, "joined the group after %.3f s; after the join: %.1f records/s (%.2f MB/s)\n",
			*s.JoinSec, s.FetchRecordsPerSec, s.FetchMBPerSec)
	}
	if s.FirstRecordSec != nil {
		fmt.Fprintf(&b, "first record after %.3f s\n", *s.FirstRecordSec)
	}
	if s.FirstError != "" {
		fmt.Fprintf(&b, "first error: %s\n", s.FirstError)
	}
	return b.String()
}

// progressLine renders one second of progress.
func progressLine(elapsed time.Duration, records, bytes int64, interval time.Duration, lat *latencySummary, errors int64) string {
	sec := interval.Seconds()
	if sec <= 0 {
		sec = 1
	}
	line := fmt.Sprintf("%6.1fs  %10.1f records/s  %8.2f MB/s", elapsed.Seconds(), float64(records)/sec, float64(bytes)/sec/1e6)
	if lat != nil && lat.Count > 0 {
		line += fmt.Sprintf("  latency ms p50 %s p99 %s max %s", fmtMs(lat.P50), fmtMs(lat.P99), fmtMs(lat.Max))
	}
	if errors > 0 {
		line += fmt.Sprintf("  errors %d", errors)
	}
	return line
}

// errorCounter counts failures and keeps the first one.
type errorCounter struct {
	mu    sync.Mutex
	n     int64
	first error
}

func (e *errorCounter) add(err error) {
	e.mu.Lock()
	e.n++
	if e.first == nil {
		e.first = err
	}
	e.mu.Unlock()
}

func (e *errorCounter) get() (int64, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		return e.n, ""
	}
	return e.n, e.first.Error()
}

// pacer spreads sends evenly at a fixed rate: due says how many sends
// should have happened by now. A rate <= 0 means unlimited.
type pacer struct {
	start time.Time
	rate  float64
}

func (p pacer) due(now time.Time, limit int64) int64 {
	if p.rate <= 0 {
		return limit
	}
	return min(int64(now.Sub(p.start).Seconds()*p.rate)+1, limit)
}
