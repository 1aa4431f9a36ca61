package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client"
)

// processing is one time a worker processed a record.
type processing struct {
	worker string
	t      int64
	gen    int32
	key    string
}

// workerHistory is everything the workers logged.
type workerHistory struct {
	workers map[string]*faultWorker
	names   []string
	// events are each worker's lines other than records, in order.
	events map[string][]workerLine
	// records holds every processing per partition and offset.
	records map[int32]map[int64][]processing
}

func parseWorkerLine(b []byte, l *workerLine) error { return json.Unmarshal(b, l) }

// readWorkerHistory reads every worker's output. Only a SIGKILLed worker
// may have left a torn last line.
func readWorkerHistory(t *testing.T, f *workerFleet) *workerHistory {
	h := &workerHistory{workers: map[string]*faultWorker{}, events: map[string][]workerLine{},
		records: map[int32]map[int64][]processing{}}
	for _, w := range f.workers {
		h.workers[w.name] = w
		h.names = append(h.names, w.name)
		b, err := os.ReadFile(w.out)
		require.NoError(t, err)
		lines := bytes.Split(b, []byte{'\n'})
		for i, ln := range lines {
			if len(ln) == 0 {
				continue
			}
			var l workerLine
			if err := parseWorkerLine(ln, &l); err != nil {
				torn := i == len(lines)-1 && !w.killedAt.IsZero()
				require.True(t, torn, "worker %s line %d: %v: %s", w.name, i+1, err, ln)
				continue
			}
			if l.Kind != "record" {
				h.events[w.name] = append(h.events[w.name], l)
				continue
			}
			byOffset := h.records[l.Partition]
			if byOffset == nil {
				byOffset = map[int64][]processing{}
				h.records[l.Partition] = byOffset
			}
			byOffset[l.Offset] = append(byOffset[l.Offset], processing{worker: w.name, t: l.T, gen: l.Gen, key: l.Key})
		}
	}
	return h
}

// stall returns the longest time any partition went without a record being
// processed between from and to.
func (h *workerHistory) stall(from, to time.Time) time.Duration {
	var worst int64
	lo, hi := from.UnixNano(), to.UnixNano()
	for _, byOffset := range h.records {
		var ts []int64
		for _, ps := range byOffset {
			for _, p := range ps {
				if p.t >= lo && p.t <= hi {
					ts = append(ts, p.t)
				}
			}
		}
		slices.Sort(ts)
		prev := lo
		for _, x := range append(ts, hi) {
			worst = max(worst, x-prev)
			prev = x
		}
	}
	return time.Duration(worst)
}

// ownership is one worker's hold on one partition, from its assigned line
// to its revoked or lost line, or to its death.
type ownership struct {
	worker     string
	gen        int32
	start, end int64
	ended      string // revoked, lost, killed or open
}

// groupReport holds the counts of a run.
type groupReport struct {
	processed, duplicates       int
	missing                     int
	dupCause                    map[string]int
	generations                 int
	assignmentEvents            int
	fencedOverlaps              int
	commitsOK, commitsFailed    int
	violations                  []string
	violationsByCheck           map[string]int
	lastCommitted, finalFetched map[int32]int64
}

func (r *groupReport) violate(check, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.violationsByCheck[check]++
	if r.violationsByCheck[check] <= 10 {
		r.violations = append(r.violations, "("+check+") "+msg)
	}
}

// checkGroupHistory checks the workers' history against what was
// acknowledged and what the group committed in the end (see
// TestGroupUnderFaults) and returns the counts and the violations.
// coordWindow is when the coordinator's death may fail commits.
func checkGroupHistory(h *workerHistory, acked []ack, final map[client.TopicPartition]*groupv1.OffsetFetchPartition,
	classic bool, coordWindow [2]time.Time) *groupReport {
	r := &groupReport{dupCause: map[string]int{}, violationsByCheck: map[string]int{},
		lastCommitted: map[int32]int64{}, finalFetched: map[int32]int64{}}

	// (a) Every acknowledged record was processed at least once.
	for _, a := range acked {
		found := false
		for _, p := range h.records[a.part][a.offset] {
			if p.key == a.key {
				found = true
				break
			}
		}
		if !found {
			r.missing++
			r.violate("a", "acknowledged record %s (partition %d offset %d) was never processed", a.key, a.part, a.offset)
		}
	}
	for _, byOffset := range h.records {
		r.processed += len(byOffset)
	}

	// (b) No partition had two owners at once.
	owns := map[int32][]*ownership{}
	assignedAt := map[int32][]ownership{} // every assigned line per partition, in time order
	lostAt := map[string]map[int32][]int64{}
	held := map[int32]map[int32]map[string]bool{} // generation -> partition -> workers
	gens := map[int32]bool{}
	hold := func(gen int32, parts []int32, worker string) {
		if gen < 0 {
			return
		}
		gens[gen] = true
		if held[gen] == nil {
			held[gen] = map[int32]map[string]bool{}
		}
		for _, p := range parts {
			if held[gen][p] == nil {
				held[gen][p] = map[string]bool{}
			}
			held[gen][p][worker] = true
		}
	}
	for _, name := range h.names {
		w := h.workers[name]
		open := map[int32]*ownership{}
		lostAt[name] = map[int32][]int64{}
		var lastT int64
		for _, l := range h.events[name] {
			lastT = l.T
			switch l.Kind {
			case "assigned":
				r.assignmentEvents++
				hold(l.Gen, l.Partitions, name)
				for _, p := range l.Partitions {
					if open[p] != nil {
						r.violate("b", "%s was assigned partition %d again without giving it up", name, p)
						continue
					}
					o := &ownership{worker: name, start: l.T, ended: "open"}
					open[p] = o
					owns[p] = append(owns[p], o)
					assignedAt[p] = append(assignedAt[p], ownership{worker: name, gen: l.Gen, start: l.T})
				}
			case "revoked", "lost":
				r.assignmentEvents++
				hold(l.Gen, l.Partitions, name)
				for _, p := range l.Partitions {
					if l.Kind == "lost" {
						lostAt[name][p] = append(lostAt[name][p], l.T)
					}
					if open[p] == nil {
						r.violate("b", "%s gave up partition %d, which it did not own", name, p)
						continue
					}
					open[p].end, open[p].ended = l.T, l.Kind
					delete(open, p)
				}
			case "owned":
				hold(l.Gen, l.Partitions, name)
			}
		}
		for p, o := range open {
			if !w.killedAt.IsZero() {
				o.end, o.ended = w.killedAt.UnixNano(), "killed"
				continue
			}
			o.end = lastT
			r.violate("b", "%s ended owning partition %d without revoking it", name, p)
		}
	}
	r.generations = len(gens)
	for p, list := range owns {
		sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
		for i, a := range list {
			for _, b := range list[i+1:] {
				if b.start >= a.end || b.worker == a.worker {
					continue
				}
				if a.ended == "lost" {
					r.fencedOverlaps++
					continue
				}
				r.violate("b", "partition %d: %s was assigned it at %s while %s owned it (until %s, %s)", p, b.worker,
					fmtNanos(b.start), a.worker, fmtNanos(a.end), a.ended)
			}
		}
		sort.Slice(assignedAt[p], func(i, j int) bool { return assignedAt[p][i].start < assignedAt[p][j].start })
	}
	if classic {
		for gen, parts := range held {
			for p, ws := range parts {
				if len(ws) > 1 {
					r.violate("b", "generation %d: partition %d held by %v", gen, p, keysOf(ws))
				}
			}
		}
	}

	// Commits by worker and partition, for (c), (d) and (e).
	type commitLine struct {
		worker string
		l      workerLine
	}
	commits := map[string]map[int32][]workerLine{}
	var okByPartition = map[int32][]commitLine{}
	for _, name := range h.names {
		commits[name] = map[int32][]workerLine{}
		for _, l := range h.events[name] {
			if l.Kind != "commit" {
				continue
			}
			commits[name][l.Partition] = append(commits[name][l.Partition], l)
			if l.OK {
				r.commitsOK++
				okByPartition[l.Partition] = append(okByPartition[l.Partition], commitLine{name, l})
			} else {
				r.commitsFailed++
			}
		}
	}

	// (c) Duplicates come only from a killed member, a fenced one, or
	// commits the coordinator's death failed.
	lo, hi := coordWindow[0].UnixNano(), coordWindow[1].UnixNano()
	for p, byOffset := range h.records {
		for off, ps := range byOffset {
			if len(ps) < 2 {
				continue
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i].t < ps[j].t })
			for i := 1; i < len(ps); i++ {
				prev, cur := ps[i-1], ps[i]
				r.duplicates++
				w := h.workers[prev.worker]
				cause := ""
				switch {
				case !w.killedAt.IsZero() && cur.t >= w.killedAt.UnixNano():
					cause = "killed"
				case slices.ContainsFunc(lostAt[prev.worker][p], func(x int64) bool { return x > prev.t && x <= cur.t && x >= lo && x <= hi }):
					// Fenced because the coordinator died (a new one may not
					// know the member).
					cause = "coordinator"
				case slices.ContainsFunc(lostAt[prev.worker][p], func(x int64) bool { return x > prev.t && x <= cur.t }):
					cause = "fenced"
				}
				// The second processor read its start offset when it was
				// assigned the partition: a commit past the record accepted
				// before then must have been seen, whatever else happened.
				// (One accepted later raced a fence: at least once allows it.)
				var taken int64
				for _, o := range owns[p] {
					if o.worker == cur.worker && o.start <= cur.t {
						taken = max(taken, o.start)
					}
				}
				var failedInWindow bool
				for _, c := range commits[prev.worker][p] {
					if c.T < prev.t || c.T > cur.t {
						continue
					}
					if c.OK && c.Offset > off && c.T < taken {
						r.violate("c", "partition %d offset %d: %s committed %d at %s, yet %s, assigned the partition at %s, processed it again at %s",
							p, off, prev.worker, c.Offset, fmtNanos(c.T), cur.worker, fmtNanos(taken), fmtNanos(cur.t))
					}
					if !c.OK && c.T0 >= lo && c.T0 <= hi {
						failedInWindow = true
					}
				}
				if cause == "" && failedInWindow {
					cause = "coordinator"
				}
				if cause == "" {
					cause = "unexplained"
					r.violate("c", "partition %d offset %d processed by %s at %s and again by %s at %s, with no kill, fence or coordinator failure in between; %s's commits then: %s",
						p, off, prev.worker, fmtNanos(prev.t), cur.worker, fmtNanos(cur.t), prev.worker, commitsBetween(commits[prev.worker][p], prev.t, cur.t))
				}
				r.dupCause[cause]++
			}
		}
	}

	// (d) Accepted commits never go backwards, and the group ends at or
	// beyond the last of them.
	for p, list := range okByPartition {
		sort.Slice(list, func(i, j int) bool { return list[i].l.T < list[j].l.T })
		for i := 1; i < len(list); i++ {
			if a, b := list[i-1], list[i]; b.l.Offset < a.l.Offset {
				r.violate("d", "partition %d: commit of %d by %s at %s after %d by %s at %s", p, b.l.Offset, b.worker,
					fmtNanos(b.l.T), a.l.Offset, a.worker, fmtNanos(a.l.T))
			}
		}
		last := list[len(list)-1].l.Offset
		r.lastCommitted[p] = last
		got := final[client.TopicPartition{Topic: faultTopic, Partition: p}].GetOffset()
		r.finalFetched[p] = got
		if got < last {
			r.violate("d", "partition %d: the group's committed offset is %d, below the last accepted commit %d", p, got, last)
		}
	}

	// (e) No commit of a member that no longer owned the partition was
	// accepted: when it started, the committer held the partition and no
	// member assigned it later (a new owner after a fence) still held it.
	for p, list := range okByPartition {
		as := assignedAt[p]
		for _, c := range list {
			var mine *ownership
			for _, o := range owns[p] {
				if o.worker == c.worker && o.start <= c.l.T0 && (mine == nil || o.start > mine.start) {
					mine = o
				}
			}
			if mine == nil || mine.end < c.l.T0 {
				r.violate("e", "partition %d: %s's commit of %d started at %s was accepted though it did not hold the partition", p, c.worker, c.l.Offset, fmtNanos(c.l.T0))
				continue
			}
			for _, o := range owns[p] {
				if o.worker != c.worker && o.start > mine.start && o.start < c.l.T0 && o.end > c.l.T0 {
					r.violate("e", "partition %d: %s's commit of %d (gen %d) started at %s was accepted, though %s was assigned it at %s",
						p, c.worker, c.l.Offset, c.l.Gen, fmtNanos(c.l.T0), o.worker, fmtNanos(o.start))
				}
			}
			i := sort.Search(len(as), func(i int) bool { return as[i].start >= c.l.T0 }) - 1
			if i < 0 {
				continue
			}
			// A classic generation only grows; a commit from an older one
			// than the partition's latest assignment is stale. (Member
			// epochs of the consumer protocol are per member.)
			if classic && c.l.Gen >= 0 && c.l.Gen < as[i].gen {
				r.violate("e", "partition %d: %s's commit of %d with generation %d was accepted after the partition was assigned in generation %d",
					p, c.worker, c.l.Offset, c.l.Gen, as[i].gen)
			}
		}
	}

	return r
}

// logGroupReport logs the counts of a run and each worker's story, and
// fails the test on any violation.
func logGroupReport(t *testing.T, h *workerHistory, r *groupReport, acked int) {
	t.Logf("%d acknowledged records, %d distinct records processed, %d missing; %d duplicates by cause %v",
		acked, r.processed, r.missing, r.duplicates, r.dupCause)
	t.Logf("%d generations/epochs, %d assignment changes, %d overlaps after a fence; commits: %d accepted, %d failed",
		r.generations, r.assignmentEvents, r.fencedOverlaps, r.commitsOK, r.commitsFailed)
	for _, name := range h.names {
		w := h.workers[name]
		var errsSeen []string
		for _, l := range h.events[name] {
			if l.Err != "" && len(errsSeen) < 3 {
				errsSeen = append(errsSeen, l.Kind+": "+l.Err)
			}
		}
		end := "running to the end"
		switch {
		case !w.killedAt.IsZero():
			end = "SIGKILLed at " + w.killedAt.Format("15:04:05.000")
		case !w.stoppedAt.IsZero():
			end = "stopped at " + w.stoppedAt.Format("15:04:05.000")
		}
		t.Logf("worker %s (%s): %d lines of events; first errors: %q", name, end, len(h.events[name]), errsSeen)
	}
	if len(r.violations) > 0 {
		t.Errorf("violations by check %v:\n%s", r.violationsByCheck, joinLines(r.violations))
	}
}

func commitsBetween(list []workerLine, from, to int64) string {
	var out []string
	for _, c := range list {
		if c.T >= from && c.T <= to {
			s := fmt.Sprintf("%d@%s ok=%v", c.Offset, fmtNanos(c.T), c.OK)
			if c.Err != "" {
				s += " err=" + c.Err
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprint(out)
}

func fmtNanos(n int64) string { return time.Unix(0, n).Format("15:04:05.000") }

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func joinLines(lines []string) string {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// The checker of TestGroupUnderFaults finds each kind of violation it
// looks for in a small made-up history, and none in the clean one: worker
// a owns partition 0 in generation 1, processes offsets 0-2, commits 3 and
// revokes it; worker b takes it in generation 2, processes offset 3 and
// commits 4.
func TestGroupHistoryCheckerFindsViolations(t *testing.T) {
	type history struct {
		h     *workerHistory
		acked []ack
		final int64
	}
	clean := func() *history {
		h := &workerHistory{workers: map[string]*faultWorker{"a": {name: "a"}, "b": {name: "b"}}, names: []string{"a", "b"},
			events: map[string][]workerLine{
				"a": {{Kind: "assigned", T: 10, Gen: 1, Partitions: []int32{0}}, {Kind: "commit", T0: 14, T: 15, Gen: 1, Offset: 3, OK: true},
					{Kind: "revoked", T: 16, Gen: 1, Partitions: []int32{0}}},
				"b": {{Kind: "assigned", T: 20, Gen: 2, Partitions: []int32{0}}, {Kind: "commit", T0: 22, T: 23, Gen: 2, Offset: 4, OK: true},
					{Kind: "revoked", T: 30, Gen: 2, Partitions: []int32{0}}},
			},
			records: map[int32]map[int64][]processing{0: {
				0: {{worker: "a", t: 11, key: "k0"}}, 1: {{worker: "a", t: 12, key: "k1"}},
				2: {{worker: "a", t: 13, key: "k2"}}, 3: {{worker: "b", t: 21, key: "k3"}},
			}},
		}
		var acked []ack
		for i := range int64(4) {
			acked = append(acked, ack{key: fmt.Sprintf("k%d", i), part: 0, offset: i})
		}
		return &history{h: h, acked: acked, final: 4}
	}
	check := func(x *history) *groupReport {
		final := map[client.TopicPartition]*groupv1.OffsetFetchPartition{{Topic: faultTopic, Partition: 0}: {Offset: x.final}}
		return checkGroupHistory(x.h, x.acked, final, true, [2]time.Time{})
	}
	r := check(clean())
	require.Empty(t, r.violations)
	require.Equal(t, 4, r.processed)

	for _, tc := range []struct {
		name, check string
		plant       func(x *history)
	}{
		{"acknowledged record never processed", "a", func(x *history) { x.acked = append(x.acked, ack{key: "k4", offset: 4}) }},
		{"new owner before the revocation", "b", func(x *history) { x.h.events["b"][0].T = 15 }},
		{"two owners in one generation", "b", func(x *history) { x.h.events["b"][0].Gen = 1 }},
		{"owner ends without revoking", "b", func(x *history) { x.h.events["b"] = x.h.events["b"][:2] }},
		{"committed record processed again", "c", func(x *history) {
			x.h.records[0][2] = append(x.h.records[0][2], processing{worker: "b", t: 21, key: "k2"})
		}},
		{"commit from an older generation than the assignment", "e", func(x *history) { x.h.events["b"][1].Gen = 1 }},
		{"commit goes backwards", "d", func(x *history) { x.h.events["b"][1].Offset = 2 }},
		{"group ends below the last commit", "d", func(x *history) { x.final = 3 }},
		{"fenced member's commit accepted while the new owner holds the partition", "e", func(x *history) {
			x.h.events["a"] = append(x.h.events["a"][:2], workerLine{Kind: "commit", T0: 25, T: 26, Gen: 1, Offset: 3, OK: true},
				workerLine{Kind: "lost", T: 27, Partitions: []int32{0}})
		}},
		{"commit accepted after giving the partition up", "e", func(x *history) {
			x.h.events["a"] = append(x.h.events["a"], workerLine{Kind: "commit", T0: 25, T: 26, Gen: 1, Offset: 3, OK: true})
		}},
	} {
		x := clean()
		tc.plant(x)
		r := check(x)
		require.Positive(t, r.violationsByCheck[tc.check], "%s: not found by check (%s); violations: %v", tc.name, tc.check, r.violations)
	}

	// A duplicate after a SIGKILL is expected, and counted as such.
	x := clean()
	x.h.workers["a"].killedAt = time.Unix(0, 14)
	x.h.events["a"] = x.h.events["a"][:1]
	x.h.records[0][2] = append(x.h.records[0][2], processing{worker: "b", t: 21, key: "k2"})
	r = check(x)
	require.Empty(t, r.violations)
	require.Equal(t, map[string]int{"killed": 1}, r.dupCause)
}
