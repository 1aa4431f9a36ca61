package check

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The simulator runs producers and consumers against a correct model of
// transactional partitions (records, COMMIT/ABORT markers, a last stable
// offset, aborted records hidden from read_committed) and records what the
// clients see. With no fault every history must be valid; each fault plants
// one bug in the log or the readers that the checker must find.

type fault int

const (
	noFault fault = iota
	// exposeAbort: an aborted transaction is committed on the log (a late
	// EndTxn committing the next transaction).
	exposeAbort
	// dropCommitted: a committed transaction's records vanish from
	// read_committed reads.
	dropCommitted
	// halfApply: a committed transaction over two partitions is aborted in
	// one of them.
	halfApply
	// tornInPartition: one of two records of a committed transaction in one
	// partition vanishes from read_committed reads.
	tornInPartition
	// duplicate: a record is appended twice.
	duplicate
	// halfInfo: an indeterminate transaction commits in one partition and
	// aborts in another.
	halfInfo
	// reorderPoll: a consumer returns two records of a partition out of order.
	reorderPoll
	// wrongValue: a reader returns another value at an offset.
	wrongValue
)

func (f fault) String() string {
	return [...]string{"none", "expose-abort", "drop-committed", "half-apply", "torn-in-partition", "duplicate",
		"half-info", "reorder-poll", "wrong-value"}[f]
}

type simEntry struct {
	value, key string
	txn        int
	marker     bool
	hidden     bool
}

type simPart struct {
	log []simEntry
	// open maps a transaction to its first offset in the partition.
	open map[int]int64
	// committed holds the marker decision per transaction.
	committed map[int]bool
}

func (p *simPart) lso() int64 {
	lso := int64(len(p.log))
	for _, first := range p.open {
		lso = min(lso, first)
	}
	return lso
}

type simTxn struct {
	rec  Txn
	plan []int32
	// want is the planned ending: commit or not, and the outcome.
	commitOnLog bool
}

type simConsumer struct {
	proc    int
	iso     Isolation
	pos     []int64
	started bool
}

type simConfig struct {
	partitions   int
	producers    int
	txnsEach     int
	consumers    int // read_committed; one read_uncommitted consumer besides
	maxSends     int
	maxPollReads int
	// pollOneIn and seekOneIn are the odds of a step being a poll and of a
	// poll seeking back in a partition.
	pollOneIn int
	seekOneIn int
}

type sim struct {
	cfg     simConfig
	rng     *rand.Rand
	fault   fault
	planted bool
	now     int64
	parts   []*simPart
	txns    []*simTxn
	h       History
	value   int
}

func (s *sim) tick() int64 { s.now++; return s.now }

func (s *sim) newTxn(proc int) *simTxn {
	n := 1 + s.rng.IntN(s.cfg.maxSends)
	t := &simTxn{rec: Txn{Process: proc, TransactionalID: tid(proc), Start: s.tick()}}
	for range n {
		t.plan = append(t.plan, int32(s.rng.IntN(s.cfg.partitions)))
	}
	// Plan the ending now so faults can pick their transaction up front.
	switch r := s.rng.Float64(); {
	case r < 0.6:
		t.rec.Commit, t.rec.Outcome, t.commitOnLog = true, OK, true
	case r < 0.75:
		t.rec.Commit, t.rec.Outcome = false, OK
	case r < 0.8:
		t.rec.Commit, t.rec.Outcome = true, Fail
	case r < 0.9:
		t.rec.Commit, t.rec.Outcome, t.commitOnLog = true, Info, s.rng.IntN(2) == 0
	default:
		t.rec.Commit, t.rec.Outcome = false, Info
	}
	s.txns = append(s.txns, t)
	return t
}

func distinct(ps []int32) []int32 {
	out := slices.Clone(ps)
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *sim) send(ti int, t *simTxn) {
	p := t.plan[len(t.rec.Sends)]
	part := s.parts[p]
	s.value++
	v := fmt.Sprintf("v%d", s.value)
	off := int64(len(part.log))
	if _, ok := part.open[ti]; !ok {
		part.open[ti] = off
	}
	e := simEntry{value: v, key: "k" + v, txn: ti}
	part.log = append(part.log, e)
	if s.fault == duplicate && !s.planted && t.rec.Outcome == OK && t.rec.Commit {
		part.log = append(part.log, e)
		s.planted = true
	}
	snd := Send{Topic: "t", Partition: p, Key: e.key, Value: v}
	if t.rec.Outcome != Info && s.rng.IntN(3) > 0 {
		snd.Acked, snd.Offset = true, off
	}
	t.rec.Sends = append(t.rec.Sends, snd)
}

func (s *sim) end(ti int, t *simTxn) {
	t.rec.CommitStart = s.tick()
	ps := distinct(t.plan)
	commit := map[int32]bool{}
	for _, p := range ps {
		commit[p] = t.commitOnLog
	}
	okCommit := t.rec.Outcome == OK && t.rec.Commit
	if !s.planted {
		switch {
		case s.fault == exposeAbort && t.rec.Outcome == OK && !t.rec.Commit:
			for _, p := range ps {
				commit[p] = true
			}
			s.planted = true
		case s.fault == dropCommitted && okCommit:
			for _, p := range ps {
				for i := range s.parts[p].log {
					if s.parts[p].log[i].txn == ti {
						s.parts[p].log[i].hidden = true
					}
				}
			}
			s.planted = true
		case s.fault == halfApply && okCommit && len(ps) > 1:
			commit[ps[0]] = false
			s.planted = true
		case s.fault == halfInfo && t.rec.Outcome == Info && t.rec.Commit && len(ps) > 1:
			commit[ps[0]], commit[ps[1]] = true, false
			s.planted = true
		case s.fault == tornInPartition && okCommit && len(t.plan) > len(ps):
			// Some partition got two records: hide the first of them.
			var log []simEntry
			for i, p := range t.plan {
				if slices.Contains(t.plan[i+1:], p) {
					log = s.parts[p].log
					break
				}
			}
			for i := range log {
				if log[i].txn == ti {
					log[i].hidden = true
					break
				}
			}
			s.planted = true
		}
	}
	for _, p := range ps {
		part := s.parts[p]
		delete(part.open, ti)
		part.committed[ti] = commit[p]
		part.log = append(part.log, simEntry{marker: true, txn: ti})
	}
	t.rec.End = s.tick()
	s.h.Txns = append(s.h.Txns, t.rec)
}

// poll reads up to maxPollReads records per partition from the consumer's
// positions, seeking first now and then.
func (s *sim) poll(c *simConsumer, all bool, final bool) {
	p := Poll{Process: c.proc, Isolation: c.iso, Start: s.tick(), Final: final}
	for pi := range s.parts {
		tp := int32(pi)
		if !c.started || (!all && s.rng.IntN(s.cfg.seekOneIn) == 0) {
			to := int64(0)
			if c.started {
				to = s.rng.Int64N(c.pos[pi] + 1)
			}
			c.pos[pi] = to
			p.Seeks = append(p.Seeks, Position{Topic: "t", Partition: tp, Offset: to})
		}
		if !all && s.rng.IntN(3) == 0 {
			continue
		}
		part := s.parts[pi]
		limit := int64(len(part.log))
		if c.iso == ReadCommitted {
			limit = part.lso()
		}
		n := 0
		for c.pos[pi] < limit && (all || n < s.cfg.maxPollReads) {
			e := part.log[c.pos[pi]]
			visible := !e.marker
			if c.iso == ReadCommitted {
				visible = visible && part.committed[e.txn] && !e.hidden
			}
			if visible {
				p.Reads = append(p.Reads, Read{Topic: "t", Partition: tp, Offset: c.pos[pi], Key: e.key, Value: e.value})
				n++
			}
			c.pos[pi]++
		}
		if all || s.rng.IntN(2) == 0 {
			p.Ends = append(p.Ends, Position{Topic: "t", Partition: tp, Offset: c.pos[pi]})
		}
	}
	c.started = true
	p.End = s.tick()
	s.h.Polls = append(s.h.Polls, p)
}

func simulate(seed uint64, cfg simConfig, f fault) *sim {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x5eed)), fault: f}
	for range cfg.partitions {
		s.parts = append(s.parts, &simPart{open: map[int]int64{}, committed: map[int]bool{}})
	}
	type prod struct {
		left int
		cur  int // index into s.txns, -1 when idle
	}
	prods := make([]*prod, cfg.producers)
	for i := range prods {
		prods[i] = &prod{left: cfg.txnsEach, cur: -1}
	}
	var cons []*simConsumer
	for i := range cfg.consumers + 1 {
		iso := ReadCommitted
		if i == cfg.consumers {
			iso = ReadUncommitted
		}
		cons = append(cons, &simConsumer{proc: 100 + i, iso: iso, pos: make([]int64, cfg.partitions)})
	}
	// Bounded: every step either polls or moves a producer forward.
	for step := 0; step < 100*cfg.producers*cfg.txnsEach*cfg.maxSends; step++ {
		busy := false
		for _, p := range prods {
			busy = busy || p.left > 0 || p.cur >= 0
		}
		if !busy {
			break
		}
		if s.rng.IntN(s.cfg.pollOneIn) == 0 {
			s.poll(cons[s.rng.IntN(len(cons))], false, false)
			continue
		}
		pi := s.rng.IntN(len(prods))
		p := prods[pi]
		switch {
		case p.cur < 0 && p.left > 0:
			s.newTxn(pi)
			p.cur = len(s.txns) - 1
			p.left--
		case p.cur >= 0:
			t := s.txns[p.cur]
			if len(t.rec.Sends) < len(t.plan) {
				s.send(p.cur, t)
			} else {
				s.end(p.cur, t)
				p.cur = -1
			}
		}
	}
	// Final reads of everything, from the start, by fresh consumers.
	s.poll(&simConsumer{proc: 200, iso: ReadCommitted, pos: make([]int64, cfg.partitions)}, true, true)
	s.poll(&simConsumer{proc: 201, iso: ReadUncommitted, pos: make([]int64, cfg.partitions)}, true, true)
	s.plantInReads()
	return s
}

// plantInReads plants the faults that live in what a consumer returns.
func (s *sim) plantInReads() {
	switch s.fault {
	case reorderPoll:
		for pi := range s.h.Polls {
			p := &s.h.Polls[pi]
			if p.Isolation != ReadCommitted || p.Final {
				continue
			}
			for i := 1; i < len(p.Reads); i++ {
				if p.Reads[i].TP() == p.Reads[i-1].TP() {
					p.Reads[i], p.Reads[i-1] = p.Reads[i-1], p.Reads[i]
					s.planted = true
					return
				}
			}
		}
	case wrongValue:
		p := &s.h.Polls[len(s.h.Polls)-1] // the final read_uncommitted read
		for i := 1; i < len(p.Reads); i++ {
			if p.Reads[i].TP() == p.Reads[i-1].TP() {
				p.Reads[i].Value, p.Reads[i].Key = p.Reads[i-1].Value, p.Reads[i-1].Key
				s.planted = true
				return
			}
		}
	}
}

var smallSim = simConfig{partitions: 3, producers: 4, txnsEach: 12, consumers: 3, maxSends: 4, maxPollReads: 3,
	pollOneIn: 4, seekOneIn: 20}

func TestSimulatedValidHistories(t *testing.T) {
	var txns, indeterminateSeen, abortedRU, values int
	for seed := range uint64(300) {
		s := simulate(seed, smallSim, noFault)
		r, err := Check(s.h, Options{})
		require.NoError(t, err)
		require.True(t, r.Valid(), "seed %d: %s", seed, r)
		// The final read_committed read sees every committed value.
		require.Zero(t, r.Unread, "seed %d", seed)
		txns += r.Txns
		indeterminateSeen += r.IndeterminateSeen
		abortedRU += r.AbortedSeenUncommitted
		values += r.Values
	}
	// The generator exercised what the checks are about.
	require.Equal(t, 300*4*12, txns)
	require.Positive(t, indeterminateSeen)
	require.Positive(t, abortedRU)
	t.Logf("300 valid histories: %d txns, %d values, %d indeterminate seen, %d aborted values read uncommitted",
		txns, values, indeterminateSeen, abortedRU)
}

// TestSimulatedPlantedFaults is the checker's negative control: every
// planted bug must be found, and reported as what it is.
func TestSimulatedPlantedFaults(t *testing.T) {
	cases := []struct {
		fault   fault
		want    Kind
		allowed []Kind
	}{
		{exposeAbort, AbortedRead, nil},
		{dropCommitted, LostWrite, nil},
		{halfApply, TornTxn, []Kind{LostWrite}},
		{tornInPartition, TornTxn, []Kind{LostWrite}},
		{duplicate, Duplicate, nil},
		{halfInfo, TornTxn, []Kind{LostWrite}},
		// Reading a record late means it was read past first.
		{reorderPoll, NonMonotonicPoll, []Kind{LostWrite, TornTxn}},
		{wrongValue, InconsistentOffsets, nil},
	}
	for _, tc := range cases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			planted := 0
			for seed := range uint64(100) {
				s := simulate(seed, smallSim, tc.fault)
				if !s.planted {
					continue
				}
				planted++
				r, err := Check(s.h, Options{})
				require.NoError(t, err)
				require.NotEmpty(t, r.Of(tc.want), "seed %d: %s", seed, r)
				for _, a := range r.Anomalies {
					require.True(t, a.Kind == tc.want || slices.Contains(tc.allowed, a.Kind),
						"seed %d: unexpected %s", seed, a)
				}
			}
			require.Greater(t, planted, 90, "the fault was planted in too few runs")
		})
	}
}

// TestLargeHistory checks the checker's cost on a history the size of the
// exactly-once acceptance run.
func TestLargeHistory(t *testing.T) {
	cfg := simConfig{partitions: 6, producers: 6, txnsEach: 700, consumers: 3, maxSends: 8, maxPollReads: 500,
		pollOneIn: 50, seekOneIn: 200}
	s := simulate(1, cfg, noFault)
	start := time.Now()
	r, err := Check(s.h, Options{})
	took := time.Since(start)
	require.NoError(t, err)
	require.True(t, r.Valid(), "%s", r)
	require.Greater(t, r.Values, 15000)
	t.Logf("checked in %v: %s", took, r)

	s = simulate(1, cfg, dropCommitted)
	r, err = Check(s.h, Options{})
	require.NoError(t, err)
	require.NotEmpty(t, r.Of(LostWrite))
}
