package cmd

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/libs/client"
)

// topicSpec is one --topic value: a topic, and the partitions named after a
// colon (none means every partition of the topic).
type topicSpec struct {
	topic      string
	partitions []int32
}

// parseTopicSpec reads "TOPIC" or "TOPIC:P,P,..." as kafka-consumer-groups
// does.
func parseTopicSpec(s string) (topicSpec, error) {
	topic, parts, hasParts := strings.Cut(s, ":")
	topic = strings.TrimSpace(topic)
	if topic == "" {
		return topicSpec{}, fmt.Errorf("--topic %q: want TOPIC or TOPIC:PARTITION,PARTITION,...", s)
	}
	spec := topicSpec{topic: topic}
	if !hasParts {
		return spec, nil
	}
	seen := map[int32]bool{}
	for _, p := range strings.Split(parts, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || n < 0 {
			return topicSpec{}, fmt.Errorf("--topic %q: partition %q is not a partition number", s, p)
		}
		if !seen[int32(n)] {
			seen[int32(n)] = true
			spec.partitions = append(spec.partitions, int32(n))
		}
	}
	return spec, nil
}

// resetMode is where reset-offsets moves a group's offsets.
type resetMode int

const (
	resetToEarliest resetMode = iota + 1
	resetToLatest
	resetToDatetime
	resetShiftBy
	resetToOffset
)

// resetSpec is a validated reset-offsets request.
type resetSpec struct {
	mode resetMode
	// at is the time of --to-datetime.
	at time.Time
	// n is the --shift-by amount or the --to-offset offset.
	n int64
}

// resetFlags are reset-offsets' flags as given.
type resetFlags struct {
	topics    []string
	allTopics bool

	toEarliest, toLatest bool
	toDatetime           string
	shiftBy, toOffset    int64
	// shiftBySet and toOffsetSet say whether those flags were given (0 is
	// a valid value for both).
	shiftBySet, toOffsetSet bool

	execute, dryRun bool
}

// datetimeLayouts are the --to-datetime forms accepted: Kafka's
// (YYYY-MM-DDTHH:mm:SS.sss, local time) and RFC 3339 with a zone.
var datetimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.000", "2006-01-02T15:04:05"}

// parseDatetime reads a --to-datetime value; one without a zone is local
// time, as in Kafka's tool.
func parseDatetime(s string) (time.Time, error) {
	for _, l := range datetimeLayouts {
		if t, err := time.ParseInLocation(l, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--to-datetime %q: want a time such as 2006-01-02T15:04:05Z, 2006-01-02T15:04:05+02:00 or 2006-01-02T15:04:05.000 (local time)", s)
}

// validate checks the flags and returns the reset they ask for and the
// topics to reset.
func (f resetFlags) validate() (resetSpec, []topicSpec, error) {
	var spec resetSpec
	var chosen []string
	if f.toEarliest {
		chosen, spec.mode = append(chosen, "--to-earliest"), resetToEarliest
	}
	if f.toLatest {
		chosen, spec.mode = append(chosen, "--to-latest"), resetToLatest
	}
	if f.toDatetime != "" {
		chosen, spec.mode = append(chosen, "--to-datetime"), resetToDatetime
	}
	if f.shiftBySet {
		chosen, spec.mode, spec.n = append(chosen, "--shift-by"), resetShiftBy, f.shiftBy
	}
	if f.toOffsetSet {
		chosen, spec.mode, spec.n = append(chosen, "--to-offset"), resetToOffset, f.toOffset
	}
	switch {
	case len(chosen) == 0:
		return resetSpec{}, nil, errors.New("say where to reset: one of --to-earliest, --to-latest, --to-datetime, --shift-by or --to-offset")
	case len(chosen) > 1:
		return resetSpec{}, nil, fmt.Errorf("only one reset is possible at a time, got %s", strings.Join(chosen, ", "))
	}
	if spec.mode == resetToOffset && spec.n < 0 {
		return resetSpec{}, nil, fmt.Errorf("--to-offset must not be negative, got %d", spec.n)
	}
	if spec.mode == resetToDatetime {
		at, err := parseDatetime(f.toDatetime)
		if err != nil {
			return resetSpec{}, nil, err
		}
		spec.at = at
	}
	if f.execute && f.dryRun {
		return resetSpec{}, nil, errors.New("--execute and --dry-run exclude each other")
	}
	if f.allTopics == (len(f.topics) > 0) {
		return resetSpec{}, nil, errors.New("say which partitions to reset: --topic TOPIC[:P,P] (repeatable) or --all-topics")
	}
	var topics []topicSpec
	for _, s := range f.topics {
		ts, err := parseTopicSpec(s)
		if err != nil {
			return resetSpec{}, nil, err
		}
		topics = append(topics, ts)
	}
	return spec, topics, nil
}

// resetRow is one line of a reset plan.
type resetRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Current is the committed offset, -1 if none.
	Current int64 `json:"currentOffset"`
	New     int64 `json:"newOffset"`
}

// resetInputs are the offsets a reset plan is computed from.
type resetInputs struct {
	// committed holds the group's committed offsets; a partition without
	// one is absent or -1.
	committed map[client.TopicPartition]int64
	earliest  map[client.TopicPartition]int64
	latest    map[client.TopicPartition]int64
	// byTime holds --to-datetime lookups: -1 where no record is that
	// recent.
	byTime map[client.TopicPartition]int64
}

// planReset computes each partition's new offset as kafka-consumer-groups
// does: the earliest or latest offset, the first offset at or after a time
// (the log end when no record is that recent), the committed offset
// shifted, or an explicit offset. Shifted and explicit offsets are kept
// inside [earliest, latest]. Shifting a partition without a committed
// offset is an error. Rows come sorted by topic and partition.
func planReset(spec resetSpec, tps []client.TopicPartition, in resetInputs) ([]resetRow, error) {
	tps = append([]client.TopicPartition(nil), tps...)
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	rows := make([]resetRow, 0, len(tps))
	for _, tp := range tps {
		cur, ok := in.committed[tp]
		if !ok {
			cur = -1
		}
		lo, hasLo := in.earliest[tp]
		hi, hasHi := in.latest[tp]
		need := func(has bool, what string) error {
			if !has {
				return fmt.Errorf("%s-%d: the %s offset is not known", tp.Topic, tp.Partition, what)
			}
			return nil
		}
		var next int64
		switch spec.mode {
		case resetToEarliest:
			if err := need(hasLo, "earliest"); err != nil {
				return nil, err
			}
			next = lo
		case resetToLatest:
			if err := need(hasHi, "latest"); err != nil {
				return nil, err
			}
			next = hi
		case resetToDatetime:
			at, has := in.byTime[tp]
			if err := need(has, "timestamp's"); err != nil {
				return nil, err
			}
			next = at
			if at < 0 {
				if err := need(hasHi, "latest"); err != nil {
					return nil, err
				}
				next = hi
			}
		case resetShiftBy, resetToOffset:
			if err := errors.Join(need(hasLo, "earliest"), need(hasHi, "latest")); err != nil {
				return nil, err
			}
			next = spec.n
			if spec.mode == resetShiftBy {
				if cur < 0 {
					return nil, fmt.Errorf("cannot shift the offset of %s-%d: the group has no committed offset there", tp.Topic, tp.Partition)
				}
				next = cur + spec.n
			}
			next = min(max(next, lo), hi)
		default:
			return nil, fmt.Errorf("unknown reset mode %d", spec.mode)
		}
		rows = append(rows, resetRow{Topic: tp.Topic, Partition: tp.Partition, Current: cur, New: next})
	}
	return rows, nil
}

// resetAllowed says whether a group in this state may have its offsets
// reset: only one without active members (Kafka's rule). An unknown group
// ("Dead") may: the commit creates it.
func resetAllowed(group, state string) error {
	switch state {
	case "Empty", "Dead", "":
		return nil
	}
	// Kafka's wording, which scripts and operators know.
	return fmt.Errorf("Assignments can only be reset if the group '%s' is inactive, but the current state is %s", group, state)
}
