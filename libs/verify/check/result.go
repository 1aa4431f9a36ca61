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
	G1c                 Kind = "g1c"
	DoubleOwnership     Kind = "double-ownership"
	CommitRegression    Kind = "commit-regression"
	ZombieAck           Kind = "zombie-ack"
	// Unseen and PlainDuplicate are warnings: Result.Warnings lists them and
	// Result.Valid ignores them (Unseen fails with Options.FailUnseen).
	Unseen         Kind = "unseen"
	PlainDuplicate Kind = "plain-duplicate"
)

// Anomaly is one violation, with what a reader of a test log needs to find
// it: fields that do not apply to its kind are zero (Txn and Poll are -1).
type Anomaly struct {
	Kind      Kind   `json:"kind"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	// Offset is the offset involved, NoOffset when unknown.
	Offset int64 `json:"offset"`
	// Offsets lists the offsets of a duplicate or a non-monotonic pair.
	Offsets []int64 `json:"offsets,omitempty"`
	Value   string  `json:"value,omitempty"`
	// Values lists the values of an inconsistent offset, or the values a
	// torn transaction's readers saw.
	Values []string `json:"values,omitempty"`
	// Missed lists the values a torn transaction's readers read past.
	Missed []string `json:"missed,omitempty"`
	// Txn and Poll are indexes into History.Txns and History.Polls.
	Txn  int `json:"txn"`
	Poll int `json:"poll"`
	// Processes are the consumers (or, for a send, the producer) involved.
	Processes []int `json:"processes,omitempty"`
	// Cycle lists the transactions (indexes into History.Txns) of a G1c
	// cycle in order; the last one depends on the first.
	Cycle []int `json:"cycle,omitempty"`
	// Group is the consumer group of a DoubleOwnership or CommitRegression.
	Group string `json:"group,omitempty"`
	Msg   string `json:"msg"`
}

func (a Anomaly) String() string { return string(a.Kind) + ": " + a.Msg }

// Result is the outcome of Check.
type Result struct {
	Txns          int `json:"txns"`
	Committed     int `json:"committed"`
	Aborted       int `json:"aborted"`
	Indeterminate int `json:"indeterminate"`
	// IndeterminateSeen counts indeterminate transactions a read_committed
	// reader saw, which are committed.
	IndeterminateSeen int `json:"indeterminate_seen"`
	Polls             int `json:"polls"`
	Reads             int `json:"reads"`
	// Values counts recorded sends.
	Values int `json:"values"`
	// Unread counts values of committed transactions no read_committed
	// reader returned, whether or not one read past them (those are lost
	// writes or torn transactions; the others are Unseen warnings);
	// UnreadValues lists up to 100 of them.
	Unread       int      `json:"unread"`
	UnreadValues []string `json:"unread_values,omitempty"`
	// AbortedSeenUncommitted counts values of aborted transactions that a
	// read_uncommitted reader returned: evidence that aborts reached the log.
	AbortedSeenUncommitted int `json:"aborted_seen_uncommitted"`
	// Copies has one entry per History.Copies.
	Copies []CopyResult `json:"copies,omitempty"`
	// Anomalies are the failures, at most Options.MaxExamples per kind,
	// sorted by kind, topic, partition and offset; AnomalyCounts counts all
	// of them per kind.
	Anomalies     []Anomaly    `json:"anomalies"`
	AnomalyCounts map[Kind]int `json:"anomaly_counts"`
	// Warnings are Unseen and PlainDuplicate reports, bounded the same way;
	// WarningCounts counts all of them per kind.
	Warnings      []Anomaly    `json:"warnings"`
	WarningCounts map[Kind]int `json:"warning_counts"`
}

// CopyResult sums up one Copy check; its anomalies are in Result.Anomalies.
type CopyResult struct {
	Output     string `json:"output"`
	Inputs     int    `json:"inputs"`
	Copied     int    `json:"copied"` // input values seen exactly once
	Missing    int    `json:"missing"`
	Duplicated int    `json:"duplicated"`
	Unexpected int    `json:"unexpected"`
	// UncommittedOnly counts offsets of the output topic that a
	// read_uncommitted reader returned and no read_committed reader did:
	// with final reads of both kinds, the aborted copies.
	UncommittedOnly int `json:"uncommitted_only"`
}

// Valid reports whether the history shows no anomaly (warnings aside).
func (r Result) Valid() bool { return len(r.Anomalies) == 0 }

// Of returns the anomalies and warnings of one kind that the result kept.
func (r Result) Of(k Kind) []Anomaly {
	var out []Anomaly
	for _, list := range [][]Anomaly{r.Anomalies, r.Warnings} {
		for _, a := range list {
			if a.Kind == k {
				out = append(out, a)
			}
		}
	}
	return out
}

// Counts returns the number of anomalies per kind, warnings left out.
func (r Result) Counts() map[Kind]int {
	m := make(map[Kind]int, len(r.AnomalyCounts))
	for k, n := range r.AnomalyCounts {
		m[k] = n
	}
	return m
}

// maxPerKind bounds the anomalies String and Summary print per kind, so a
// broken run still gives a readable log.
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
		"%d values, %d reads in %d polls, %d unread, %d aborted values read uncommitted",
		verdict, r.Txns, r.Committed, r.Aborted, r.Indeterminate, r.IndeterminateSeen,
		r.Values, r.Reads, r.Polls, r.Unread, r.AbortedSeenUncommitted)
	r.writeCopies(&b)
	r.writeKinds(&b, r.Anomalies, r.AnomalyCounts, "")
	r.writeKinds(&b, r.Warnings, r.WarningCounts, " (warning)")
	return b.String()
}

// Summary is the human report: the verdict line ("VALID" or "INVALID: N
// anomalies (kinds)"), the counts, then one line per kind with its count
// and a few examples naming topic, partition, offset, value and process.
func (r Result) Summary() string {
	var b strings.Builder
	if r.Valid() {
		b.WriteString("VALID")
	} else {
		total := 0
		for _, n := range r.AnomalyCounts {
			total += n
		}
		noun := "anomalies"
		if total == 1 {
			noun = "anomaly"
		}
		fmt.Fprintf(&b, "INVALID: %d %s (%s)", total, noun, strings.Join(sortedKinds(r.AnomalyCounts), ", "))
	}
	fmt.Fprintf(&b, "\ntransactions: %d (%d committed, %d aborted, %d indeterminate of which %d seen committed)",
		r.Txns, r.Committed, r.Aborted, r.Indeterminate, r.IndeterminateSeen)
	fmt.Fprintf(&b, "\nvalues sent: %d; reads: %d in %d polls; committed values no read_committed reader returned: %d; "+
		"aborted values read uncommitted: %d", r.Values, r.Reads, r.Polls, r.Unread, r.AbortedSeenUncommitted)
	r.writeCopies(&b)
	r.writeKinds(&b, r.Anomalies, r.AnomalyCounts, "")
	r.writeKinds(&b, r.Warnings, r.WarningCounts, " (warning)")
	return b.String()
}

func (r Result) writeCopies(b *strings.Builder) {
	for _, c := range r.Copies {
		fmt.Fprintf(b, "\n  copy to %s: %d inputs, %d copied once, %d missing, %d duplicated, %d unexpected, "+
			"%d offsets read uncommitted only", c.Output, c.Inputs, c.Copied, c.Missing, c.Duplicated,
			c.Unexpected, c.UncommittedOnly)
	}
}

func (r Result) writeKinds(b *strings.Builder, list []Anomaly, counts map[Kind]int, note string) {
	for _, k := range sortedKinds(counts) {
		n := counts[Kind(k)]
		fmt.Fprintf(b, "\n  %s%s: %d", k, note, n)
		shown := 0
		for _, a := range list {
			if a.Kind != Kind(k) {
				continue
			}
			if shown == maxPerKind {
				break
			}
			fmt.Fprintf(b, "\n    %s", a.Msg)
			shown++
		}
		if n > shown {
			fmt.Fprintf(b, "\n    ... %d more", n-shown)
		}
	}
}

func sortedKinds(counts map[Kind]int) []string {
	kinds := make([]string, 0, len(counts))
	for k, n := range counts {
		if n > 0 {
			kinds = append(kinds, string(k))
		}
	}
	sort.Strings(kinds)
	return kinds
}
