package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Histories for the anomalies that need times, groups and producer epochs.

func timed(t Txn, start, commitStart, end int64) Txn {
	t.Start, t.CommitStart, t.End = start, commitStart, end
	return t
}

func timedPoll(p Poll, start, end int64) Poll {
	p.Start, p.End = start, end
	return p
}

func tpOf(p int32) TopicPartition { return TopicPartition{"t", p} }

// g1cHistory: txn 0 (process 1) writes "a" to t/0 and "c" to t/1; process 2
// reads "a" and then, in txn 1, writes "b" to t/1. With cOffset 2 the log
// puts "b" before "c": txn 1 -ww-> txn 0 -wr-> txn 1.
func g1cHistory(cOffset, bOffset int64) History {
	return History{
		Txns: []Txn{
			timed(commitOK(1, ack(0, "a", 0), ack(1, "c", cOffset)), 1, 3, 4),
			timed(commitOK(2, ack(1, "b", bOffset)), 6, 7, 8),
		},
		Polls: []Poll{timedPoll(rc(2, rd(0, 0, "a")), 4, 5)},
	}
}

func runCheck(t *testing.T, h History, o Options) Result {
	t.Helper()
	r, err := Check(h, o)
	require.NoError(t, err)
	for _, a := range append(r.Anomalies, r.Warnings...) {
		require.NotEmpty(t, a.Msg)
	}
	return r
}

func TestG1c(t *testing.T) {
	r := runCheck(t, g1cHistory(2, 1), Options{})
	require.False(t, r.Valid())
	require.Equal(t, map[Kind]int{G1c: 1}, r.Counts(), "%s", r)
	a := r.Of(G1c)[0]
	require.Equal(t, []int{0, 1}, a.Cycle)
	require.ElementsMatch(t, []int{1, 2}, a.Processes)
	require.Contains(t, a.Msg, `-wr-> txn 1 (process 2) [its poll 0 read "a" at t/0 offset 0 before it began]`)
	require.Contains(t, a.Msg, "-ww-> txn 0 (process 1) [t/1 offset 1 before offset 2]")

	// "c" before "b": both dependencies point from txn 0 to txn 1.
	r = runCheck(t, g1cHistory(1, 2), Options{})
	require.True(t, r.Valid(), "%s", r)

	// The poll ended after txn 1 began: its reads feed the process's next
	// transaction, and there is none.
	h := g1cHistory(2, 1)
	h.Polls[0] = timedPoll(h.Polls[0], 6, 7)
	r = runCheck(t, h, Options{})
	require.True(t, r.Valid(), "%s", r)

	// An aborted reader transaction is no node of the graph.
	h = g1cHistory(2, 1)
	h.Txns[1].Commit = false
	r = runCheck(t, h, Options{})
	require.Zero(t, r.Counts()[G1c], "%s", r)
}

// Two transactions interleaved in one partition depend on each other by
// writes alone (G0): Kafka's transactions allow it, so it is no G1c.
func TestG1cIgnoresWriteCycles(t *testing.T) {
	h := History{Txns: []Txn{
		timed(commitOK(1, ack(0, "a", 0), ack(0, "c", 2)), 1, 3, 4),
		timed(commitOK(2, ack(0, "b", 1)), 1, 3, 4),
	}}
	r := runCheck(t, h, Options{})
	require.True(t, r.Valid(), "%s", r)
}

// A longer cycle through three processes, with an unrelated transaction and
// offsets learned from reads instead of acknowledgements.
func TestG1cLongCycle(t *testing.T) {
	h := History{
		Txns: []Txn{
			timed(commitOK(1, snd(0, "a"), snd(2, "z")), 1, 2, 3), // 0
			timed(commitOK(2, snd(1, "b")), 10, 11, 12),           // 1: read "a"
			timed(commitOK(3, snd(2, "y")), 20, 21, 22),           // 2: read "b"; "y" lands before "z"
			timed(commitOK(4, ack(3, "unrelated", 0)), 1, 2, 3),   // 3
			timed(commitOK(4, ack(3, "unrelated2", 1)), 4, 5, 6),  // 4
			timed(commitOK(2, ack(1, "later", 5)), 100, 101, 102), // 5
		},
		Polls: []Poll{
			timedPoll(rc(2, rd(0, 0, "a")), 4, 5),
			timedPoll(rc(3, rd(1, 0, "b")), 13, 14),
			timedPoll(rc(9, rd(2, 0, "y"), rd(2, 1, "z")), 30, 31),
		},
	}
	r := runCheck(t, h, Options{})
	require.Equal(t, map[Kind]int{G1c: 1}, r.Counts(), "%s", r)
	require.Len(t, r.Of(G1c)[0].Cycle, 3)
	require.ElementsMatch(t, []int{0, 1, 2}, r.Of(G1c)[0].Cycle)
}

func gen(proc int, member, protocol string, g int32, start, end int64, parts ...int32) Generation {
	out := Generation{Process: proc, Group: "g", Member: member, Protocol: protocol, Generation: g, Start: start, End: end}
	for _, p := range parts {
		out.Partitions = append(out.Partitions, tpOf(p))
	}
	return out
}

func TestDoubleOwnership(t *testing.T) {
	classic := func(gens ...Generation) Result {
		return runCheck(t, History{Generations: gens}, Options{})
	}
	r := classic(gen(1, "m1", ProtocolClassic, 3, 10, 20, 0, 1), gen(2, "m2", ProtocolClassic, 3, 15, 0, 1, 2))
	require.Equal(t, map[Kind]int{DoubleOwnership: 1}, r.Counts(), "%s", r)
	a := r.Of(DoubleOwnership)[0]
	require.Equal(t, "g", a.Group)
	require.Equal(t, int32(1), a.Partition)
	require.Equal(t, []int{1, 2}, a.Processes)

	// Another generation, disjoint partitions, windows that only touch, or
	// the same member seen twice: no double ownership.
	require.True(t, classic(gen(1, "m1", ProtocolClassic, 3, 10, 20, 1), gen(2, "m2", ProtocolClassic, 4, 15, 0, 1)).Valid())
	require.True(t, classic(gen(1, "m1", ProtocolClassic, 3, 10, 20, 0), gen(2, "m2", ProtocolClassic, 3, 15, 0, 1)).Valid())
	require.True(t, classic(gen(1, "m1", ProtocolClassic, 3, 10, 20, 1), gen(2, "m2", ProtocolClassic, 3, 20, 0, 1)).Valid())
	require.True(t, classic(gen(1, "m1", ProtocolClassic, 3, 10, 20, 1), gen(1, "m1", ProtocolClassic, 3, 15, 0, 1)).Valid())
	// A member that still owns the partition at the end (End 0) overlaps
	// every later window.
	r = classic(gen(1, "m1", ProtocolClassic, 3, 10, 0, 1), gen(3, "m3", ProtocolClassic, 3, 5, 8, 1),
		gen(2, "m2", ProtocolClassic, 3, 100, 200, 1))
	require.Equal(t, 1, r.Counts()[DoubleOwnership], "%s", r)

	// Consumer protocol: member epochs differ per member, so windows count
	// when they overlap longer than the slack, and only with a slack.
	cons := []Generation{gen(1, "m1", ProtocolConsumer, 5, 10, 30, 0), gen(2, "m2", ProtocolConsumer, 9, 20, 0, 0)}
	require.True(t, runCheck(t, History{Generations: cons}, Options{}).Valid())
	r = runCheck(t, History{Generations: cons}, Options{OwnershipSlack: 5})
	require.Equal(t, map[Kind]int{DoubleOwnership: 1}, r.Counts(), "%s", r)
	require.True(t, runCheck(t, History{Generations: cons}, Options{OwnershipSlack: 10}).Valid())
}

func gcommit(proc int, kind string, off, start, at int64, o Outcome) GroupCommit {
	return GroupCommit{Process: proc, Group: "g", TopicPartition: tpOf(0), Offset: off, Kind: kind, Start: start,
		Time: at, Outcome: o}
}

func TestCommitRegression(t *testing.T) {
	base := []GroupCommit{gcommit(1, CommitAcked, 10, 4, 5, OK)}
	check := func(o Options, more ...GroupCommit) Result {
		return runCheck(t, History{Commits: append(append([]GroupCommit(nil), base...), more...)}, o)
	}
	r := check(Options{}, gcommit(2, CommitFetched, 4, 6, 7, OK))
	require.Equal(t, map[Kind]int{CommitRegression: 1}, r.Counts(), "%s", r)
	a := r.Of(CommitRegression)[0]
	require.Equal(t, []int64{10, 4}, a.Offsets)
	require.Equal(t, []int{2, 1}, a.Processes)

	// The fetch sees the commit, or was sent before it was acknowledged.
	require.True(t, check(Options{}, gcommit(2, CommitFetched, 10, 6, 7, OK)).Valid())
	require.True(t, check(Options{}, gcommit(2, CommitFetched, 4, 3, 7, OK)).Valid())
	// A later acknowledged commit lowered it; an unanswered commit of 4 may
	// have landed; an allowed reset lies between; a failed fetch says nothing.
	require.True(t, check(Options{}, gcommit(3, CommitAcked, 4, 5, 6, OK), gcommit(2, CommitFetched, 4, 7, 8, OK)).Valid())
	require.True(t, check(Options{}, gcommit(3, CommitAcked, 4, 2, 9, Info), gcommit(2, CommitFetched, 4, 6, 7, OK)).Valid())
	require.True(t, check(Options{}, gcommit(3, CommitAcked, 4, 0, 9, Info), gcommit(2, CommitFetched, 4, 6, 7, OK)).Valid())
	require.False(t, check(Options{}, gcommit(3, CommitAcked, 4, 8, 9, Info), gcommit(2, CommitFetched, 4, 6, 7, OK)).Valid())
	require.True(t, check(Options{Resets: []Reset{{Group: "g", Topic: "t", Partition: -1, Time: 6}}},
		gcommit(2, CommitFetched, 4, 6, 7, OK)).Valid())
	require.True(t, check(Options{}, gcommit(2, CommitFetched, 4, 6, 7, Fail)).Valid())
	// A reset of another group does not excuse it; a failed commit of 4
	// does not explain it.
	require.False(t, check(Options{Resets: []Reset{{Group: "other", Time: 6}}}, gcommit(2, CommitFetched, 4, 6, 7, OK)).Valid())
	require.False(t, check(Options{}, gcommit(3, CommitAcked, 4, 5, 6, Fail), gcommit(2, CommitFetched, 4, 7, 8, OK)).Valid())
	// No committed offset at all after an acknowledged commit.
	require.False(t, check(Options{}, gcommit(2, CommitFetched, NoOffset, 6, 7, OK)).Valid())

	// Offsets committed in a transaction count as acknowledged commits.
	h := History{
		Txns: []Txn{timed(Txn{Process: 1, TransactionalID: "x", Commit: true, Outcome: OK,
			Offsets: []OffsetCommit{{Group: "g", Topic: "t", Partition: 0, Offset: 10}}}, 1, 2, 3)},
		Commits: []GroupCommit{gcommit(2, CommitFetched, 4, 6, 7, OK)},
	}
	r = runCheck(t, h, Options{})
	require.Equal(t, map[Kind]int{CommitRegression: 1}, r.Counts(), "%s", r)
	require.Contains(t, r.Of(CommitRegression)[0].Msg, "txn 0")
}

func TestZombieAck(t *testing.T) {
	hist := func(commitStart int64, newEpoch int16) History {
		zombie := timed(commitOK(1, ack(0, "a", 0)), 3, commitStart, commitStart+1)
		zombie.TransactionalID, zombie.ProducerID, zombie.Epoch = "x", 7, 0
		return History{
			Txns: []Txn{zombie},
			Inits: []Init{
				{Process: 1, TransactionalID: "x", Start: 1, End: 2, ProducerID: 7, Epoch: 0, Outcome: OK},
				{Process: 2, TransactionalID: "x", Start: 5, End: 6, ProducerID: 7, Epoch: newEpoch, Outcome: OK},
			},
		}
	}
	r := runCheck(t, hist(10, 1), Options{})
	require.Equal(t, map[Kind]int{ZombieAck: 1}, r.Counts(), "%s", r)
	a := r.Of(ZombieAck)[0]
	require.Equal(t, 0, a.Txn)
	require.Equal(t, []int{1, 2}, a.Processes)

	// EndTxn sent before the new epoch was handed out; the other init
	// returned no higher epoch; the zombie's transaction did not commit.
	require.True(t, runCheck(t, hist(4, 1), Options{}).Valid())
	require.True(t, runCheck(t, hist(10, 0), Options{}).Valid())
	h := hist(10, 1)
	h.Txns[0].Outcome = Fail
	require.True(t, runCheck(t, h, Options{}).Valid())
	// Another transactional id, or an unknown epoch.
	h = hist(10, 1)
	h.Inits[1].TransactionalID = "y"
	require.True(t, runCheck(t, h, Options{}).Valid())
	h = hist(10, 1)
	h.Txns[0].Epoch = -1
	require.True(t, runCheck(t, h, Options{}).Valid())
}

func TestUnseen(t *testing.T) {
	h := History{Txns: []Txn{commitOK(1, ack(0, "a", 0)), commitOK(1, ack(0, "b", 1)), abortOK(1, ack(0, "c", 2))}}
	r := runCheck(t, h, Options{})
	require.True(t, r.Valid(), "unseen is a warning: %s", r)
	require.Equal(t, map[Kind]int{Unseen: 2}, r.WarningCounts)
	require.Equal(t, "a", r.Of(Unseen)[0].Value)
	require.Equal(t, int64(0), r.Of(Unseen)[0].Offset)

	r = runCheck(t, h, Options{FailUnseen: true})
	require.False(t, r.Valid())
	require.Equal(t, map[Kind]int{Unseen: 2}, r.Counts())

	// A final read from offset 0 judges every value: "a" read, "b" lost.
	h.Polls = []Poll{final(seek(rc(10, rd(0, 0, "a")), pos(0, 0)), pos(0, 3))}
	r = runCheck(t, h, Options{FailUnseen: true})
	require.Equal(t, map[Kind]int{LostWrite: 1}, r.Counts(), "%s", r)
	require.Empty(t, r.Warnings)

	// A reader that stopped before "b" leaves it unseen.
	h.Polls = []Poll{ends(seek(rc(10, rd(0, 0, "a")), pos(0, 0)), pos(0, 1))}
	r = runCheck(t, h, Options{})
	require.Equal(t, map[Kind]int{Unseen: 1}, r.WarningCounts)
	require.Equal(t, "b", r.Of(Unseen)[0].Value)
}

func TestDuplicateNeedsIdempotence(t *testing.T) {
	plain := Txn{Process: 1, Sends: []Send{ack(0, "a", 0)}, Commit: true, Outcome: OK}
	h := History{Txns: []Txn{plain}, Polls: []Poll{rc(10, rd(0, 0, "a"), rd(0, 1, "a"))}}
	r := runCheck(t, h, Options{})
	require.True(t, r.Valid(), "%s", r)
	require.Equal(t, map[Kind]int{PlainDuplicate: 1}, r.WarningCounts)
	require.Equal(t, []int64{0, 1}, r.Of(PlainDuplicate)[0].Offsets)

	h.Txns[0].Idempotent = true
	r = runCheck(t, h, Options{})
	require.Equal(t, map[Kind]int{Duplicate: 1}, r.Counts(), "%s", r)
	require.Empty(t, r.Warnings)

	h.Txns[0].Idempotent, h.Txns[0].TransactionalID = false, "x"
	r = runCheck(t, h, Options{})
	require.Equal(t, map[Kind]int{Duplicate: 1}, r.Counts(), "%s", r)
}

func TestMaxExamples(t *testing.T) {
	var h History
	for i := range 30 {
		v := string(rune('a' + i))
		h.Txns = append(h.Txns, abortOK(1, ack(0, v, int64(i))))
		h.Polls = append(h.Polls, rc(10, rd(0, int64(i), v)))
	}
	r := runCheck(t, h, Options{MaxExamples: 4})
	require.Len(t, r.Anomalies, 4)
	require.Equal(t, 30, r.Counts()[AbortedRead])
	require.Len(t, runCheck(t, h, Options{MaxExamples: -1}).Anomalies, 30)
	s := r.Summary()
	require.True(t, strings.HasPrefix(s, "INVALID: 30 anomalies (aborted-read)\n"), s)
	require.Contains(t, s, "aborted-read: 30")
	require.Contains(t, s, "... 26 more")
	require.True(t, strings.HasPrefix(runCheck(t, History{}, Options{}).Summary(), "VALID\n"))
}

func TestResultJSON(t *testing.T) {
	r := runCheck(t, g1cHistory(2, 1), Options{})
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"txns", "committed", "anomalies", "anomaly_counts", "warnings", "warning_counts", "unread"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, map[string]any{"g1c": float64(1)}, m["anomaly_counts"])
	an := m["anomalies"].([]any)[0].(map[string]any)
	require.Equal(t, "g1c", an["kind"])
	require.Equal(t, []any{float64(0), float64(1)}, an["cycle"])
	var back Result
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Summary(), back.Summary())
}

func TestHistoryWriteRead(t *testing.T) {
	h := simulate(7, smallSim, halfApply).h
	h.Inits = []Init{{Process: 1, TransactionalID: "x", Start: 1, End: 2, ProducerID: 7, Epoch: 3, Outcome: OK}}
	h.Generations = []Generation{gen(1, "m1", ProtocolClassic, 3, 10, 20, 0)}
	h.Commits = []GroupCommit{gcommit(1, CommitAcked, 10, 4, 5, Info)}
	h.Faults = []Fault{{Kind: "kill", Target: "storage-1", Start: 1, End: 9}}
	var buf bytes.Buffer
	require.NoError(t, h.Write(&buf))
	require.Contains(t, buf.String(), `"isolation":"read_committed"`)
	require.Contains(t, buf.String(), `"outcome":"info"`)
	require.Contains(t, buf.String(), `"transactional_id":"x"`)
	back, err := ReadHistory(&buf)
	require.NoError(t, err)
	require.Equal(t, h, back)
	want, err := Check(h, Options{})
	require.NoError(t, err)
	got, err := Check(back, Options{})
	require.NoError(t, err)
	require.Equal(t, want.Summary(), got.Summary())

	for _, bad := range []string{`{"txns": [], "nope": 1}`, `{"txns": [{"outcome": "maybe"}]}`, `{} {}`, `[`} {
		_, err := ReadHistory(strings.NewReader(bad))
		require.Error(t, err, bad)
	}
}

func TestMalformedGroupAndProducerRecords(t *testing.T) {
	for name, h := range map[string]History{
		"init without outcome":  {Inits: []Init{{TransactionalID: "x"}}},
		"init without id":       {Inits: []Init{{Outcome: OK}}},
		"generation protocol":   {Generations: []Generation{{Group: "g", Protocol: "eager"}}},
		"generation no group":   {Generations: []Generation{{Protocol: ProtocolClassic}}},
		"generation ends early": {Generations: []Generation{{Group: "g", Protocol: ProtocolClassic, Start: 5, End: 4}}},
		"commit kind":           {Commits: []GroupCommit{{Group: "g", Kind: "store", Outcome: OK}}},
		"commit outcome":        {Commits: []GroupCommit{{Group: "g", Kind: CommitAcked}}},
		"commit group":          {Commits: []GroupCommit{{Kind: CommitAcked, Outcome: OK}}},
	} {
		_, err := Check(h, Options{})
		require.Error(t, err, name)
	}
	for name, o := range map[string]Options{
		"negative slack":      {OwnershipSlack: -1},
		"reset no group":      {Resets: []Reset{{Topic: "t"}}},
		"reset bad partition": {Resets: []Reset{{Group: "g", Topic: "t", Partition: -2}}},
	} {
		_, err := Check(History{}, o)
		require.Error(t, err, name)
	}
}
