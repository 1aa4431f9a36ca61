package check

import (
	"fmt"
	"sort"
	"strings"
)

// Kind names an anomaly.
type Kind string

// The anomalies; the package comment defines each.
const (
	AbortedRead         Kind = "aborted-read"
	LostWrite           Kind = "lost-write"
	TornTxn             Kind = "torn-transaction"
	Duplicate           Kind = "duplicate"
	InconsistentOffsets Kind = "inconsistent-offsets"
	NonMonotonicPoll    Kind = "nonmonotonic-poll"
	NonMonotonicSend    Kind = "nonmonotonic-send"
	PrecommittedRead    Kind = "precommitted-read"
	GarbageRead         Kind = "garbage-read"
	OffsetRegression    Kind = "offset-regression"
	CopyMissing         Kind = "copy-missing"
	CopyDuplicate       Kind = "copy-duplicate"
	CopyUnexpected      Kind = "copy-unexpected"
)

// Anomaly is one violation, with what a reader of a test log needs to find
// it: fields that do not apply to its kind are zero (Txn and Poll are -1).
type Anomaly struct {
	Kind      Kind
	Topic     string
	Partition int32
	// Offset is the offset involved, NoOffset when unknown.
	Offset int64
	// Offsets lists the offsets of a duplicate or a non-monotonic pair.
	Offsets []int64
	Value   string
	// Values lists the values of an inconsistent offset, or the values a
	// torn transaction's readers saw.
	Values []string
	// Missed lists the values a torn transaction's readers read past.
	Missed []string
	// Txn and Poll are indexes into History.Txns and History.Polls.
	Txn  int
	Poll int
	// Processes are the consumers (or, for a send, the producer) involved.
	Processes []int
	Msg       string
}

func (a Anomaly) String() string { return string(a.Kind) + ": " + a.Msg }

// Result is the outcome of Check.
type Result struct {
	Txns          int
	Committed     int
	Aborted       int
	Indeterminate int
	// IndeterminateSeen counts indeterminate transactions a read_committed
	// reader saw, which are committed.
	IndeterminateSeen int
	Polls             int
	Reads             int
	// Values counts recorded sends.
	Values int
	// Unseen counts values of committed transactions no read_committed
	// reader returned (see the package comment); UnseenValues lists up to
	// 100 of them.
	Unseen       int
	UnseenValues []string
	// AbortedSeenUncommitted counts values of aborted transactions that a
	// read_uncommitted reader returned: evidence that aborts reached the log.
	AbortedSeenUncommitted int
	// Copies has one entry per History.Copies.
	Copies    []CopyResult
	Anomalies []Anomaly
}

// CopyResult sums up one Copy check; its anomalies are in Result.Anomalies.
type CopyResult struct {
	Output     string
	Inputs     int
	Copied     int // input values seen exactly once
	Missing    int
	Duplicated int
	Unexpected int
	// UncommittedOnly counts offsets of the output topic that a
	// read_uncommitted reader returned and no read_committed reader did:
	// with final reads of both kinds, the aborted copies.
	UncommittedOnly int
}

// Valid reports whether the history shows no anomaly.
func (r Result) Valid() bool { return len(r.Anomalies) == 0 }

// Of returns the anomalies of one kind.
func (r Result) Of(k Kind) []Anomaly {
	var out []Anomaly
	for _, a := range r.Anomalies {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

// Counts returns the number of anomalies per kind.
func (r Result) Counts() map[Kind]int {
	m := map[Kind]int{}
	for _, a := range r.Anomalies {
		m[a.Kind]++
	}
	return m
}

// maxPerKind bounds the anomalies String prints per kind, so a broken run
// still gives a readable test log.
const maxPerKind = 5

// String sums up the result for a test log: counts, then the first few
// anomalies of each kind.
func (r Result) String() string {
	var b strings.Builder
	verdict := "valid"
	if !r.Valid() {
		verdict = "INVALID"
	}
	fmt.Fprintf(&b, "check %s: %d txns (%d committed, %d aborted, %d indeterminate of which %d seen), "+
		"%d values, %d reads in %d polls, %d unseen, %d aborted values read uncommitted",
		verdict, r.Txns, r.Committed, r.Aborted, r.Indeterminate, r.IndeterminateSeen,
		r.Values, r.Reads, r.Polls, r.Unseen, r.AbortedSeenUncommitted)
	for _, c := range r.Copies {
		fmt.Fprintf(&b, "\n  copy to %s: %d inputs, %d copied once, %d missing, %d duplicated, %d unexpected, "+
			"%d offsets read uncommitted only", c.Output, c.Inputs, c.Copied, c.Missing, c.Duplicated,
			c.Unexpected, c.UncommittedOnly)
	}
	counts := r.Counts()
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n  %s: %d", k, counts[Kind(k)])
		for _, a := range r.Of(Kind(k))[:min(maxPerKind, counts[Kind(k)])] {
			fmt.Fprintf(&b, "\n    %s", a.Msg)
		}
		if counts[Kind(k)] > maxPerKind {
			fmt.Fprintf(&b, "\n    ... %d more", counts[Kind(k)]-maxPerKind)
		}
	}
	return b.String()
}
