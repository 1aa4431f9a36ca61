package check

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// Outcome is what a client learned about an operation.
type Outcome uint8

const (
	// OK means the operation completed as the client asked.
	OK Outcome = iota + 1
	// Fail means the operation certainly took no effect.
	Fail
	// Info means the client does not know whether it took effect (a timeout,
	// a lost connection, a process killed mid-call).
	Info
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Fail:
		return "fail"
	case Info:
		return "info"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// MarshalText writes "ok", "fail" or "info" ("" for an unset outcome).
func (o Outcome) MarshalText() ([]byte, error) {
	switch o {
	case 0:
		return nil, nil
	case OK, Fail, Info:
		return []byte(o.String()), nil
	}
	return nil, fmt.Errorf("outcome %d out of range", uint8(o))
}

// UnmarshalText reads what MarshalText writes.
func (o *Outcome) UnmarshalText(b []byte) error {
	switch string(b) {
	case "":
		*o = 0
	case "ok":
		*o = OK
	case "fail":
		*o = Fail
	case "info":
		*o = Info
	default:
		return fmt.Errorf("outcome %q: want ok, fail or info", b)
	}
	return nil
}

// Isolation is a consumer's isolation.level.
type Isolation uint8

const (
	// ReadCommitted consumers see committed transactions only.
	ReadCommitted Isolation = iota + 1
	// ReadUncommitted consumers see every record, aborted ones included.
	ReadUncommitted
)

func (i Isolation) String() string {
	switch i {
	case ReadCommitted:
		return "read_committed"
	case ReadUncommitted:
		return "read_uncommitted"
	}
	return fmt.Sprintf("isolation(%d)", uint8(i))
}

// MarshalText writes "read_committed" or "read_uncommitted" ("" when unset).
func (i Isolation) MarshalText() ([]byte, error) {
	switch i {
	case 0:
		return nil, nil
	case ReadCommitted, ReadUncommitted:
		return []byte(i.String()), nil
	}
	return nil, fmt.Errorf("isolation %d out of range", uint8(i))
}

// UnmarshalText reads what MarshalText writes.
func (i *Isolation) UnmarshalText(b []byte) error {
	switch string(b) {
	case "":
		*i = 0
	case "read_committed":
		*i = ReadCommitted
	case "read_uncommitted":
		*i = ReadUncommitted
	default:
		return fmt.Errorf("isolation %q: want read_committed or read_uncommitted", b)
	}
	return nil
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Send is one record a transaction produced.
type Send struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Key       string `json:"key"`
	// Value identifies the send: unique per topic across the history.
	Value string `json:"value"`
	// Acked says the produce was acknowledged with Offset.
	Acked  bool  `json:"acked"`
	Offset int64 `json:"offset"`
}

// TP returns the send's partition.
func (s Send) TP() TopicPartition { return TopicPartition{s.Topic, s.Partition} }

// OffsetCommit is a consumer offset a transaction commits (read-process-write):
// the next offset the group will read in the partition.
type OffsetCommit struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Txn is one transaction of one producer. Record a send of a
// non-transactional (idempotent) producer as a Txn of one send with Commit
// set and the produce's outcome.
type Txn struct {
	// Process identifies the producer; one producer's transactions are
	// recorded in the order it ran them.
	Process int `json:"process"`
	// Start, CommitStart and End are times on a clock shared by every
	// recorder (UnixNano on one host, or a logical counter); 0 is unknown.
	// Start is when the transaction began, CommitStart when EndTxn was sent,
	// End when the client learned the outcome.
	Start       int64          `json:"start"`
	CommitStart int64          `json:"commit_start"`
	End         int64          `json:"end"`
	Sends       []Send         `json:"sends"`
	Offsets     []OffsetCommit `json:"offsets"`
	// Commit says the client asked to commit. False means it asked to abort
	// or never asked (it died before EndTxn): its values must never become
	// visible, whatever the outcome.
	Commit bool `json:"commit"`
	// Outcome is the answer to EndTxn (or to the first call that failed):
	// Fail only when the transaction certainly did not commit (an abort, a
	// PRODUCER_FENCED answer), Info when it may have.
	Outcome Outcome `json:"outcome"`
	// TransactionalID is the producer's transactional.id; "" for idempotent
	// and plain producers.
	TransactionalID string `json:"transactional_id"`
	// ProducerID and Epoch are the producer id and epoch as the client saw
	// them when the transaction began (0 and -1 when unknown).
	ProducerID int64 `json:"producer_id"`
	Epoch      int16 `json:"epoch"`
	// Idempotent says the producer had idempotence on. A value at two
	// offsets is a Duplicate only for idempotent or transactional sends; a
	// plain producer's retries may write twice (PlainDuplicate).
	Idempotent bool `json:"idempotent"`
}

// Transactional says the transaction came from a transactional producer.
func (t Txn) Transactional() bool { return t.TransactionalID != "" }

// Read is one record a poll returned.
type Read struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

// TP returns the read's partition.
func (r Read) TP() TopicPartition { return TopicPartition{r.Topic, r.Partition} }

// Position is a consumer's position in a partition: the next offset it reads.
type Position struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the position; NoOffset in a seek means the position changed
	// to somewhere unknown.
	Offset int64 `json:"offset"`
}

// NoOffset marks an unknown position in a seek.
const NoOffset int64 = -1

// Poll is one poll of one consumer.
type Poll struct {
	// Process identifies the consumer (one client instance); its polls are
	// recorded in the order it made them.
	Process   int       `json:"process"`
	Start     int64     `json:"start"`
	End       int64     `json:"end"`
	Isolation Isolation `json:"isolation"`
	// Group is the consumer group, if any; with Seeks it lets the checker
	// compare positions against transactional offset commits.
	Group string `json:"group"`
	// Seeks are positions set before this poll's reads: an assignment, a
	// rebalance, a seek or a reset. Each starts a new read segment. Record
	// one for every partition a consumer is assigned, with NoOffset when the
	// start is not known: without it, a consumer that reads a partition
	// again after others had it counts as having read past the records in
	// between, and one that resumes lower as going backwards.
	Seeks []Position `json:"seeks"`
	// Reads are the records returned, in the order returned.
	Reads []Read `json:"reads"`
	// Ends are positions after the poll, where known; read_committed
	// consumers move past aborted records and markers up to the last stable
	// offset, so a position may pass offsets no read returned.
	Ends []Position `json:"ends"`
	// Final says the workload had stopped and every transaction had ended
	// before this poll, and the partitions in Ends were read to their end:
	// every committed record of those partitions lies below those positions.
	Final bool `json:"final"`
}

// Copy describes a read-process-write copy: every input value must appear
// exactly once among the read_committed reads of the output topic. Check it
// on a history with a final read of the whole output topic.
type Copy struct {
	Input  []string `json:"input"`
	Output string   `json:"output"`
	// Map turns an output value into the input value it copies; nil is the
	// identity. It is left out of JSON, so a history can be saved with a
	// failing test's log.
	Map func(output string) string `json:"-"`
}

// Numbered returns the values "0" to "n-1": the input of a copy whose input
// topic holds numbered records.
func Numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// Init is one InitProducerId call of a transactional producer.
type Init struct {
	Process         int    `json:"process"`
	TransactionalID string `json:"transactional_id"`
	// Start and End are when the call was sent and answered.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// ProducerID and Epoch are the answer (meaningful when Outcome is OK).
	ProducerID int64   `json:"producer_id"`
	Epoch      int16   `json:"epoch"`
	Outcome    Outcome `json:"outcome"`
}

// The group protocols a Generation can come from.
const (
	ProtocolClassic  = "classic"
	ProtocolConsumer = "consumer"
)

// Generation is a group member's assignment as the member saw it: it owned
// Partitions from Start (the assignment) to End (the revocation, or the end of
// the run).
type Generation struct {
	Process int    `json:"process"`
	Group   string `json:"group"`
	Member  string `json:"member"`
	// Protocol is ProtocolClassic or ProtocolConsumer.
	Protocol string `json:"protocol"`
	// Generation is the group generation (classic) or the member epoch
	// (consumer protocol).
	Generation int32            `json:"generation"`
	Partitions []TopicPartition `json:"partitions"`
	// End 0 means the member still owned the partitions when the run ended.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// The kinds of GroupCommit.
const (
	// CommitAcked is an offset commit the group coordinator acknowledged.
	CommitAcked = "commit"
	// CommitFetched is a committed offset an OffsetFetch answered.
	CommitFetched = "fetch"
)

// GroupCommit is a group's committed offset of one partition, as a consumer
// committed it (Kind CommitAcked) or as an OffsetFetch returned it (Kind
// CommitFetched).
type GroupCommit struct {
	Process int    `json:"process"`
	Group   string `json:"group"`
	TopicPartition
	Offset int64 `json:"offset"`
	// Generation is the generation (or member epoch) the commit carried; 0
	// for a fetch.
	Generation int32  `json:"generation"`
	Kind       string `json:"kind"`
	// Start is when the request was sent (0 when unknown: Time is used);
	// Time is when the answer arrived.
	Start   int64   `json:"start,omitempty"`
	Time    int64   `json:"time"`
	Outcome Outcome `json:"outcome"`
}

// Fault is a fault injected during the run, kept for the report and the plot.
type Fault struct {
	// Kind names the fault (kill, pause, crash, partition, disk, clock,
	// ...); Target the process or processes it hit; Detail the rest.
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Detail string `json:"detail,omitempty"`
	// Start and End are when it began and was healed (End 0: not healed).
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// History is everything recorded in one run.
type History struct {
	Txns   []Txn  `json:"txns"`
	Polls  []Poll `json:"polls"`
	Copies []Copy `json:"copies"`
	// Inits are the InitProducerId calls of transactional producers.
	Inits []Init `json:"inits"`
	// Generations are group members' assignments.
	Generations []Generation `json:"generations"`
	// Commits are group offsets committed or fetched.
	Commits []GroupCommit `json:"commits"`
	// Faults are the faults injected.
	Faults []Fault `json:"faults"`
}

// Recorder collects a history from concurrent clients.
type Recorder struct {
	mu sync.Mutex
	h  History
}

// Txn records a transaction once its outcome is known and returns its index.
func (r *Recorder) Txn(t Txn) int { return record(r, &r.h.Txns, t) }

// Poll records a poll and returns its index.
func (r *Recorder) Poll(p Poll) int { return record(r, &r.h.Polls, p) }

// Copy records a copy to check.
func (r *Recorder) Copy(c Copy) { record(r, &r.h.Copies, c) }

// Init records an InitProducerId call once answered.
func (r *Recorder) Init(i Init) { record(r, &r.h.Inits, i) }

// Generation records a member's assignment; record it at revocation (or at
// the end of the run) when End is known.
func (r *Recorder) Generation(g Generation) { record(r, &r.h.Generations, g) }

// GroupCommit records a committed or fetched group offset.
func (r *Recorder) GroupCommit(c GroupCommit) { record(r, &r.h.Commits, c) }

// Fault records an injected fault.
func (r *Recorder) Fault(f Fault) { record(r, &r.h.Faults, f) }

// record appends v to one of r's lists (a field of r.h) under r's lock and
// returns its index.
func record[T any](r *Recorder, list *[]T, v T) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, v)
	return len(*list) - 1
}

// History returns what was recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return History{
		Txns:        slices.Clone(r.h.Txns),
		Polls:       slices.Clone(r.h.Polls),
		Copies:      slices.Clone(r.h.Copies),
		Inits:       slices.Clone(r.h.Inits),
		Generations: slices.Clone(r.h.Generations),
		Commits:     slices.Clone(r.h.Commits),
		Faults:      slices.Clone(r.h.Faults),
	}
}
