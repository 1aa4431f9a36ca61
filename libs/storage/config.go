package storage

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// CleanupPolicy is the set of cleanup.policy values.
type CleanupPolicy uint8

const (
	// CleanupDelete deletes whole old segments by retention.ms and
	// retention.bytes.
	CleanupDelete CleanupPolicy = 1 << iota
	// CleanupCompact keeps the latest record of every key.
	CleanupCompact
)

// Delete reports whether the policy includes delete.
func (p CleanupPolicy) Delete() bool { return p&CleanupDelete != 0 }

// Compact reports whether the policy includes compact.
func (p CleanupPolicy) Compact() bool { return p&CleanupCompact != 0 }

// String returns the policy in cleanup.policy syntax.
func (p CleanupPolicy) String() string {
	var parts []string
	if p.Delete() {
		parts = append(parts, "delete")
	}
	if p.Compact() {
		parts = append(parts, "compact")
	}
	return strings.Join(parts, ",")
}

// Config is the part of a topic's configuration the log uses. Names, units
// and defaults follow Kafka's topic configs so operators find what they
// know; sluice.fsync.before.ack is Sluice's own.
type Config struct {
	// SegmentBytes is segment.bytes: a segment rolls before it would grow
	// beyond this size.
	SegmentBytes int64
	// SegmentMs is segment.ms: a segment rolls once it is this old, so
	// retention can delete data even on a quiet partition.
	SegmentMs int64
	// RetentionMs is retention.ms: whole segments whose newest record is
	// older than this are deleted (-1 keeps them forever).
	RetentionMs int64
	// RetentionBytes is retention.bytes: the oldest segments are deleted
	// while the log is larger than this (-1 means no size limit).
	RetentionBytes int64
	// CleanupPolicy is cleanup.policy.
	CleanupPolicy CleanupPolicy
	// DeleteRetentionMs is delete.retention.ms: how long compaction keeps
	// tombstones (and transaction markers) after it first sees them, so a
	// consumer that reads from the start sees deletes (KIP-534).
	DeleteRetentionMs int64
	// MinCompactionLagMs is min.compaction.lag.ms: records younger than
	// this are never compacted.
	MinCompactionLagMs int64
	// MinCleanableDirtyRatio is min.cleanable.dirty.ratio: background
	// compaction runs once this share of the cleanable log is uncompacted.
	MinCleanableDirtyRatio float64
	// MaxMessageBytes is max.message.bytes: the largest batch accepted,
	// log overhead included.
	MaxMessageBytes int
	// FlushMessages is flush.messages: fsync after this many records.
	FlushMessages int64
	// FlushMs is flush.ms: fsync when unflushed data is this old.
	FlushMs int64
	// FsyncBeforeAck is sluice.fsync.before.ack: AppendSync returns only
	// once the batch is on stable storage (group-committed with every other
	// append waiting at the same moment).
	FsyncBeforeAck bool
	// MessageTimestampType is message.timestamp.type: with LogAppendTime
	// the leader stamps its clock on every batch.
	MessageTimestampType record.TimestampType
	// IndexIntervalBytes is index.interval.bytes: how many bytes of log lie
	// between two offset index entries.
	IndexIntervalBytes int
}

// ConfigDef is how the log applies one topic config key. Its default and
// documentation are the topic config's (libs/topicconfig), the one table of
// them; Validate holds the log's own bounds, which may be wider than the
// controller's policy (tests roll segments of a few KiB).
type ConfigDef struct {
	Name string
	// Validate checks a value given as a string.
	Validate func(string) error
	set      func(*Config, string) error
	get      func(*Config) string
}

// Default returns the key's default value, from the topic config table.
func (d ConfigDef) Default() string {
	td, ok := topicconfig.Lookup(d.Name)
	if !ok {
		panic("storage: " + d.Name + " is not a topic config") // TestConfigTable keeps the tables joined
	}
	return td.Default
}

func longRange(lo, hi int64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		if v < lo || v > hi {
			return fmt.Errorf("%d is outside [%d, %d]", v, lo, hi)
		}
		return nil
	}
}

func parseLong(s string) int64 {
	v, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return v
}

func longDef(name string, lo, hi int64, field func(*Config) *int64) ConfigDef {
	return ConfigDef{
		Name: name, Validate: longRange(lo, hi),
		set: func(c *Config, s string) error { *field(c) = parseLong(s); return nil },
		get: func(c *Config) string { return strconv.FormatInt(*field(c), 10) },
	}
}

func parsePolicy(s string) (CleanupPolicy, error) {
	var p CleanupPolicy
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(part) {
		case "delete":
			p |= CleanupDelete
		case "compact":
			p |= CleanupCompact
		case "":
		default:
			return 0, fmt.Errorf("%q is not delete or compact", part)
		}
	}
	return p, nil
}

// ConfigDefs is every topic config key the log understands, in name order;
// ApplyConfig applies them. The controller validates topic configs against
// libs/topicconfig, which holds every key's default.
var ConfigDefs = []ConfigDef{
	{
		Name:     "cleanup.policy",
		Validate: func(s string) error { _, err := parsePolicy(s); return err },
		set: func(c *Config, s string) error {
			var err error
			c.CleanupPolicy, err = parsePolicy(s)
			return err
		},
		get: func(c *Config) string { return c.CleanupPolicy.String() },
	},
	longDef("delete.retention.ms", 0, math.MaxInt64, func(c *Config) *int64 { return &c.DeleteRetentionMs }),
	longDef("flush.messages", 1, math.MaxInt64,
		func(c *Config) *int64 { return &c.FlushMessages }),
	longDef("flush.ms", 0, math.MaxInt64,
		func(c *Config) *int64 { return &c.FlushMs }),
	{
		Name:     "index.interval.bytes",
		Validate: longRange(0, math.MaxInt32),
		set:      func(c *Config, s string) error { c.IndexIntervalBytes = int(parseLong(s)); return nil },
		get:      func(c *Config) string { return strconv.Itoa(c.IndexIntervalBytes) },
	},
	{
		Name:     "max.message.bytes",
		Validate: longRange(record.BatchHeaderSize, math.MaxInt32),
		set:      func(c *Config, s string) error { c.MaxMessageBytes = int(parseLong(s)); return nil },
		get:      func(c *Config) string { return strconv.Itoa(c.MaxMessageBytes) },
	},
	{
		Name: "message.timestamp.type",
		Validate: func(s string) error {
			if s != "CreateTime" && s != "LogAppendTime" {
				return fmt.Errorf("%q is not CreateTime or LogAppendTime", s)
			}
			return nil
		},
		set: func(c *Config, s string) error {
			c.MessageTimestampType = record.CreateTime
			if s == "LogAppendTime" {
				c.MessageTimestampType = record.LogAppendTime
			}
			return nil
		},
		get: func(c *Config) string { return c.MessageTimestampType.String() },
	},
	{
		Name: "min.cleanable.dirty.ratio",
		Validate: func(s string) error {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || v < 0 || v > 1 || math.IsNaN(v) {
				return fmt.Errorf("%q is not a number in [0, 1]", s)
			}
			return nil
		},
		set: func(c *Config, s string) error {
			c.MinCleanableDirtyRatio, _ = strconv.ParseFloat(strings.TrimSpace(s), 64)
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64) },
	},
	longDef("min.compaction.lag.ms", 0, math.MaxInt64,
		func(c *Config) *int64 { return &c.MinCompactionLagMs }),
	longDef("retention.bytes", -1, math.MaxInt64, func(c *Config) *int64 { return &c.RetentionBytes }),
	longDef("retention.ms", -1, math.MaxInt64, func(c *Config) *int64 { return &c.RetentionMs }),
	longDef("segment.bytes", 1024, math.MaxInt32, func(c *Config) *int64 { return &c.SegmentBytes }),
	longDef("segment.ms", 1, math.MaxInt64, func(c *Config) *int64 { return &c.SegmentMs }),
	{
		Name: "sluice.fsync.before.ack",
		Validate: func(s string) error {
			if _, err := strconv.ParseBool(strings.TrimSpace(s)); err != nil {
				return fmt.Errorf("%q is not true or false", s)
			}
			return nil
		},
		set: func(c *Config, s string) error {
			c.FsyncBeforeAck, _ = strconv.ParseBool(strings.TrimSpace(s))
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(c.FsyncBeforeAck) },
	},
}

// LookupConfig returns the definition of a config key.
func LookupConfig(name string) (ConfigDef, bool) {
	i := sort.Search(len(ConfigDefs), func(i int) bool { return ConfigDefs[i].Name >= name })
	if i < len(ConfigDefs) && ConfigDefs[i].Name == name {
		return ConfigDefs[i], true
	}
	return ConfigDef{}, false
}

// DefaultConfig returns the configuration with every default applied.
func DefaultConfig() Config {
	var c Config
	for _, d := range ConfigDefs {
		if err := d.set(&c, d.Default()); err != nil {
			panic(fmt.Sprintf("default of %s: %v", d.Name, err)) // a broken table is a programming error
		}
	}
	return c
}

// ParseConfig returns the default configuration with overrides applied; see
// ApplyConfig.
func ParseConfig(overrides map[string]string) (Config, error) {
	return ApplyConfig(DefaultConfig(), overrides)
}

// ApplyConfig returns base with overrides (Kafka config names to values)
// applied and validated. Keys the log does not use (min.insync.replicas,
// compression.type, ...) are ignored: a topic's config holds more than the
// log's part of it.
func ApplyConfig(base Config, overrides map[string]string) (Config, error) {
	var errs []error
	names := make([]string, 0, len(overrides))
	for k := range overrides {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		d, ok := LookupConfig(name)
		if !ok {
			continue
		}
		v := overrides[name]
		if err := d.Validate(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if err := d.set(&base, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return base, err
	}
	return base, base.Validate()
}

// Values returns the configuration as Kafka config names and values.
func (c Config) Values() map[string]string {
	m := make(map[string]string, len(ConfigDefs))
	for _, d := range ConfigDefs {
		m[d.Name] = d.get(&c)
	}
	return m
}

// Validate checks every field against its definition. A batch larger than
// segment.bytes is allowed: it gets a segment of its own.
func (c Config) Validate() error {
	var errs []error
	for _, d := range ConfigDefs {
		if err := d.Validate(d.get(&c)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}
