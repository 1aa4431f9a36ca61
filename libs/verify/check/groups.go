package check

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// window is one member's ownership of one partition.
type window struct {
	gen        int // index into History.Generations
	member     string
	start, end int64 // end math.MaxInt64: owned at the end of the run
}

// checkOwnership finds two members of a group owning one partition at once:
// in one generation for the classic protocol, for longer than
// Options.OwnershipSlack for the consumer protocol.
func (c *checker) checkOwnership() {
	type key struct {
		group, protocol string
		tp              TopicPartition
		generation      int32 // classic only
	}
	windows := map[key][]window{}
	for gi, g := range c.h.Generations {
		if g.Protocol == ProtocolConsumer && c.o.OwnershipSlack <= 0 {
			continue
		}
		member := g.Member
		if member == "" {
			member = fmt.Sprintf("process %d", g.Process)
		}
		end := g.End
		if end == 0 {
			end = math.MaxInt64
		}
		for _, tp := range g.Partitions {
			k := key{group: g.Group, protocol: g.Protocol, tp: tp}
			if g.Protocol == ProtocolClassic {
				k.generation = g.Generation
			}
			windows[k] = append(windows[k], window{gen: gi, member: member, start: g.Start, end: end})
		}
	}
	for k, ws := range windows {
		if len(ws) < 2 {
			continue
		}
		slices.SortFunc(ws, func(a, b window) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.gen, b.gen)) })
		// best ends last; second ends last among other members than best's.
		best, second := -1, -1
		for i, w := range ws {
			other := best
			if best >= 0 && ws[best].member == w.member {
				other = second
			}
			if other >= 0 {
				o := ws[other]
				overlap := min(o.end, w.end) - w.start
				if (k.protocol == ProtocolClassic && w.start < o.end) ||
					(k.protocol == ProtocolConsumer && overlap > int64(c.o.OwnershipSlack)) {
					c.reportOwnership(k.group, k.tp, o, w, overlap)
				}
			}
			switch {
			case best < 0:
				best = i
			case ws[best].member == w.member:
				if w.end > ws[best].end {
					best = i
				}
			case w.end > ws[best].end:
				best, second = i, best
			case second < 0 || w.end > ws[second].end:
				second = i
			}
		}
	}
}

func (c *checker) reportOwnership(group string, tp TopicPartition, a, b window, overlap int64) {
	ga, gb := c.h.Generations[a.gen], c.h.Generations[b.gen]
	what := fmt.Sprintf("in generation %d (classic protocol)", ga.Generation)
	hint := "the coordinator must not hand one generation's partition to two members"
	if ga.Protocol == ProtocolConsumer {
		what = fmt.Sprintf("at member epochs %d and %d (consumer protocol) for %s, more than the allowed %s",
			ga.Generation, gb.Generation, time.Duration(overlap), c.o.OwnershipSlack)
		hint = "a partition must be revoked from its owner before another member gets it"
	}
	c.add(Anomaly{Kind: DoubleOwnership, Group: group, Topic: tp.Topic, Partition: tp.Partition, Offset: NoOffset,
		Txn: -1, Poll: -1, Processes: []int{ga.Process, gb.Process},
		Msg: fmt.Sprintf("group %s: members %s (process %d) and %s (process %d) both owned %s %s, from %d: "+
			"two consumers process the same records; %s", group, a.member, ga.Process, b.member, gb.Process, tp,
			what, b.start, hint)})
}

// gcEvent is an offset commit (acknowledged or not) or an OffsetFetch answer.
type gcEvent struct {
	start, time int64
	offset      int64
	process     int
	src         string // "commit N" or "txn N"
}

// checkGroupCommits finds committed offsets read back lower than the last
// acknowledged commit before the read, when no commit of the lower offset
// could have landed after it and no allowed reset lies between.
func (c *checker) checkGroupCommits() {
	type key struct {
		group string
		tp    TopicPartition
	}
	type perTP struct {
		acked   []gcEvent       // sorted by time
		fetches []gcEvent       // sorted by start
		okTime  map[int64]int64 // offset -> latest ack time of a commit of it
		infoAt  map[int64]int64 // offset -> earliest start of an unanswered commit of it
	}
	groups := map[key]*perTP{}
	get := func(k key) *perTP {
		g := groups[k]
		if g == nil {
			g = &perTP{okTime: map[int64]int64{}, infoAt: map[int64]int64{}}
			groups[k] = g
		}
		return g
	}
	commit := func(g *perTP, e gcEvent, outcome Outcome) {
		switch outcome {
		case OK:
			g.acked = append(g.acked, e)
			if t, ok := g.okTime[e.offset]; !ok || e.time > t {
				g.okTime[e.offset] = e.time
			}
		case Info:
			if t, ok := g.infoAt[e.offset]; !ok || e.start < t {
				g.infoAt[e.offset] = e.start
			}
		}
	}
	for i, gc := range c.h.Commits {
		start := gc.Start
		switch {
		case start != 0:
		case gc.Kind == CommitAcked && gc.Outcome == Info:
			// An unanswered commit sent at an unknown time may have landed
			// before any fetch was answered.
			start = math.MinInt64
		default:
			start = gc.Time
		}
		e := gcEvent{start: start, time: gc.Time, offset: gc.Offset, process: gc.Process,
			src: fmt.Sprintf("commit %d", i)}
		g := get(key{gc.Group, gc.TopicPartition})
		switch {
		case gc.Kind == CommitAcked:
			commit(g, e, gc.Outcome)
		case gc.Outcome == OK:
			g.fetches = append(g.fetches, e)
		}
	}
	for i, t := range c.h.Txns {
		if len(t.Offsets) == 0 || t.End == 0 || c.status[i] == aborted {
			continue
		}
		outcome := Info
		if c.status[i] == committed {
			outcome = OK
		}
		start := cmp.Or(t.CommitStart, t.Start, t.End)
		for _, o := range t.Offsets {
			commit(get(key{o.Group, TopicPartition{o.Topic, o.Partition}}),
				gcEvent{start: start, time: t.End, offset: o.Offset, process: t.Process, src: fmt.Sprintf("txn %d", i)},
				outcome)
		}
	}
	for k, g := range groups {
		if len(g.fetches) == 0 || len(g.acked) == 0 {
			continue
		}
		slices.SortStableFunc(g.acked, func(a, b gcEvent) int { return cmp.Compare(a.time, b.time) })
		resets := c.resetTimes(k.group, k.tp)
		for _, f := range g.fetches {
			// The last commit acknowledged before the fetch was sent.
			n, _ := slices.BinarySearchFunc(g.acked, f.start, func(e gcEvent, t int64) int { return cmp.Compare(e.time, t) })
			if n == 0 {
				continue
			}
			last := g.acked[n-1]
			if f.offset >= last.offset {
				continue
			}
			if t, ok := g.okTime[f.offset]; ok && t > last.start {
				continue // a commit of that offset may have landed after it
			}
			if t, ok := g.infoAt[f.offset]; ok && t < f.time {
				continue // an unanswered commit of that offset may have landed
			}
			r, _ := slices.BinarySearch(resets, last.start)
			if r < len(resets) && resets[r] < f.time {
				continue // an allowed reset lies between
			}
			c.add(Anomaly{Kind: CommitRegression, Group: k.group, Topic: k.tp.Topic, Partition: k.tp.Partition,
				Offset: f.offset, Offsets: []int64{last.offset, f.offset}, Txn: -1, Poll: -1,
				Processes: []int{f.process, last.process},
				Msg: fmt.Sprintf("group %s: OffsetFetch by process %d (answered at %d) returned committed offset %d "+
					"for %s, but %s (process %d) had committed %d, acknowledged at %d, and no commit of %d or reset "+
					"came after it: committed progress went backwards, so records would be processed again; look "+
					"for an offsets log not replayed or a stale commit accepted", k.group, f.process, f.time,
					f.offset, k.tp, last.src, last.process, last.offset, last.time, f.offset)})
		}
	}
}

// resetTimes returns the sorted times of the allowed resets of a group's
// partition.
func (c *checker) resetTimes(group string, tp TopicPartition) []int64 {
	var out []int64
	for _, r := range c.o.Resets {
		if r.Group == group && (r.Topic == "" || (r.Topic == tp.Topic && (r.Partition == -1 || r.Partition == tp.Partition))) {
			out = append(out, r.Time)
		}
	}
	slices.Sort(out)
	return out
}
