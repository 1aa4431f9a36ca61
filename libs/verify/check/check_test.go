package check

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Builders for small hand-written histories on topic "t"; a value's key is
// "k" + value.

func snd(p int32, v string) Send { return Send{Topic: "t", Partition: p, Key: "k" + v, Value: v} }

func ack(p int32, v string, off int64) Send {
	s := snd(p, v)
	s.Acked, s.Offset = true, off
	return s
}

// tid is the transactional id of the builders' producer proc.
func tid(proc int) string { return "tx-" + strconv.Itoa(proc) }

func commitOK(proc int, sends ...Send) Txn {
	return Txn{Process: proc, TransactionalID: tid(proc), Sends: sends, Commit: true, Outcome: OK}
}

func abortOK(proc int, sends ...Send) Txn {
	return Txn{Process: proc, TransactionalID: tid(proc), Sends: sends, Commit: false, Outcome: OK}
}

func txnInfo(proc int, sends ...Send) Txn {
	return Txn{Process: proc, TransactionalID: tid(proc), Sends: sends, Commit: true, Outcome: Info}
}

func rd(p int32, off int64, v string) Read {
	return Read{Topic: "t", Partition: p, Offset: off, Key: "k" + v, Value: v}
}

func pos(p int32, off int64) Position { return Position{Topic: "t", Partition: p, Offset: off} }

func rc(proc int, reads ...Read) Poll {
	return Poll{Process: proc, Isolation: ReadCommitted, Reads: reads}
}

func ru(proc int, reads ...Read) Poll {
	return Poll{Process: proc, Isolation: ReadUncommitted, Reads: reads}
}

func seek(p Poll, at ...Position) Poll {
	p.Seeks = append(p.Seeks, at...)
	return p
}

func ends(p Poll, at ...Position) Poll {
	p.Ends = append(p.Ends, at...)
	return p
}

// final makes p a final poll that read the partitions in at to their end.
func final(p Poll, at ...Position) Poll {
	p = ends(p, at...)
	p.Final = true
	return p
}

func TestValidHistories(t *testing.T) {
	cases := []struct {
		name  string
		h     History
		check func(t *testing.T, r Result)
	}{
		{
			name: "committed transaction read whole",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 0), ack(1, "b", 0))},
				Polls: []Poll{
					final(seek(rc(10, rd(0, 0, "a"), rd(1, 0, "b")), pos(0, 0), pos(1, 0)), pos(0, 2), pos(1, 2)),
				},
			},
			check: func(t *testing.T, r Result) {
				require.Equal(t, 1, r.Committed)
				require.Equal(t, 2, r.Reads)
				require.Zero(t, r.Unread)
			},
		},
		{
			name: "aborted values skipped by read_committed and seen by read_uncommitted",
			h: History{
				Txns: []Txn{
					commitOK(1, ack(0, "a", 0)),
					abortOK(1, ack(0, "b", 2)),
					{Process: 2, Sends: []Send{ack(0, "c", 4)}, Commit: true, Outcome: Fail},
					{Process: 3, Sends: []Send{ack(0, "d", 6)}, Commit: false, Outcome: Info},
					commitOK(1, ack(0, "e", 8)),
				},
				Polls: []Poll{
					final(seek(rc(10, rd(0, 0, "a"), rd(0, 8, "e")), pos(0, 0)), pos(0, 10)),
					seek(ru(11, rd(0, 0, "a"), rd(0, 2, "b"), rd(0, 4, "c"), rd(0, 6, "d"), rd(0, 8, "e")), pos(0, 0)),
				},
			},
			check: func(t *testing.T, r Result) {
				require.Equal(t, 3, r.Aborted)
				require.Equal(t, 3, r.AbortedSeenUncommitted)
			},
		},
		{
			name: "indeterminate transaction seen whole",
			h: History{
				Txns: []Txn{txnInfo(1, snd(0, "a"), snd(1, "b"))},
				Polls: []Poll{
					final(seek(rc(10, rd(0, 0, "a"), rd(1, 0, "b")), pos(0, 0), pos(1, 0)), pos(0, 2), pos(1, 2)),
				},
			},
			check: func(t *testing.T, r Result) {
				require.Equal(t, 1, r.Indeterminate)
				require.Equal(t, 1, r.IndeterminateSeen)
			},
		},
		{
			name: "indeterminate transaction not seen at all",
			h: History{
				Txns: []Txn{txnInfo(1, ack(0, "a", 0), snd(1, "b")), commitOK(2, ack(0, "c", 2))},
				Polls: []Poll{
					final(seek(rc(10, rd(0, 2, "c")), pos(0, 0), pos(1, 0)), pos(0, 4), pos(1, 2)),
				},
			},
			check: func(t *testing.T, r Result) {
				require.Zero(t, r.IndeterminateSeen)
				require.Zero(t, r.Unread)
			},
		},
		{
			name: "interleaved producers and a reader joining late",
			h: History{
				Txns: []Txn{
					commitOK(1, ack(0, "a1", 0), ack(1, "a2", 0)),
					commitOK(2, ack(0, "b1", 1), ack(1, "b2", 1)),
					commitOK(1, ack(0, "a3", 4), ack(1, "a4", 4)),
					commitOK(2, ack(0, "b3", 5)),
				},
				Polls: []Poll{
					// Joins with no seek at offset 4: offsets below are no
					// business of its.
					rc(10, rd(0, 4, "a3"), rd(1, 4, "a4")),
					rc(10, rd(0, 5, "b3")),
					rc(11, rd(0, 0, "a1"), rd(0, 1, "b1"), rd(1, 0, "a2")),
					rc(11, rd(1, 1, "b2"), rd(0, 4, "a3"), rd(0, 5, "b3"), rd(1, 4, "a4")),
				},
			},
		},
		{
			name: "position passes aborted records and markers",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 0)), abortOK(1, ack(0, "x", 2)), commitOK(1, ack(0, "b", 4))},
				Polls: []Poll{
					ends(seek(rc(10, rd(0, 0, "a")), pos(0, 0)), pos(0, 4)),
					ends(rc(10, rd(0, 4, "b")), pos(0, 6)),
				},
			},
		},
		{
			name: "consumer reassigned a partition after others had it",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 0)), commitOK(1, ack(0, "b", 2)), commitOK(1, ack(0, "c", 4))},
				Polls: []Poll{
					seek(rc(10, rd(0, 0, "a")), pos(0, 0)),
					seek(rc(11, rd(0, 2, "b")), pos(0, 2)),
					// Back at 4, from the group's committed offset it did not
					// know: b is not its to have read.
					seek(rc(10, rd(0, 4, "c")), pos(0, NoOffset)),
				},
			},
		},
		{
			name: "seek back and read again",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 0)), commitOK(1, ack(0, "b", 2))},
				Polls: []Poll{
					rc(10, rd(0, 0, "a"), rd(0, 2, "b")),
					seek(rc(10, rd(0, 0, "a")), pos(0, 0)),
					rc(10, rd(0, 2, "b")),
				},
			},
		},
		{
			name: "committed value not yet read is unseen, not lost",
			h: History{
				Txns:  []Txn{commitOK(1, snd(0, "a")), commitOK(1, snd(0, "b"))},
				Polls: []Poll{seek(rc(10, rd(0, 0, "a")), pos(0, 0))},
			},
			check: func(t *testing.T, r Result) {
				require.Equal(t, 1, r.Unread)
				require.Equal(t, []string{"b"}, r.UnreadValues)
			},
		},
		{
			name: "reads of unrecorded topics are not garbage",
			h: History{
				Polls: []Poll{rc(10, Read{Topic: "in", Offset: 0, Value: "0"}, Read{Topic: "in", Offset: 1, Value: "1"})},
			},
		},
		{
			name: "times in order",
			h: History{
				Txns:  []Txn{{Process: 1, Start: 10, CommitStart: 20, End: 30, Sends: []Send{snd(0, "a")}, Commit: true, Outcome: OK}},
				Polls: []Poll{{Process: 10, Start: 15, End: 25, Isolation: ReadCommitted, Reads: []Read{rd(0, 0, "a")}}},
			},
		},
		{
			name: "exactly-once copy",
			h: History{
				Copies: []Copy{{Input: Numbered(3), Output: "out",
					Map: func(s string) string { return strings.TrimPrefix(s, "copy-") }}},
				Polls: []Poll{
					{Process: 10, Isolation: ReadCommitted, Reads: []Read{
						{Topic: "out", Partition: 0, Offset: 0, Value: "copy-0"},
						{Topic: "out", Partition: 1, Offset: 0, Value: "copy-2"},
						{Topic: "out", Partition: 0, Offset: 3, Value: "copy-1"},
					}},
					{Process: 11, Isolation: ReadUncommitted, Reads: []Read{
						{Topic: "out", Partition: 0, Offset: 0, Value: "copy-0"},
						{Topic: "out", Partition: 0, Offset: 1, Value: "copy-1"}, // aborted copy
						{Topic: "out", Partition: 0, Offset: 3, Value: "copy-1"},
						{Topic: "out", Partition: 1, Offset: 0, Value: "copy-2"},
					}},
				},
			},
			check: func(t *testing.T, r Result) {
				require.Equal(t, []CopyResult{{Output: "out", Inputs: 3, Copied: 3, UncommittedOnly: 1}}, r.Copies)
			},
		},
		{
			name: "group resumes at the committed offset",
			h: History{
				Txns: []Txn{{Process: 1, Start: 1, End: 10, Commit: true, Outcome: OK,
					Offsets: []OffsetCommit{{Group: "g", Topic: "in", Partition: 0, Offset: 5}}}},
				Polls: []Poll{{Process: 2, Start: 11, Isolation: ReadCommitted, Group: "g",
					Seeks: []Position{{Topic: "in", Partition: 0, Offset: 5}}}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(tc.h, Options{})
			require.NoError(t, err)
			require.True(t, r.Valid(), "%s", r)
			require.Contains(t, r.String(), "check valid")
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestAnomalies(t *testing.T) {
	cases := []struct {
		name string
		h    History
		want map[Kind]int
		// about is the kind check looks at, when want has more than one.
		about Kind
		// check looks at the first anomaly of that kind.
		check func(t *testing.T, a Anomaly)
	}{
		{
			name: "aborted read of an aborted transaction",
			h: History{
				Txns:  []Txn{abortOK(1, ack(0, "x", 0))},
				Polls: []Poll{rc(10, rd(0, 0, "x")), rc(11, rd(0, 0, "x"))},
			},
			want: map[Kind]int{AbortedRead: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, "x", a.Value)
				require.Equal(t, 0, a.Txn)
				require.Equal(t, []int{10, 11}, a.Processes)
			},
		},
		{
			name: "aborted read of a failed commit",
			h: History{
				Txns:  []Txn{{Process: 1, Sends: []Send{snd(0, "x")}, Commit: true, Outcome: Fail}},
				Polls: []Poll{rc(10, rd(0, 0, "x"))},
			},
			want: map[Kind]int{AbortedRead: 1},
		},
		{
			name: "aborted read of an abort whose answer was lost",
			h: History{
				Txns:  []Txn{{Process: 1, Sends: []Send{snd(0, "x")}, Commit: false, Outcome: Info}},
				Polls: []Poll{rc(10, rd(0, 0, "x"))},
			},
			want: map[Kind]int{AbortedRead: 1},
		},
		{
			name: "lost write read past after a seek",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0)), commitOK(1, ack(0, "b", 2))},
				Polls: []Poll{seek(rc(10, rd(0, 2, "b")), pos(0, 0))},
			},
			want: map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, "a", a.Value)
				require.Equal(t, int64(0), a.Offset)
				require.Equal(t, []int{10}, a.Processes)
			},
		},
		{
			name: "lost write between two reads",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0)), commitOK(2, ack(0, "b", 2)), commitOK(1, ack(0, "c", 4))},
				Polls: []Poll{rc(10, rd(0, 0, "a")), rc(10, rd(0, 4, "c"))},
			},
			want:  map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, "b", a.Value) },
		},
		{
			name: "lost write passed by a position",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0)), commitOK(2, ack(0, "b", 2))},
				Polls: []Poll{ends(rc(10, rd(0, 0, "a")), pos(0, 4))},
			},
			want: map[Kind]int{LostWrite: 1},
		},
		{
			name: "lost write just below a reported position",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0)), commitOK(2, ack(0, "b", 2))},
				Polls: []Poll{ends(rc(10, rd(0, 0, "a")), pos(0, 3))},
			},
			want: map[Kind]int{LostWrite: 1},
		},
		{
			name: "lost write between a reported position and the next read",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 3)), commitOK(1, ack(0, "b", 5))},
				Polls: []Poll{ends(rc(10), pos(0, 2)), rc(10, rd(0, 5, "b"))},
			},
			want:  map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, "a", a.Value) },
		},
		{
			name: "lost write of an unacknowledged value found by a final read",
			h: History{
				Txns:  []Txn{commitOK(1, snd(0, "a")), commitOK(2, snd(0, "b"))},
				Polls: []Poll{final(seek(rc(10, rd(0, 0, "a")), pos(0, 0)), pos(0, 2))},
			},
			want: map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, "b", a.Value)
				require.Equal(t, NoOffset, a.Offset)
			},
		},
		{
			name: "lost write whose offset only a read_uncommitted reader saw",
			h: History{
				Txns: []Txn{commitOK(1, snd(0, "a")), commitOK(2, snd(0, "b")), commitOK(1, snd(0, "c"))},
				Polls: []Poll{
					ru(11, rd(0, 0, "a"), rd(0, 2, "b"), rd(0, 4, "c")),
					rc(10, rd(0, 0, "a"), rd(0, 4, "c")),
				},
			},
			want:  map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, int64(2), a.Offset) },
		},
		{
			name: "lost write of an indeterminate transaction another reader saw",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 0)), txnInfo(2, ack(0, "b", 2)), commitOK(1, ack(0, "c", 4))},
				Polls: []Poll{
					rc(10, rd(0, 2, "b")),
					rc(11, rd(0, 0, "a"), rd(0, 4, "c")),
				},
			},
			want: map[Kind]int{LostWrite: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, "b", a.Value)
				require.Equal(t, []int{11}, a.Processes)
			},
		},
		{
			name: "torn transaction across partitions",
			h: History{
				Txns: []Txn{commitOK(1, snd(0, "a"), snd(1, "b"))},
				Polls: []Poll{
					final(seek(rc(10, rd(0, 0, "a")), pos(0, 0), pos(1, 0)), pos(0, 2), pos(1, 2)),
				},
			},
			want: map[Kind]int{TornTxn: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, []string{"a"}, a.Values)
				require.Equal(t, []string{"b"}, a.Missed)
				require.Equal(t, 0, a.Txn)
			},
		},
		{
			name: "torn transaction within a partition",
			h: History{
				Txns: []Txn{
					commitOK(1, ack(0, "a", 0), ack(0, "b", 1)),
					commitOK(2, ack(0, "c", 3)),
				},
				Polls: []Poll{rc(10, rd(0, 0, "a"), rd(0, 3, "c"))},
			},
			want: map[Kind]int{TornTxn: 1},
		},
		{
			name: "indeterminate transaction half visible",
			h: History{
				Txns: []Txn{txnInfo(1, snd(0, "a"), snd(1, "b"))},
				Polls: []Poll{
					final(seek(rc(10, rd(1, 0, "b")), pos(0, 0), pos(1, 0)), pos(0, 2), pos(1, 2)),
				},
			},
			want: map[Kind]int{TornTxn: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Contains(t, a.Msg, "indeterminate")
				require.Equal(t, []string{"a"}, a.Missed)
			},
		},
		{
			name: "duplicate within a partition",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0))},
				Polls: []Poll{rc(10, rd(0, 0, "a"), rd(0, 1, "a"))},
			},
			want: map[Kind]int{Duplicate: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, "a", a.Value)
				require.Equal(t, []int64{0, 1}, a.Offsets)
			},
		},
		{
			name: "duplicate across partitions",
			h: History{
				Txns:  []Txn{commitOK(1, snd(0, "a"))},
				Polls: []Poll{rc(10, rd(0, 0, "a")), rc(11, rd(1, 0, "a"))},
			},
			// The copy in partition 1 is also in the wrong partition.
			want: map[Kind]int{Duplicate: 1, GarbageRead: 1},
		},
		{
			name: "inconsistent offsets between readers",
			h: History{
				Txns:  []Txn{commitOK(1, snd(0, "a")), commitOK(2, snd(0, "b"))},
				Polls: []Poll{rc(10, rd(0, 0, "a")), rc(11, rd(0, 0, "b"))},
			},
			want: map[Kind]int{InconsistentOffsets: 1},
			check: func(t *testing.T, a Anomaly) {
				require.Equal(t, int64(0), a.Offset)
				require.Equal(t, []string{"a", "b"}, a.Values)
			},
		},
		{
			name: "inconsistent offsets between an acknowledgement and a read",
			h: History{
				Txns:  []Txn{abortOK(1, ack(0, "x", 0)), commitOK(2, ack(0, "b", 2))},
				Polls: []Poll{ru(11, rd(0, 0, "b"))},
			},
			// b read at 0 but acknowledged at 2 is also at two offsets.
			want: map[Kind]int{InconsistentOffsets: 1, Duplicate: 0},
		},
		{
			name: "non-monotonic poll within a poll",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0), ack(0, "b", 1))},
				Polls: []Poll{rc(10, rd(0, 1, "b"), rd(0, 0, "a"))},
			},
			want:  map[Kind]int{NonMonotonicPoll: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, []int64{1, 0}, a.Offsets) },
		},
		{
			name: "non-monotonic poll across polls",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0), ack(0, "b", 1))},
				Polls: []Poll{ru(10, rd(0, 0, "a"), rd(0, 1, "b")), ru(10, rd(0, 1, "b"))},
			},
			want: map[Kind]int{NonMonotonicPoll: 1},
		},
		{
			name: "read below the position a seek set",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0), ack(0, "b", 1))},
				Polls: []Poll{seek(rc(10, rd(0, 0, "a"), rd(0, 1, "b")), pos(0, 1))},
			},
			want: map[Kind]int{NonMonotonicPoll: 1},
		},
		{
			name: "non-monotonic send",
			h: History{
				Txns: []Txn{commitOK(1, ack(0, "a", 5)), commitOK(1, ack(0, "b", 3))},
			},
			want:  map[Kind]int{NonMonotonicSend: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, []int64{5, 3}, a.Offsets) },
		},
		{
			name: "precommitted read",
			h: History{
				Txns:  []Txn{{Process: 1, Start: 10, CommitStart: 20, End: 30, Sends: []Send{snd(0, "a")}, Commit: true, Outcome: OK}},
				Polls: []Poll{{Process: 10, Start: 12, End: 15, Isolation: ReadCommitted, Reads: []Read{rd(0, 0, "a")}}},
			},
			want: map[Kind]int{PrecommittedRead: 1},
		},
		{
			name: "read of a value before its transaction began",
			h: History{
				Txns:  []Txn{{Process: 1, Start: 10, End: 30, Sends: []Send{snd(0, "a")}, Commit: true, Outcome: OK}},
				Polls: []Poll{{Process: 10, Start: 1, End: 5, Isolation: ReadUncommitted, Reads: []Read{rd(0, 0, "a")}}},
			},
			want: map[Kind]int{PrecommittedRead: 1},
		},
		{
			name: "garbage reads",
			h: History{
				Txns:  []Txn{commitOK(1, ack(0, "a", 0))},
				Polls: []Poll{rc(10, rd(0, 1, "zz")), rc(11, Read{Topic: "t", Partition: 0, Offset: 0, Key: "other", Value: "a"})},
			},
			want: map[Kind]int{GarbageRead: 2},
		},
		{
			name: "offset regression",
			h: History{
				Txns: []Txn{
					{Process: 1, Start: 1, End: 10, Commit: true, Outcome: OK,
						Offsets: []OffsetCommit{{Group: "g", Topic: "in", Partition: 0, Offset: 7}}},
					{Process: 1, Start: 11, End: 20, Commit: true, Outcome: OK,
						Offsets: []OffsetCommit{{Group: "g", Topic: "in", Partition: 0, Offset: 5}}},
				},
				Polls: []Poll{{Process: 2, Start: 21, Isolation: ReadCommitted, Group: "g",
					Seeks: []Position{{Topic: "in", Partition: 0, Offset: 6}}}},
			},
			want:  map[Kind]int{OffsetRegression: 1},
			check: func(t *testing.T, a Anomaly) { require.Equal(t, []int64{7, 6}, a.Offsets) },
		},
		{
			name: "copy missing, duplicated and unexpected",
			h: History{
				Copies: []Copy{{Input: []string{"0", "1", "2", "3"}, Output: "out"}},
				Polls: []Poll{{Process: 10, Isolation: ReadCommitted, Reads: []Read{
					{Topic: "out", Offset: 0, Value: "0"},
					{Topic: "out", Offset: 1, Value: "1"},
					{Topic: "out", Offset: 2, Value: "1"},
					{Topic: "out", Offset: 3, Value: "9"},
					{Topic: "out", Offset: 4, Value: "3"},
				}}},
			},
			// Output values are raw inputs here, so the repeated "1" is a
			// duplicate value too.
			want:  map[Kind]int{CopyMissing: 1, CopyDuplicate: 1, CopyUnexpected: 1, Duplicate: 1},
			about: CopyMissing,
			check: func(t *testing.T, a Anomaly) { require.Equal(t, "2", a.Value) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(tc.h, Options{})
			require.NoError(t, err)
			require.False(t, r.Valid())
			want := map[Kind]int{}
			about := tc.about
			for k, n := range tc.want {
				if n > 0 {
					want[k] = n
					if tc.about == "" {
						about = k
					}
				}
			}
			require.Equal(t, want, r.Counts(), "%s", r)
			require.Contains(t, r.String(), "check INVALID")
			for _, a := range r.Anomalies {
				require.NotEmpty(t, a.Msg)
				require.Contains(t, r.String(), string(a.Kind))
			}
			if tc.check != nil {
				require.True(t, tc.about != "" || len(want) == 1, "say which kind check is about")
				tc.check(t, r.Of(about)[0])
			}
		})
	}
}

func TestMalformedHistories(t *testing.T) {
	cases := map[string]History{
		"outcome not set":   {Txns: []Txn{{Process: 1, Sends: []Send{snd(0, "a")}, Commit: true}}},
		"isolation not set": {Polls: []Poll{{Process: 1}}},
		"value sent twice":  {Txns: []Txn{commitOK(1, snd(0, "a")), commitOK(2, snd(1, "a"))}},
		"negative offset":   {Txns: []Txn{commitOK(1, ack(0, "a", -3))}},
		"copy input twice":  {Copies: []Copy{{Input: []string{"1", "1"}, Output: "out"}}},
		"copy no output":    {Copies: []Copy{{Input: []string{"1"}}}},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Check(h, Options{})
			require.Error(t, err)
		})
	}
}

// TestStringBounded checks that a run with many anomalies still prints a
// short summary.
func TestStringBounded(t *testing.T) {
	in := make([]string, 1000)
	for i := range in {
		in[i] = strconv.Itoa(i)
	}
	r, err := Check(History{Copies: []Copy{{Input: in, Output: "out"}}}, Options{})
	require.NoError(t, err)
	require.Len(t, r.Of(CopyMissing), 1000)
	s := r.String()
	require.Contains(t, s, "copy-missing: 1000")
	require.Contains(t, s, "... 995 more")
	require.Less(t, len(s), 2000)
}

// TestHistoryJSON checks that a history survives a JSON round trip, so a
// failing run can save it and the checker can be run on it again.
func TestHistoryJSON(t *testing.T) {
	h := simulate(7, smallSim, halfApply).h
	h.Copies = []Copy{{Input: Numbered(2), Output: "out", Map: strings.TrimSpace}}
	b, err := json.Marshal(h)
	require.NoError(t, err)
	var back History
	require.NoError(t, json.Unmarshal(b, &back))
	want, err := Check(h, Options{})
	require.NoError(t, err)
	got, err := Check(back, Options{})
	require.NoError(t, err)
	require.Equal(t, want.String(), got.String())
	require.NotEmpty(t, got.Of(TornTxn))
}

func TestRecorder(t *testing.T) {
	var rec Recorder
	done := make(chan struct{})
	for p := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 50 {
				v := strconv.Itoa(p*100 + i)
				rec.Txn(commitOK(p, snd(int32(p), v)))
				rec.Poll(rc(10+p, rd(int32(p), int64(i), v)))
			}
		}()
	}
	for range 4 {
		<-done
	}
	h := rec.History()
	require.Len(t, h.Txns, 200)
	require.Len(t, h.Polls, 200)
	r, err := Check(h, Options{})
	require.NoError(t, err)
	require.True(t, r.Valid(), "%s", r)
	require.Zero(t, r.Unread)
}
