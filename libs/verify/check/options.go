package check

import (
	"fmt"
	"time"
)

// Options tune Check. The zero value is the default.
type Options struct {
	// FailUnseen makes Unseen anomalies fail the check. By default they are
	// warnings: counted and listed, but Result.Valid ignores them.
	FailUnseen bool
	// OwnershipSlack is how long two members of a consumer-protocol group may
	// both own a partition before DoubleOwnership is reported (a revocation
	// and the next assignment are seen by different members at different
	// times). 0 turns the consumer-protocol check off; the classic check
	// (same generation, overlapping windows) always runs.
	OwnershipSlack time.Duration
	// Resets are allowed resets of committed group offsets (an operator's
	// offset reset, a deleted group): a fetched offset lower than an earlier
	// acknowledged commit is no CommitRegression when a reset of that
	// partition lies between them.
	Resets []Reset
	// MaxExamples bounds the anomalies Result keeps per kind; Result.ByKind
	// still counts all of them. 0 means DefaultMaxExamples, a negative
	// value keeps every anomaly.
	MaxExamples int
}

// DefaultMaxExamples is the number of anomalies per kind Result keeps when
// Options.MaxExamples is 0.
const DefaultMaxExamples = 1000

// Reset is an allowed reset of a group's committed offsets at Time.
type Reset struct {
	Group string `json:"group"`
	// Topic "" resets every partition of the group; Partition -1 every
	// partition of Topic.
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Time      int64  `json:"time"`
}

func (o Options) validate() error {
	if o.OwnershipSlack < 0 {
		return fmt.Errorf("options: negative ownership slack %s", o.OwnershipSlack)
	}
	for i, r := range o.Resets {
		if r.Group == "" {
			return fmt.Errorf("options: reset %d has no group", i)
		}
		if r.Topic != "" && r.Partition < -1 {
			return fmt.Errorf("options: reset %d of %s has partition %d (want -1 or more)", i, r.Topic, r.Partition)
		}
	}
	return nil
}

func (o Options) maxExamples() int {
	switch {
	case o.MaxExamples == 0:
		return DefaultMaxExamples
	case o.MaxExamples < 0:
		return int(^uint(0) >> 1)
	}
	return o.MaxExamples
}
