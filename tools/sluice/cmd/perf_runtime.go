package cmd

import (
	"fmt"
	"io"
	"math"
	"runtime/metrics"
	"time"
)

// runtimeHists are the runtime/metrics histograms --runtime-stats reports:
// how long runnable goroutines waited for a CPU, and stop-the-world pauses
// for GC.
var runtimeHists = []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds"}

func readRuntimeHists() []metrics.Sample {
	s := make([]metrics.Sample, len(runtimeHists))
	for i, n := range runtimeHists {
		s[i].Name = n
	}
	metrics.Read(s)
	return s
}

// writeRuntimeStats prints, per histogram, the count and the percentiles
// of what was added between before and after.
func writeRuntimeStats(w io.Writer, before, after []metrics.Sample) {
	for i := range after {
		if after[i].Value.Kind() != metrics.KindFloat64Histogram {
			continue
		}
		a := after[i].Value.Float64Histogram()
		var b *metrics.Float64Histogram
		if before[i].Value.Kind() == metrics.KindFloat64Histogram {
			b = before[i].Value.Float64Histogram()
		}
		counts := make([]uint64, len(a.Counts))
		var total uint64
		for j, c := range a.Counts {
			if b != nil && j < len(b.Counts) {
				c -= b.Counts[j]
			}
			counts[j] = c
			total += c
		}
		fmt.Fprintf(w, "runtime %s: n=%d", after[i].Name, total)
		for _, q := range []float64{0.5, 0.99, 0.999, 1} {
			fmt.Fprintf(w, " p%g<=%v", q*100, histQuantile(a.Buckets, counts, total, q))
		}
		fmt.Fprintln(w)
	}
}

// histQuantile is the upper bound of the bucket holding quantile q.
func histQuantile(buckets []float64, counts []uint64, total uint64, q float64) time.Duration {
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for j, c := range counts {
		seen += c
		if seen >= want {
			hi := buckets[j+1]
			if math.IsInf(hi, 1) {
				hi = buckets[j]
			}
			return time.Duration(hi * float64(time.Second))
		}
	}
	return 0
}
