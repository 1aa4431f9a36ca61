// Package topicconfig is the table of topic configuration entries: Kafka's
// names, types, defaults and documentation, and their validation. The
// controller validates and describes configs with it; storage nodes resolve
// a topic's effective settings with it. An entry's value comes from the
// topic's override, else the cluster-wide dynamic default (set on the broker
// resource under Kafka's broker name, such as log.retention.ms), else the
// built-in default.
package topicconfig

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Kind is a config value's type.
type Kind int

// Value kinds.
const (
	Long Kind = iota
	Int
	Bool
	Double
	String
	List
)

// Def describes one topic configuration entry.
type Def struct {
	// Name is the topic-level name (retention.ms).
	Name string
	// BrokerName is the cluster-wide default's name (log.retention.ms), or
	// empty when there is none.
	BrokerName string
	Kind       Kind
	Default    string
	Doc        string
	// Min and Max bound numeric values (inclusive).
	Min, Max float64
	// Allowed lists the accepted values of String and List entries.
	Allowed []string
}

const maxLong = math.MaxInt64

var defs = []Def{
	{Name: "cleanup.policy", BrokerName: "log.cleanup.policy", Kind: List, Default: "delete", Allowed: []string{"delete", "compact"},
		Doc: "delete: drop old segments by retention.ms/retention.bytes; compact: keep the latest record per key; both: compact,delete."},
	{Name: "compression.type", BrokerName: "compression.type", Kind: String, Default: "producer",
		Allowed: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
		Doc:     "Codec batches are stored with; producer keeps the producer's codec (no recompression)."},
	{Name: "delete.retention.ms", BrokerName: "log.cleaner.delete.retention.ms", Kind: Long, Default: "86400000", Min: 0, Max: maxLong,
		Doc: "How long tombstones are kept on compacted topics, so consumers that lag see the delete."},
	{Name: "flush.messages", BrokerName: "log.flush.interval.messages", Kind: Long, Default: strconv.FormatInt(maxLong, 10), Min: 1, Max: maxLong,
		Doc: "fsync after this many records; the default leaves durability to replication."},
	{Name: "flush.ms", BrokerName: "log.flush.interval.ms", Kind: Long, Default: strconv.FormatInt(maxLong, 10), Min: 0, Max: maxLong,
		Doc: "fsync at least this often (milliseconds); the default leaves durability to replication."},
	{Name: "max.compaction.lag.ms", BrokerName: "log.cleaner.max.compaction.lag.ms", Kind: Long, Default: strconv.FormatInt(maxLong, 10), Min: 1, Max: maxLong,
		Doc: "Longest a record may stay uncompacted."},
	{Name: "max.message.bytes", BrokerName: "message.max.bytes", Kind: Int, Default: "1048588", Min: 0, Max: math.MaxInt32,
		Doc: "Largest record batch the topic accepts, after compression."},
	{Name: "message.timestamp.type", BrokerName: "log.message.timestamp.type", Kind: String, Default: "CreateTime",
		Allowed: []string{"CreateTime", "LogAppendTime"}, Doc: "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the leader's clock."},
	{Name: "message.timestamp.before.max.ms", BrokerName: "log.message.timestamp.before.max.ms", Kind: Long, Default: strconv.FormatInt(maxLong, 10), Min: 0, Max: maxLong,
		Doc: "How far in the past a CreateTime timestamp may be."},
	{Name: "message.timestamp.after.max.ms", BrokerName: "log.message.timestamp.after.max.ms", Kind: Long, Default: "3600000", Min: 0, Max: maxLong,
		Doc: "How far in the future a CreateTime timestamp may be."},
	{Name: "min.cleanable.dirty.ratio", BrokerName: "log.cleaner.min.cleanable.ratio", Kind: Double, Default: "0.5", Min: 0, Max: 1,
		Doc: "Share of uncompacted bytes that triggers compaction."},
	{Name: "min.compaction.lag.ms", BrokerName: "log.cleaner.min.compaction.lag.ms", Kind: Long, Default: "0", Min: 0, Max: maxLong,
		Doc: "Shortest time a record stays uncompacted."},
	{Name: "min.insync.replicas", BrokerName: "min.insync.replicas", Kind: Int, Default: "1", Min: 1, Max: math.MaxInt32,
		Doc: "With acks=all, the fewest in-sync replicas that must have a record before it is acknowledged."},
	{Name: "retention.bytes", BrokerName: "log.retention.bytes", Kind: Long, Default: "-1", Min: -1, Max: maxLong,
		Doc: "Largest size of a partition before old segments are deleted; -1 for no limit."},
	{Name: "retention.ms", BrokerName: "log.retention.ms", Kind: Long, Default: "604800000", Min: -1, Max: maxLong,
		Doc: "How long records are kept (7 days by default); -1 keeps them forever."},
	{Name: "segment.bytes", BrokerName: "log.segment.bytes", Kind: Int, Default: "1073741824", Min: 1 << 14, Max: math.MaxInt32,
		Doc: "Size at which a segment file is rolled."},
	{Name: "segment.index.bytes", BrokerName: "log.index.size.max.bytes", Kind: Int, Default: "10485760", Min: 4096, Max: math.MaxInt32,
		Doc: "Largest size of a segment's offset index."},
	{Name: "segment.ms", BrokerName: "log.roll.ms", Kind: Long, Default: "604800000", Min: 1, Max: maxLong,
		Doc: "Age at which a segment is rolled even if not full."},
	{Name: "unclean.leader.election.enable", BrokerName: "unclean.leader.election.enable", Kind: Bool, Default: "false",
		Doc: "Elect an out-of-sync replica when no in-sync one is alive, losing records; off by default."},
	{Name: "sluice.fsync.before.ack", BrokerName: "sluice.fsync.before.ack", Kind: Bool, Default: "true",
		Doc: "acks=all produces are acknowledged only once every in-sync replica has fsynced them (group commit: one fdatasync covers every batch waiting at that moment), so acknowledged records survive power loss; acks=1 and acks=0 never wait for an fsync. false leaves durability to replication alone."},
	{Name: "index.interval.bytes", BrokerName: "log.index.interval.bytes", Kind: Int, Default: "4096", Min: 0, Max: math.MaxInt32,
		Doc: "Bytes of batches between two entries of the sparse offset index."},
}

var byName, byBrokerName = func() (map[string]Def, map[string]Def) {
	a, b := map[string]Def{}, map[string]Def{}
	for _, d := range defs {
		a[d.Name] = d
		if d.BrokerName != "" {
			b[d.BrokerName] = d
		}
	}
	return a, b
}()

// All returns every entry, sorted by name.
func All() []Def {
	out := slices.Clone(defs)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the entry with a topic-level name.
func Lookup(name string) (Def, bool) { d, ok := byName[name]; return d, ok }

// LookupBroker returns the entry whose cluster-wide default has this name.
// Dynamic cluster configs that are no topic's default (ClusterOnly) are
// found too.
func LookupBroker(name string) (Def, bool) {
	if d, ok := byBrokerName[name]; ok {
		return d, true
	}
	for _, d := range clusterDefs {
		if d.BrokerName == name {
			return d, true
		}
	}
	return Def{}, false
}

// Check validates one value.
func (d Def) Check(v string) error {
	switch d.Kind {
	case Long, Int:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", d.Name, v)
		}
		if float64(n) < d.Min || float64(n) > d.Max {
			return fmt.Errorf("%s: %d is outside %s", d.Name, n, d.rangeText())
		}
	case Double:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", d.Name, v)
		}
		if f < d.Min || f > d.Max {
			return fmt.Errorf("%s: %v is outside %s", d.Name, f, d.rangeText())
		}
	case Bool:
		if v != "true" && v != "false" {
			return fmt.Errorf("%s: %q is not true or false", d.Name, v)
		}
	case String:
		if !slices.Contains(d.Allowed, v) {
			return fmt.Errorf("%s: %q is not one of %s", d.Name, v, strings.Join(d.Allowed, ", "))
		}
	case List:
		parts := SplitList(v)
		if len(parts) == 0 {
			return fmt.Errorf("%s: must name at least one of %s", d.Name, strings.Join(d.Allowed, ", "))
		}
		for _, p := range parts {
			if !slices.Contains(d.Allowed, p) {
				return fmt.Errorf("%s: %q is not one of %s", d.Name, p, strings.Join(d.Allowed, ", "))
			}
		}
	}
	return nil
}

func (d Def) rangeText() string {
	f := func(x float64) string {
		if x >= maxLong {
			return "9223372036854775807"
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return "[" + f(d.Min) + ", " + f(d.Max) + "]"
}

// SplitList splits a comma-separated list value.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks topic overrides: every name must be known and every value
// valid. The error is INVALID_CONFIG naming each problem.
func Validate(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	sort.Strings(names)
	var problems []string
	for _, n := range names {
		d, ok := byName[n]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: unknown topic config (known: %s)", n, knownNames()))
			continue
		}
		if err := d.Check(configs[n]); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errs.New(errs.InvalidConfig, "%s", strings.Join(problems, "; "))
	}
	return nil
}

func knownNames() string {
	var names []string
	for _, d := range All() {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

// Source says where an effective value came from.
type Source int

// Sources, most specific first.
const (
	FromTopic Source = iota
	FromClusterDefault
	FromBuiltin
)

// Resolve returns the effective value of name for a topic with the given
// overrides, under the cluster-wide dynamic defaults (keyed by broker
// names).
func Resolve(name string, topic, cluster map[string]string) (string, Source) {
	if v, ok := topic[name]; ok {
		return v, FromTopic
	}
	d, ok := byName[name]
	if !ok {
		return "", FromBuiltin
	}
	if v, ok := cluster[d.BrokerName]; ok && d.BrokerName != "" {
		return v, FromClusterDefault
	}
	return d.Default, FromBuiltin
}

// Effective returns every entry's effective value for a topic.
func Effective(topic, cluster map[string]string) map[string]string {
	out := make(map[string]string, len(defs))
	for _, d := range defs {
		out[d.Name], _ = Resolve(d.Name, topic, cluster)
	}
	return out
}

// CheckMinInsyncReplicas refuses a topic whose effective
// min.insync.replicas (its override, else the cluster-wide default) is above
// its replication factor rf: no acks=all produce to it could ever be
// acknowledged. Kafka accepts such a setting and fails every acks=all
// produce with NOT_ENOUGH_REPLICAS afterwards; Sluice refuses the change
// that would create it (topic create, alter of the topic's configs, alter
// of the cluster-wide default) with INVALID_CONFIG.
func CheckMinInsyncReplicas(topic string, overrides, cluster map[string]string, rf int) error {
	v, src := Resolve("min.insync.replicas", overrides, cluster)
	n, err := strconv.Atoi(v)
	if err != nil || n <= rf {
		return nil // a malformed value is Validate's to report
	}
	if src == FromClusterDefault {
		return errs.New(errs.InvalidConfig,
			"topic %q: the cluster-wide default min.insync.replicas %d is larger than the topic's replication factor %d, so no acks=all produce could succeed; "+
				"set min.insync.replicas on the topic to at most %d, or raise its replication factor", topic, n, rf, rf)
	}
	return errs.New(errs.InvalidConfig,
		"topic %q: min.insync.replicas %d is larger than the replication factor %d, so no acks=all produce could succeed; "+
			"set it to at most %d, or raise the replication factor", topic, n, rf, rf)
}
