package verify

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"time"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// second is one second of the timeline: records written by outcome and the
// latencies (ms) of writes that ended OK.
type second struct {
	ok, fail, info int
	lat            []float64
}

// timeline buckets a history's writes per second of their end time, from
// start (the first write's start when zero).
func timeline(h check.History, start time.Time) (int64, []second) {
	first, last := span(h)
	origin := first
	if !start.IsZero() {
		origin = start.UnixNano()
	}
	if last < origin {
		return origin, nil
	}
	secs := make([]second, (last-origin)/int64(time.Second)+1)
	for _, t := range h.Txns {
		if t.End < origin {
			continue
		}
		s := &secs[(t.End-origin)/int64(time.Second)]
		n := max(len(t.Sends), 1)
		switch t.Outcome {
		case check.OK:
			s.ok += n
			if t.Start > 0 {
				s.lat = append(s.lat, float64(t.End-t.Start)/1e6)
			}
		case check.Fail:
			s.fail += n
		default:
			s.info += n
		}
	}
	return origin, secs
}

// Plot geometry.
const (
	plotW      = 960
	plotLeft   = 70
	plotRight  = 20
	panelH     = 180
	panelGap   = 50
	plotTop    = 60
	plotBottom = 40
)

// svgWriter writes SVG elements, keeping the first write error.
type svgWriter struct {
	w   *bufio.Writer
	err error
}

func (s *svgWriter) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

// writeTimeline draws the timeline: records per second by outcome, write
// latency p50/p99 per second, and the faults as shaded bands over both
// panels, labelled at the top.
func writeTimeline(w io.Writer, h check.History, start time.Time) error {
	origin, secs := timeline(h, start)
	n := max(len(secs), 1)
	// The x axis also covers faults that outlast the writes.
	for _, f := range h.Faults {
		if end := max(f.End, f.Start); end > origin {
			n = max(n, int((end-origin)/int64(time.Second))+1)
		}
	}
	innerW := float64(plotW - plotLeft - plotRight)
	x := func(sec float64) float64 { return plotLeft + sec/float64(n)*innerW }
	height := plotTop + 2*panelH + panelGap + plotBottom
	s := &svgWriter{w: bufio.NewWriter(w)}
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		plotW, height, plotW, height)
	s.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.printf(`<text x="%d" y="18" font-size="14" font-weight="bold">sluice verify: timeline (seconds after %s)</text>`+"\n",
		plotLeft, html.EscapeString(time.Unix(0, origin).UTC().Format(time.RFC3339)))

	// Fault bands behind both panels.
	panel1, panel2 := float64(plotTop), float64(plotTop+panelH+panelGap)
	for i, f := range h.Faults {
		from := float64(f.Start-origin) / 1e9
		to := from + 0.2 // an instant fault still shows
		if f.End > f.Start {
			to = float64(f.End-origin) / 1e9
		}
		from, to = math.Max(from, 0), math.Min(to, float64(n))
		if to <= from {
			continue
		}
		label := f.Kind
		if f.Target != "" {
			label += " " + f.Target
		}
		s.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4a261" fill-opacity="0.25"><title>%s</title></rect>`+"\n",
			x(from), panel1, math.Max(x(to)-x(from), 1), panel2+panelH-panel1, html.EscapeString(label+" "+f.Detail))
		// A label that would run past the right edge is moved left to end
		// inside the image (about 6.2 px a character at 11 px).
		lx := math.Max(math.Min(x(from)+2, float64(plotW)-4-6.2*float64(len(label))), 2)
		s.printf(`<text x="%.1f" y="%d" fill="#b35c00">%s</text>`+"\n", lx, plotTop-6-(i%3)*11, html.EscapeString(label))
	}

	// Panel 1: records per second by outcome, stacked.
	maxRate := 1
	for _, sec := range secs {
		maxRate = max(maxRate, sec.ok+sec.fail+sec.info)
	}
	maxRate = int(niceCeil(float64(maxRate)))
	axes(s, panel1, n, float64(maxRate), "records/s", x)
	barW := math.Max(innerW/float64(n)-1, 1)
	y1 := func(v float64) float64 { return panel1 + panelH - v/float64(maxRate)*panelH }
	for i, sec := range secs {
		base := 0
		for _, part := range []struct {
			v     int
			color string
		}{{sec.ok, "#2a9d8f"}, {sec.info, "#e9c46a"}, {sec.fail, "#e63946"}} {
			if part.v == 0 {
				continue
			}
			s.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
				x(float64(i)), y1(float64(base+part.v)), barW, y1(float64(base))-y1(float64(base+part.v)), part.color)
			base += part.v
		}
	}
	legend(s, panel1, []string{"#2a9d8f", "ok", "#e9c46a", "info", "#e63946", "fail"})

	// Panel 2: latency p50 and p99 per second.
	maxLat := 1.0
	p50 := make([]float64, len(secs))
	p99 := make([]float64, len(secs))
	for i := range secs {
		slices.Sort(secs[i].lat)
		p50[i], p99[i] = percentile(secs[i].lat, 0.5), percentile(secs[i].lat, 0.99)
		maxLat = math.Max(maxLat, p99[i])
	}
	maxLat = niceCeil(maxLat)
	axes(s, panel2, n, maxLat, "write latency ms", x)
	y2 := func(v float64) float64 { return panel2 + panelH - v/maxLat*panelH }
	for _, line := range []struct {
		v     []float64
		color string
	}{{p99, "#e76f51"}, {p50, "#264653"}} {
		// A second without writes breaks the line, so an outage shows as
		// a gap rather than a slope.
		s.printf(`<path fill="none" stroke="%s" stroke-width="1.5" d="`, line.color)
		cmd := "M"
		for i, v := range line.v {
			if len(secs[i].lat) == 0 {
				cmd = "M"
				continue
			}
			s.printf("%s%.1f,%.1f ", cmd, x(float64(i)+0.5), y2(v))
			cmd = "L"
		}
		s.printf("\"/>\n")
	}
	legend(s, panel2, []string{"#264653", "p50", "#e76f51", "p99"})
	s.printf("</svg>\n")
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}

// axes draws a panel's frame, y ticks up to top and x ticks in seconds.
func axes(s *svgWriter, y0 float64, n int, top float64, label string, x func(float64) float64) {
	s.printf(`<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", plotLeft, y0, plotW-plotLeft-plotRight, panelH)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		y := y0 + panelH - float64(i)/4*panelH
		s.printf(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-4, y+4, tick(v))
		if i > 0 && i < 4 {
			s.printf(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", plotLeft, plotW-plotRight, y, y)
		}
	}
	step := max(1, n/10)
	for sec := 0; sec <= n; sec += step {
		s.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(float64(sec)), y0+panelH+14, sec)
	}
	s.printf(`<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">%s</text>`+"\n",
		y0+panelH/2, y0+panelH/2, html.EscapeString(label))
}

// legend draws color swatches with names (pairs of color, name) at a
// panel's top right.
func legend(s *svgWriter, y0 float64, pairs []string) {
	xx := plotW - plotRight - 60*len(pairs)/2
	for i := 0; i+1 < len(pairs); i += 2 {
		s.printf(`<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/><text x="%d" y="%.1f">%s</text>`+"\n",
			xx, y0+4, pairs[i], xx+14, y0+13, pairs[i+1])
		xx += 60
	}
}

// niceCeil rounds v up to 1, 2, 4 or 5 times a power of ten, so the four
// y ticks are round numbers.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
