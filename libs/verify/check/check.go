package check

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// status is what the history says about a transaction.
type status uint8

const (
	committed status = iota + 1
	aborted
	indeterminate
)

func statusOf(t Txn) status {
	switch {
	case t.Outcome == Fail || !t.Commit:
		return aborted
	case t.Outcome == OK:
		return committed
	default:
		return indeterminate
	}
}

// vkey identifies a value: values are unique per topic.
type vkey struct{ topic, value string }

// vid numbers the distinct values of a history, so the per-read work is one
// string-keyed lookup and the rest indexes slices and small integer maps.
type vid = int32

// vinfo is what the history says about one value.
type vinfo struct {
	key vkey
	// txn is the transaction that sent the value, -1 if none did.
	txn  int
	send Send
	// rcSeen says a read_committed reader returned it.
	rcSeen bool
	// ruAt is where a read_uncommitted reader first found it in the
	// partition it was sent to (NoOffset if none did): an offset for values
	// no one acknowledged.
	ruAt int64
	// at is the first offset it was found at (read_committed reads and
	// acknowledgements of transactions not known to have aborted), if hasAt.
	at    tpOffset
	hasAt bool
}

// segment is a stretch of one consumer's reads of one partition with no seek
// in between: the consumer read past every offset in [lo, hi).
type segment struct {
	process int
	iso     Isolation
	tp      TopicPartition
	lo, hi  int64 // lo is NoOffset until known
	last    int64 // last offset read, -1 before the first read
	final   bool
	poll    int // first poll of the segment
	values  map[vid]struct{}
}

type segKey struct {
	process int
	iso     Isolation
	tp      TopicPartition
}

type tpOffset struct {
	tp     TopicPartition
	offset int64
}

type checker struct {
	h   History
	o   Options
	res Result
	// warnings collects Unseen and PlainDuplicate reports.
	warnings []Anomaly
	ids      map[vkey]vid
	vals     []vinfo
	// topics with at least one recorded send.
	written map[string]bool
	status  []status
	// readerSeen holds the values each read_committed consumer returned.
	readerSeen map[int]map[vid]struct{}
	// atOffset holds the first value read or acknowledged per offset;
	// conflicts every distinct value of offsets that hold more than one.
	atOffset  map[tpOffset]vid
	conflicts map[tpOffset][]vid
	// moreAt holds the further offsets of values found at more than one.
	moreAt   map[vid][]tpOffset
	segments []*segment
	// agg merges anomalies about one value (one per kind and value, listing
	// every consumer involved).
	agg map[aggKey]int
	// known holds, per partition, the values of transactions not known to
	// have aborted whose offset is known, sorted by offset.
	known map[TopicPartition][]candidate
	// seenTxn says a read_committed reader returned a value of the txn.
	seenTxn []bool
}

type aggKey struct {
	kind Kind
	v    vid
}

// Check checks a history. The error reports a malformed history (a missing
// outcome or isolation, a value sent twice) or bad options; anomalies are in
// the Result.
func Check(h History, o Options) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	sends := 0
	for _, t := range h.Txns {
		sends += len(t.Sends)
	}
	if err := validate(h); err != nil {
		return Result{}, err
	}
	c := &checker{
		h:          h,
		o:          o,
		ids:        make(map[vkey]vid, sends),
		vals:       make([]vinfo, 0, sends),
		written:    map[string]bool{},
		readerSeen: map[int]map[vid]struct{}{},
		atOffset:   map[tpOffset]vid{},
		conflicts:  map[tpOffset][]vid{},
		moreAt:     map[vid][]tpOffset{},
		agg:        map[aggKey]int{},
	}
	if err := c.indexWrites(); err != nil {
		return Result{}, err
	}
	if err := c.indexReads(); err != nil {
		return Result{}, err
	}
	c.checkOffsets()
	c.checkSends()
	c.checkCoverage()
	c.checkOffsetCommits()
	if err := c.checkCopies(); err != nil {
		return Result{}, err
	}
	c.checkG1c()
	c.checkOwnership()
	c.checkGroupCommits()
	c.checkZombies()
	c.res.Anomalies, c.res.AnomalyCounts = bound(c.res.Anomalies, o.maxExamples())
	c.res.Warnings, c.res.WarningCounts = bound(c.warnings, o.maxExamples())
	return c.res, nil
}

// bound sorts anomalies, counts them per kind and keeps at most n per kind.
func bound(list []Anomaly, n int) ([]Anomaly, map[Kind]int) {
	slices.SortStableFunc(list, func(a, b Anomaly) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic),
			cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset),
			cmp.Compare(a.Value, b.Value), cmp.Compare(a.Txn, b.Txn))
	})
	counts := map[Kind]int{}
	kept := list[:0]
	for _, a := range list {
		counts[a.Kind]++
		if counts[a.Kind] <= n {
			kept = append(kept, a)
		}
	}
	if kept == nil {
		kept = []Anomaly{}
	}
	return kept, counts
}

// warn records a warning; an Unseen one is an anomaly with
// Options.FailUnseen.
func (c *checker) warn(a Anomaly) {
	if a.Kind == Unseen && c.o.FailUnseen {
		c.add(a)
		return
	}
	c.warnings = append(c.warnings, a)
}

// id returns the number of a value, numbering it if new.
func (c *checker) id(v vkey) vid {
	if id, ok := c.ids[v]; ok {
		return id
	}
	id := vid(len(c.vals))
	c.ids[v] = id
	c.vals = append(c.vals, vinfo{key: v, txn: -1, ruAt: NoOffset})
	return id
}

func (c *checker) add(a Anomaly) { c.res.Anomalies = append(c.res.Anomalies, a) }

// addPerValue records an anomaly about a value once, adding the consumer to
// the existing one when the value was already reported.
func (c *checker) addPerValue(v vid, process int, a Anomaly) {
	k := aggKey{a.Kind, v}
	if i, ok := c.agg[k]; ok {
		if !slices.Contains(c.res.Anomalies[i].Processes, process) {
			c.res.Anomalies[i].Processes = append(c.res.Anomalies[i].Processes, process)
		}
		return
	}
	a.Processes = []int{process}
	c.agg[k] = len(c.res.Anomalies)
	c.add(a)
}

func (c *checker) indexWrites() error {
	c.status = make([]status, len(c.h.Txns))
	for i, t := range c.h.Txns {
		if t.Outcome < OK || t.Outcome > Info {
			return fmt.Errorf("txn %d (process %d): outcome not set", i, t.Process)
		}
		c.status[i] = statusOf(t)
		c.res.Txns++
		switch c.status[i] {
		case committed:
			c.res.Committed++
		case aborted:
			c.res.Aborted++
		default:
			c.res.Indeterminate++
		}
		for _, s := range t.Sends {
			v := c.id(vkey{s.Topic, s.Value})
			if prev := c.vals[v].txn; prev >= 0 {
				return fmt.Errorf("value %q of topic %s sent by txn %d and txn %d: values must be unique per topic",
					s.Value, s.Topic, prev, i)
			}
			if s.Acked && s.Offset < 0 {
				return fmt.Errorf("txn %d: value %q acknowledged at negative offset %d", i, s.Value, s.Offset)
			}
			c.vals[v].txn, c.vals[v].send = i, s
			c.written[s.Topic] = true
			c.res.Values++
			if s.Acked {
				c.noteOffset(tpOffset{s.TP(), s.Offset}, v)
				if c.status[i] != aborted {
					c.noteValueAt(v, tpOffset{s.TP(), s.Offset})
				}
			}
		}
	}
	return nil
}

func (c *checker) noteOffset(at tpOffset, v vid) {
	first, ok := c.atOffset[at]
	switch {
	case !ok:
		c.atOffset[at] = v
	case first != v:
		vs := c.conflicts[at]
		if vs == nil {
			vs = []vid{first}
		}
		if !slices.Contains(vs, v) {
			c.conflicts[at] = append(vs, v)
		}
	}
}

func (c *checker) noteValueAt(v vid, at tpOffset) {
	vi := &c.vals[v]
	switch {
	case !vi.hasAt:
		vi.at, vi.hasAt = at, true
	case vi.at != at && !slices.Contains(c.moreAt[v], at):
		c.moreAt[v] = append(c.moreAt[v], at)
	}
}

// offsetsOf returns every offset a value was found at.
func (c *checker) offsetsOf(v vid) []tpOffset {
	if !c.vals[v].hasAt {
		return nil
	}
	return append([]tpOffset{c.vals[v].at}, c.moreAt[v]...)
}

// indexReads walks the polls in order: it records what each read shows,
// checks reads one at a time (aborted, precommitted and garbage reads) and
// cuts each consumer's reads into segments.
func (c *checker) indexReads() error {
	cur := map[segKey]*segment{}
	abortedSeenRU := map[vid]bool{}
	open := func(k segKey, lo int64, poll int) *segment {
		if s := cur[k]; s != nil {
			c.segments = append(c.segments, s)
		}
		s := &segment{process: k.process, iso: k.iso, tp: k.tp, lo: lo, hi: lo, last: -1, poll: poll,
			values: map[vid]struct{}{}}
		cur[k] = s
		return s
	}
	for pi, p := range c.h.Polls {
		if p.Isolation != ReadCommitted && p.Isolation != ReadUncommitted {
			return fmt.Errorf("poll %d (process %d): isolation not set", pi, p.Process)
		}
		c.res.Polls++
		for _, sk := range p.Seeks {
			open(segKey{p.Process, p.Isolation, TopicPartition{sk.Topic, sk.Partition}}, sk.Offset, pi)
		}
		for _, r := range p.Reads {
			c.res.Reads++
			k := segKey{p.Process, p.Isolation, r.TP()}
			s := cur[k]
			if s == nil {
				s = open(k, NoOffset, pi)
			}
			if (s.last >= 0 && r.Offset <= s.last) || (s.lo != NoOffset && r.Offset < s.lo) {
				prev := s.last
				if prev < 0 {
					prev = s.lo
				}
				c.add(Anomaly{Kind: NonMonotonicPoll, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
					Offsets: []int64{prev, r.Offset}, Value: r.Value, Txn: -1, Poll: pi, Processes: []int{p.Process},
					Msg: fmt.Sprintf("consumer %d (%s) read %s offset %d after offset %d in poll %d with no seek",
						p.Process, p.Isolation, r.TP(), r.Offset, prev, pi)})
				// Start over, so one step back is one anomaly and not a
				// cascade of misses.
				s = open(k, r.Offset, pi)
			}
			if s.lo == NoOffset {
				s.lo = r.Offset
			}
			s.last = r.Offset
			s.hi = max(s.hi, r.Offset+1)
			v := c.id(vkey{r.Topic, r.Value})
			s.values[v] = struct{}{}
			c.readOne(pi, p, r, v, abortedSeenRU)
		}
		for _, e := range p.Ends {
			k := segKey{p.Process, p.Isolation, TopicPartition{e.Topic, e.Partition}}
			s := cur[k]
			if s == nil {
				s = open(k, NoOffset, pi)
			}
			if s.lo == NoOffset && e.Offset >= 0 {
				// A position with nothing read yet is where the next read
				// must come from.
				s.lo, s.hi = e.Offset, e.Offset
			}
			s.hi = max(s.hi, e.Offset)
			if p.Final {
				s.final = true
			}
		}
	}
	for _, s := range cur {
		c.segments = append(c.segments, s)
	}
	slices.SortFunc(c.segments, func(a, b *segment) int {
		return cmp.Or(cmp.Compare(a.poll, b.poll), cmp.Compare(a.tp.Topic, b.tp.Topic),
			cmp.Compare(a.tp.Partition, b.tp.Partition), cmp.Compare(a.process, b.process))
	})
	c.res.AbortedSeenUncommitted = len(abortedSeenRU)
	return nil
}

// readOne checks one read on its own and records what it shows.
func (c *checker) readOne(pi int, p Poll, r Read, v vid, abortedSeenRU map[vid]bool) {
	at := tpOffset{r.TP(), r.Offset}
	c.noteOffset(at, v)
	if p.Isolation == ReadCommitted {
		c.noteValueAt(v, at)
		c.vals[v].rcSeen = true
		seen := c.readerSeen[p.Process]
		if seen == nil {
			seen = map[vid]struct{}{}
			c.readerSeen[p.Process] = seen
		}
		seen[v] = struct{}{}
	}
	base := Anomaly{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Value: r.Value, Txn: -1, Poll: pi}
	w := &c.vals[v]
	if w.txn < 0 {
		if c.written[r.Topic] {
			a := base
			a.Kind = GarbageRead
			a.Msg = fmt.Sprintf("consumer %d read %s offset %d value %q, which no recorded send wrote",
				p.Process, r.TP(), r.Offset, r.Value)
			c.addPerValue(v, p.Process, a)
		}
		return
	}
	base.Txn = w.txn
	if w.send.Partition != r.Partition || w.send.Key != r.Key {
		a := base
		a.Kind = GarbageRead
		a.Msg = fmt.Sprintf("consumer %d read value %q with key %q from %s offset %d; txn %d sent it with key %q to %s",
			p.Process, r.Value, r.Key, r.TP(), r.Offset, w.txn, w.send.Key, w.send.TP())
		c.addPerValue(v, p.Process, a)
	}
	t := c.h.Txns[w.txn]
	if p.Isolation == ReadUncommitted {
		if w.ruAt == NoOffset && w.send.Partition == r.Partition {
			w.ruAt = r.Offset
		}
		if c.status[w.txn] == aborted {
			abortedSeenRU[v] = true
		}
		if p.End != 0 && t.Start != 0 && p.End < t.Start {
			a := base
			a.Kind = PrecommittedRead
			a.Msg = fmt.Sprintf("consumer %d (read_uncommitted) poll %d ended at %d but read value %q of txn %d, "+
				"which began at %d", p.Process, pi, p.End, r.Value, w.txn, t.Start)
			c.addPerValue(v, p.Process, a)
		}
		return
	}
	if c.status[w.txn] == aborted {
		a := base
		a.Kind = AbortedRead
		a.Msg = fmt.Sprintf("consumer %d (read_committed) read value %q at %s offset %d, written by txn %d "+
			"(process %d, asked to %s, %s)", p.Process, r.Value, r.TP(), r.Offset, w.txn, t.Process,
			commitWord(t.Commit), t.Outcome)
		c.addPerValue(v, p.Process, a)
	}
	limit, what := t.CommitStart, "asked to commit"
	if limit == 0 {
		limit, what = t.Start, "began"
	}
	if p.End != 0 && limit != 0 && p.End < limit {
		a := base
		a.Kind = PrecommittedRead
		a.Msg = fmt.Sprintf("consumer %d (read_committed) poll %d ended at %d but read value %q of txn %d, which %s at %d",
			p.Process, pi, p.End, r.Value, w.txn, what, limit)
		c.addPerValue(v, p.Process, a)
	}
}

func commitWord(commit bool) string {
	if commit {
		return "commit"
	}
	return "abort"
}

// checkOffsets finds offsets holding two values and values at two offsets.
func (c *checker) checkOffsets() {
	for at, ids := range c.conflicts {
		vals := make([]string, len(ids))
		for i, v := range ids {
			vals[i] = c.vals[v].key.value
		}
		slices.Sort(vals)
		c.add(Anomaly{Kind: InconsistentOffsets, Topic: at.tp.Topic, Partition: at.tp.Partition, Offset: at.offset,
			Values: vals, Txn: -1, Poll: -1,
			Msg: fmt.Sprintf("%s offset %d holds %d values: %s", at.tp, at.offset, len(vals), quoteAll(vals))})
	}
	for v := range c.moreAt {
		ats := c.offsetsOf(v)
		slices.SortFunc(ats, func(a, b tpOffset) int {
			return cmp.Or(cmp.Compare(a.tp.Partition, b.tp.Partition), cmp.Compare(a.offset, b.offset))
		})
		offs := make([]int64, len(ats))
		where := make([]string, len(ats))
		for i, at := range ats {
			offs[i] = at.offset
			where[i] = fmt.Sprintf("%s@%d", at.tp, at.offset)
		}
		k := c.vals[v].key
		a := Anomaly{Kind: Duplicate, Topic: k.topic, Partition: ats[0].tp.Partition, Offset: ats[0].offset,
			Offsets: offs, Value: k.value, Txn: c.vals[v].txn, Poll: -1,
			Msg: fmt.Sprintf("value %q of topic %s is at %d offsets: %s", k.value, k.topic, len(ats),
				strings.Join(where, ", "))}
		if t := c.vals[v].txn; t >= 0 && !c.h.Txns[t].Idempotent && !c.h.Txns[t].Transactional() {
			// A plain producer's retry may append a batch twice.
			a.Kind = PlainDuplicate
			a.Processes = []int{c.h.Txns[t].Process}
			a.Msg += fmt.Sprintf(" (plain producer %d: retries without idempotence may write twice)",
				c.h.Txns[t].Process)
			c.warn(a)
			continue
		}
		c.add(a)
	}
}

// checkSends checks that each producer's acknowledged offsets grow in send
// order per partition.
func (c *checker) checkSends() {
	type pk struct {
		process int
		tp      TopicPartition
	}
	last := map[pk]Send{}
	for i, t := range c.h.Txns {
		for _, s := range t.Sends {
			if !s.Acked {
				continue
			}
			k := pk{t.Process, s.TP()}
			if prev, ok := last[k]; ok && s.Offset <= prev.Offset {
				c.add(Anomaly{Kind: NonMonotonicSend, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset,
					Offsets: []int64{prev.Offset, s.Offset}, Value: s.Value, Txn: i, Poll: -1,
					Processes: []int{t.Process},
					Msg: fmt.Sprintf("producer %d sent %q (txn %d) to %s at offset %d after %q at offset %d",
						t.Process, s.Value, i, s.TP(), s.Offset, prev.Value, prev.Offset)})
			}
			last[k] = s
		}
	}
}

type candidate struct {
	offset int64
	v      vid
	txn    int
}

// checkCoverage finds values of transactions not known to have aborted that
// a read_committed segment read past without returning, and sorts them into
// lost writes and torn transactions.
func (c *checker) checkCoverage() {
	seenTxn := make([]bool, len(c.h.Txns))
	c.seenTxn = seenTxn
	for _, w := range c.vals {
		if w.rcSeen && w.txn >= 0 {
			seenTxn[w.txn] = true
		}
	}
	for i, st := range c.status {
		if st == indeterminate && seenTxn[i] {
			c.res.IndeterminateSeen++
		}
	}

	// Candidates per partition: known offsets sorted, unknown apart.
	known := map[TopicPartition][]candidate{}
	unknown := map[TopicPartition][]candidate{}
	for i, w := range c.vals {
		v := vid(i)
		if w.txn < 0 || c.status[w.txn] == aborted {
			continue
		}
		tp := w.send.TP()
		off := NoOffset
		if w.send.Acked {
			off = w.send.Offset
		} else {
			for _, at := range c.offsetsOf(v) {
				if at.tp == tp && (off == NoOffset || at.offset < off) {
					off = at.offset
				}
			}
			if off == NoOffset {
				off = w.ruAt
			}
		}
		if off == NoOffset {
			unknown[tp] = append(unknown[tp], candidate{NoOffset, v, w.txn})
		} else {
			known[tp] = append(known[tp], candidate{off, v, w.txn})
		}
		if (c.status[w.txn] == committed || seenTxn[w.txn]) && !w.rcSeen {
			c.res.Unread++
			if len(c.res.UnreadValues) < 100 {
				c.res.UnreadValues = append(c.res.UnreadValues, w.key.value)
			}
		}
	}
	for _, cs := range known {
		slices.SortFunc(cs, func(a, b candidate) int { return cmp.Compare(a.offset, b.offset) })
	}
	c.known = known
	sort.Strings(c.res.UnreadValues)
	// covered marks values a read_committed segment read past or returned.
	covered := make([]bool, len(c.vals))

	type txnProc struct{ txn, process int }
	missed := map[txnProc]map[vid]int64{}
	miss := func(s *segment, cd candidate) {
		covered[cd.v] = true
		if _, ok := s.values[cd.v]; ok {
			return
		}
		if _, ok := c.conflicts[tpOffset{s.tp, cd.offset}]; ok && cd.offset != NoOffset {
			// Reported as inconsistent offsets: which value the reader
			// should have returned is unknown.
			return
		}
		k := txnProc{cd.txn, s.process}
		if missed[k] == nil {
			missed[k] = map[vid]int64{}
		}
		missed[k][cd.v] = cd.offset
	}
	for _, s := range c.segments {
		if s.iso != ReadCommitted || s.lo == NoOffset {
			continue
		}
		cs := known[s.tp]
		whole := s.final && s.lo == 0
		from := sort.Search(len(cs), func(i int) bool { return cs[i].offset >= s.lo })
		for _, cd := range cs[from:] {
			if cd.offset >= s.hi && !whole {
				break
			}
			miss(s, cd)
		}
		if whole {
			for _, cd := range unknown[s.tp] {
				miss(s, cd)
			}
		}
	}

	keys := make([]txnProc, 0, len(missed))
	for k := range missed {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b txnProc) int {
		return cmp.Or(cmp.Compare(a.txn, b.txn), cmp.Compare(a.process, b.process))
	})
	torn := map[int]int{} // txn -> anomaly index
	for _, k := range keys {
		t := c.h.Txns[k.txn]
		var saw, lost []string
		var lostSends []Send
		for _, s := range t.Sends {
			v := c.ids[vkey{s.Topic, s.Value}]
			if _, ok := c.readerSeen[k.process][v]; ok {
				saw = append(saw, s.Value)
			}
			if off, ok := missed[k][v]; ok {
				lost = append(lost, s.Value)
				s.Offset = off
				lostSends = append(lostSends, s)
			}
		}
		switch {
		case len(saw) > 0:
			i, ok := torn[k.txn]
			if !ok {
				i = len(c.res.Anomalies)
				torn[k.txn] = i
				c.add(Anomaly{Kind: TornTxn, Topic: t.Sends[0].Topic, Partition: t.Sends[0].Partition,
					Offset: NoOffset, Txn: k.txn, Poll: -1})
			}
			a := &c.res.Anomalies[i]
			a.Processes = append(a.Processes, k.process)
			a.Values = union(a.Values, saw)
			a.Missed = union(a.Missed, lost)
			a.Msg = fmt.Sprintf("txn %d (process %d, %s): read_committed consumers %v saw %s but read past %s",
				k.txn, t.Process, describe(c.status[k.txn]), a.Processes, quoteAll(a.Values), quoteAll(a.Missed))
		case c.status[k.txn] == committed || seenTxn[k.txn]:
			for _, s := range lostSends {
				off := s.Offset
				c.addPerValue(c.ids[vkey{s.Topic, s.Value}], k.process, Anomaly{Kind: LostWrite, Topic: s.Topic,
					Partition: s.Partition, Offset: off, Value: s.Value, Txn: k.txn, Poll: -1,
					Msg: fmt.Sprintf("value %q of txn %d (process %d, %s) at %s offset %s was read past by "+
						"read_committed consumers without being returned", s.Value, k.txn, t.Process,
						describe(c.status[k.txn]), s.TP(), offsetString(off))})
			}
		}
	}
	c.checkUnseen(known, unknown, covered)
	// Name every consumer in lost-write messages, now that all are known.
	for i := range c.res.Anomalies {
		a := &c.res.Anomalies[i]
		if a.Kind == LostWrite {
			a.Msg += fmt.Sprintf(" (consumers %v)", a.Processes)
		}
	}
}

func describe(s status) string {
	switch s {
	case committed:
		return "committed"
	case aborted:
		return "aborted"
	}
	return "indeterminate"
}

func offsetString(off int64) string {
	if off == NoOffset {
		return "unknown"
	}
	return fmt.Sprint(off)
}

func union(a, b []string) []string {
	for _, v := range b {
		if !slices.Contains(a, v) {
			a = append(a, v)
		}
	}
	return a
}

func quoteAll(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(q, " ") + "]"
}

// checkOffsetCommits finds consumers of a group positioned below an offset a
// committed transaction had already committed for the group.
func (c *checker) checkOffsetCommits() {
	type gk struct {
		group string
		tp    TopicPartition
	}
	type commit struct {
		end, offset int64
		txn         int
	}
	commits := map[gk][]commit{}
	for i, t := range c.h.Txns {
		if c.status[i] != committed || t.End == 0 {
			continue
		}
		for _, o := range t.Offsets {
			k := gk{o.Group, TopicPartition{o.Topic, o.Partition}}
			commits[k] = append(commits[k], commit{t.End, o.Offset, i})
		}
	}
	for _, cs := range commits {
		slices.SortFunc(cs, func(a, b commit) int { return cmp.Compare(a.end, b.end) })
		// Keep a running maximum, so one search finds the highest offset
		// committed before a time.
		for i := 1; i < len(cs); i++ {
			if cs[i].offset < cs[i-1].offset {
				cs[i].offset, cs[i].txn = cs[i-1].offset, cs[i-1].txn
			}
		}
	}
	for pi, p := range c.h.Polls {
		if p.Group == "" || p.Start == 0 {
			continue
		}
		for _, sk := range p.Seeks {
			if sk.Offset == NoOffset {
				continue
			}
			tp := TopicPartition{sk.Topic, sk.Partition}
			cs := commits[gk{p.Group, tp}]
			n := sort.Search(len(cs), func(i int) bool { return cs[i].end >= p.Start })
			if n == 0 || sk.Offset >= cs[n-1].offset {
				continue
			}
			best := cs[n-1]
			c.add(Anomaly{Kind: OffsetRegression, Topic: tp.Topic, Partition: tp.Partition, Offset: sk.Offset,
				Offsets: []int64{best.offset, sk.Offset}, Txn: best.txn, Poll: pi, Processes: []int{p.Process},
				Msg: fmt.Sprintf("consumer %d of group %s started %s at offset %d in poll %d, but txn %d had "+
					"committed offset %d for it at %d", p.Process, p.Group, tp, sk.Offset, pi, best.txn,
					best.offset, best.end)})
		}
	}
}

// checkCopies runs the exactly-once copy check of each Copy.
func (c *checker) checkCopies() error {
	for ci, cp := range c.h.Copies {
		if cp.Output == "" {
			return fmt.Errorf("copy %d: no output topic", ci)
		}
		mapv := cp.Map
		if mapv == nil {
			mapv = func(s string) string { return s }
		}
		count := make(map[string][]tpOffset, len(cp.Input))
		for _, in := range cp.Input {
			if _, dup := count[in]; dup {
				return fmt.Errorf("copy %d: input value %q listed twice", ci, in)
			}
			count[in] = nil
		}
		rc := map[tpOffset]string{}
		ru := map[tpOffset]bool{}
		for _, p := range c.h.Polls {
			for _, r := range p.Reads {
				if r.Topic != cp.Output {
					continue
				}
				at := tpOffset{r.TP(), r.Offset}
				if p.Isolation == ReadUncommitted {
					ru[at] = true
					continue
				}
				if _, ok := rc[at]; !ok {
					rc[at] = r.Value
				}
			}
		}
		res := CopyResult{Output: cp.Output, Inputs: len(cp.Input)}
		ats := make([]tpOffset, 0, len(rc))
		for at := range rc {
			ats = append(ats, at)
		}
		slices.SortFunc(ats, func(a, b tpOffset) int {
			return cmp.Or(cmp.Compare(a.tp.Partition, b.tp.Partition), cmp.Compare(a.offset, b.offset))
		})
		for _, at := range ats {
			in := mapv(rc[at])
			ins, ok := count[in]
			if !ok {
				res.Unexpected++
				c.add(Anomaly{Kind: CopyUnexpected, Topic: at.tp.Topic, Partition: at.tp.Partition, Offset: at.offset,
					Value: rc[at], Txn: -1, Poll: -1,
					Msg: fmt.Sprintf("%s offset %d holds %q, which copies no input value", at.tp, at.offset, rc[at])})
				continue
			}
			count[in] = append(ins, at)
		}
		for at := range ru {
			if _, ok := rc[at]; !ok {
				res.UncommittedOnly++
			}
		}
		for _, in := range cp.Input {
			ats := count[in]
			switch {
			case len(ats) == 0:
				res.Missing++
				c.add(Anomaly{Kind: CopyMissing, Topic: cp.Output, Offset: NoOffset, Value: in, Txn: -1, Poll: -1,
					Msg: fmt.Sprintf("input value %q is not in %s", in, cp.Output)})
			case len(ats) > 1:
				res.Duplicated++
				offs := make([]int64, len(ats))
				where := make([]string, len(ats))
				for i, at := range ats {
					offs[i] = at.offset
					where[i] = fmt.Sprintf("%s@%d", at.tp, at.offset)
				}
				c.add(Anomaly{Kind: CopyDuplicate, Topic: cp.Output, Partition: ats[0].tp.Partition,
					Offset: ats[0].offset, Offsets: offs, Value: in, Txn: -1, Poll: -1,
					Msg: fmt.Sprintf("input value %q is in %s %d times: %s", in, cp.Output, len(ats),
						strings.Join(where, ", "))})
			default:
				res.Copied++
			}
		}
		c.res.Copies = append(c.res.Copies, res)
	}
	return nil
}

// checkUnseen warns about values of committed transactions that no
// read_committed reader returned or read past: nothing judged them.
func (c *checker) checkUnseen(known, unknown map[TopicPartition][]candidate, covered []bool) {
	report := func(cd candidate, tp TopicPartition) {
		w := c.vals[cd.v]
		if covered[cd.v] || w.rcSeen || !(c.status[cd.txn] == committed || c.seenTxn[cd.txn]) {
			return
		}
		t := c.h.Txns[cd.txn]
		c.warn(Anomaly{Kind: Unseen, Topic: tp.Topic, Partition: tp.Partition, Offset: cd.offset, Value: w.key.value,
			Txn: cd.txn, Poll: -1, Processes: []int{t.Process},
			Msg: fmt.Sprintf("value %q of txn %d (process %d, %s) at %s offset %s: no read_committed reader returned it "+
				"or read past it, so nothing shows whether it survived; a final read of %s from offset 0 judges it",
				w.key.value, cd.txn, t.Process, describe(c.status[cd.txn]), tp, offsetString(cd.offset), tp)})
	}
	for tp, cs := range known {
		for _, cd := range cs {
			report(cd, tp)
		}
	}
	for tp, cs := range unknown {
		for _, cd := range cs {
			report(cd, tp)
		}
	}
}
