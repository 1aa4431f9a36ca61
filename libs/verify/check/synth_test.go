package check

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// synthHistory builds a valid history of about sends sends, shaped like a
// long verify run: plain, idempotent and transactional producers (one
// transaction in five aborted), read-process-write copiers that poll their
// own partition and then write in a transaction, group generations and
// offset commits, and final read_committed and read_uncommitted reads of
// every partition. Operations do not overlap in time, so the history is
// valid by construction.
func synthHistory(sends int, seed uint64) History {
	const (
		partitions = 12
		producers  = 30 // 0-9 plain, 10-19 idempotent, 20-29 transactional
		copiers    = 4  // processes 100-103, copier i polls partition i
	)
	rng := rand.New(rand.NewPCG(seed, 0))
	type entry struct {
		read      Read
		committed bool
	}
	logs := make([][]entry, partitions)
	var h History
	now := int64(0)
	tick := func() int64 { now += 10; return now }
	seq := 0
	nextValue := func(proc int) string { seq++; return fmt.Sprintf("p%d-%d", proc, seq) }
	for p := 20; p < producers; p++ {
		s := tick()
		h.Inits = append(h.Inits, Init{Process: p, TransactionalID: fmt.Sprintf("tx-%d", p), Start: s, End: tick(),
			ProducerID: int64(1000 + p), Epoch: 0, Outcome: OK})
	}
	for c := range copiers {
		h.Generations = append(h.Generations, Generation{Process: 100 + c, Group: "copiers", Member: fmt.Sprintf("m%d", c),
			Protocol: ProtocolClassic, Generation: 1, Partitions: []TopicPartition{{"t", int32(c)}}, Start: tick()})
	}
	cursor := make([]int64, copiers) // next offset each copier reads
	// txn appends a transaction of proc with n sends, committed or not.
	txn := func(proc int, n int, commit bool, kind string) {
		t := Txn{Process: proc, Start: tick(), Commit: commit, Outcome: OK}
		switch kind {
		case "idempotent":
			t.Idempotent = true
		case "transactional":
			t.TransactionalID, t.ProducerID, t.Epoch = fmt.Sprintf("tx-%d", proc), int64(1000+proc), 0
		}
		touched := map[int32]bool{}
		for range n {
			part := int32(rng.IntN(partitions))
			v := nextValue(proc)
			off := int64(len(logs[part]))
			t.Sends = append(t.Sends, Send{Topic: "t", Partition: part, Key: v, Value: v, Acked: true, Offset: off})
			logs[part] = append(logs[part], entry{Read{"t", part, off, v, v}, commit})
			touched[part] = true
		}
		if t.Transactional() {
			// The commit or abort marker takes an offset in each partition.
			for part := range touched {
				logs[part] = append(logs[part], entry{Read{Offset: -1}, false})
			}
		}
		t.CommitStart = tick()
		t.End = tick()
		h.Txns = append(h.Txns, t)
	}
	for seq < sends {
		switch r := rng.IntN(20); {
		case r < 3:
			txn(rng.IntN(10), 1, true, "plain")
		case r < 8:
			txn(10+rng.IntN(10), 1, true, "idempotent")
		case r < 18:
			txn(20+rng.IntN(10), 1+rng.IntN(4), rng.IntN(5) != 0, "transactional")
		default:
			// A copier polls what is new in its partition and writes it on
			// in a transaction that also commits its position.
			c := rng.IntN(copiers)
			proc := 100 + c
			poll := Poll{Process: proc, Isolation: ReadCommitted, Group: "copiers", Start: tick()}
			log := logs[c]
			if cursor[c] == 0 {
				poll.Seeks = []Position{{"t", int32(c), 0}}
			}
			for ; cursor[c] < int64(len(log)); cursor[c]++ {
				if e := log[cursor[c]]; e.committed {
					poll.Reads = append(poll.Reads, e.read)
				}
			}
			poll.Ends = []Position{{"t", int32(c), cursor[c]}}
			poll.End = tick()
			h.Polls = append(h.Polls, poll)
			if len(poll.Reads) == 0 {
				continue
			}
			txn(proc, min(len(poll.Reads), 3), true, "transactional")
			t := &h.Txns[len(h.Txns)-1]
			t.Offsets = []OffsetCommit{{Group: "copiers", Topic: "t", Partition: int32(c), Offset: cursor[c]}}
			h.Commits = append(h.Commits, GroupCommit{Process: proc, Group: "copiers",
				TopicPartition: TopicPartition{"t", int32(c)}, Offset: cursor[c], Kind: CommitFetched,
				Start: tick(), Time: tick(), Outcome: OK})
		}
	}
	for part, log := range logs {
		end := []Position{{"t", int32(part), int64(len(log))}}
		rc := Poll{Process: 900, Isolation: ReadCommitted, Start: tick(), Final: true,
			Seeks: []Position{{"t", int32(part), 0}}, Ends: end}
		ru := Poll{Process: 901, Isolation: ReadUncommitted, Start: rc.Start, Final: true,
			Seeks: []Position{{"t", int32(part), 0}}, Ends: end}
		for _, e := range log {
			if e.read.Offset < 0 {
				continue
			}
			ru.Reads = append(ru.Reads, e.read)
			if e.committed {
				rc.Reads = append(rc.Reads, e.read)
			}
		}
		rc.End, ru.End = tick(), tick()
		h.Polls = append(h.Polls, rc, ru)
	}
	return h
}

// The synthetic history is valid, so the benchmark measures the checker on
// a passing run, and G1c finds nothing in a graph with many edges.
func TestSyntheticHistoryValid(t *testing.T) {
	h := synthHistory(20000, 1)
	r, err := Check(h, Options{FailUnseen: true})
	require.NoError(t, err)
	require.True(t, r.Valid(), "%s", r)
	require.Empty(t, r.Warnings, "%s", r)
	require.GreaterOrEqual(t, r.Values, 20000)
	require.Positive(t, r.Aborted)

	// Moving one copier's read of a value to before the transaction that
	// wrote it makes a cycle.
	for _, p := range h.Polls {
		if p.Process < 100 || p.Process > 103 || len(p.Reads) == 0 {
			continue
		}
		// The copier's transaction right after this poll wrote a value; the
		// producer of the value this poll read last writes after it in some
		// partition: make the writer of the read value also write after the
		// copier's first send.
		next := -1
		for ti, tx := range h.Txns {
			if tx.Process == p.Process && tx.Start > p.End {
				next = ti
				break
			}
		}
		require.GreaterOrEqual(t, next, 0)
		read := p.Reads[len(p.Reads)-1]
		writer := -1
		for ti, tx := range h.Txns {
			for _, s := range tx.Sends {
				if s.Value == read.Value {
					writer = ti
				}
			}
		}
		cs := h.Txns[next].Sends[0]
		// The writer's send lands right after the copier's send: shift the
		// copier's send below every offset of that partition instead.
		h.Txns[writer].Sends = append(h.Txns[writer].Sends, Send{Topic: "t", Partition: cs.Partition,
			Key: "extra", Value: "extra", Acked: true, Offset: cs.Offset + 1_000_000})
		h.Txns[next].Sends[0].Offset = cs.Offset + 999_999
		break
	}
	r, err = Check(h, Options{})
	require.NoError(t, err)
	require.Equal(t, 1, r.Counts()[G1c], "%s", r)
}

// BenchmarkCheck checks a synthetic history of 500,000 sends, about what an
// hour of `sluice verify` records.
func BenchmarkCheck(b *testing.B) {
	h := synthHistory(500_000, 1)
	reads := 0
	for _, p := range h.Polls {
		reads += len(p.Reads)
	}
	b.ReportMetric(float64(len(h.Txns)), "txns")
	b.ReportMetric(float64(reads), "reads")
	b.ResetTimer()
	for b.Loop() {
		r, err := Check(h, Options{})
		if err != nil || !r.Valid() {
			b.Fatalf("synthetic history: %v %s", err, r)
		}
	}
}
