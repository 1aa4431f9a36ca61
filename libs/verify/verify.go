package verify

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/topicconfig"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// Producers is the producer mix of a run: how many producers of each kind.
type Producers struct {
	// Plain producers have idempotence off: a retried batch may be written
	// twice, which the checker counts as PlainDuplicate, not an anomaly.
	Plain int
	// Idempotent producers (the SDK's default) must never duplicate.
	Idempotent int
	// Transactional producers write multi-partition transactions, some
	// aborted on purpose, and copy records between topics with their
	// consumed offsets committed in the transaction (read-process-write).
	Transactional int
}

// Consumers is the consumer mix of a run.
type Consumers struct {
	// AssignCommitted and AssignUncommitted consumers are assigned every
	// partition of every topic and read from offset 0 with read_committed
	// and read_uncommitted isolation.
	AssignCommitted, AssignUncommitted int
	// ClassicGroup and ConsumerGroup consumers are members of one group per
	// protocol (classic JoinGroup/SyncGroup, and KIP-848's consumer
	// protocol) that read every topic and commit their positions.
	ClassicGroup, ConsumerGroup int
}

// Config configures a run. Zero fields take the defaults named on each.
type Config struct {
	// Bootstrap lists addresses of Sluice nodes (gRPC). Required.
	Bootstrap []string
	// Duration is how long producers and consumers run before the quiet
	// phase and the final reads. Required.
	Duration time.Duration
	// StopEarly, when it closes, ends the workload before Duration: the
	// quiet phase, the final reads and the checks run on what ran (an
	// operator's first Ctrl-C). Canceling Run's context instead abandons
	// the run without a report.
	StopEarly <-chan struct{}
	// Seed drives every random choice of the workload (keys, transaction
	// sizes, which transactions abort) and names the topics. Default: the
	// time the run starts.
	Seed int64
	// Topics is the number of topics. Default 3.
	Topics int
	// Partitions per topic. Default 3.
	Partitions int32
	// ReplicationFactor of the topics. Default min(3, storage nodes).
	// Topics with 3 or more replicas get min.insync.replicas=2.
	ReplicationFactor int16
	// Producers is the producer mix; all zero means Plain 1, Idempotent 2,
	// Transactional 2.
	Producers Producers
	// Consumers is the consumer mix; all zero means AssignCommitted 1,
	// AssignUncommitted 1, ClassicGroup 2, ConsumerGroup 2.
	Consumers Consumers
	// Acks is the acks of the plain producers: "all" (default; "-1" is
	// the same), "1" (the leader alone; "leader" is the same) or "0" (no
	// acknowledgement; "none" is the same). Idempotent and transactional
	// producers always use acks=all, which idempotence needs. acks=1 lets
	// a leader acknowledge records no follower has yet, which a leader
	// change can lose: with it a run shows what the checker finds when
	// records are lost (a negative control), not how the cluster keeps
	// acknowledged records.
	Acks string
	// TopicConfigs are set on every topic the run creates, over the run's
	// own defaults (min.insync.replicas=2 with 3 or more replicas). Names
	// and values are Kafka's topic configs, e.g. min.insync.replicas=1 and
	// unclean.leader.election.enable=true for a negative control.
	TopicConfigs map[string]string
	// Rate is the target number of records produced per second, over all
	// producers together. Default 500.
	Rate int
	// TopicPrefix starts every topic name. Default "verify-<seed>-".
	TopicPrefix string
	// Out is the directory the report files are written to (created if
	// missing). Empty writes no files.
	Out string
	// Logger receives progress lines. Default: discard.
	Logger *slog.Logger
	// Faults, when set, lists the faults injected during the run; they are
	// copied into the history and drawn in the timeline.
	Faults FaultSource
	// DialOptions are added to the SDK client every producer, consumer and
	// admin call of the run uses (the nemesis injects client-side faults
	// through interceptors: a late EndTxn, a member's held heartbeats).
	DialOptions []grpc.DialOption
}

// FaultSource lists the faults injected so far (the nemesis implements it).
// Faults may be called concurrently with the injection and must return a
// copy.
type FaultSource interface {
	Faults() []check.Fault
}

// OpCounts counts the operations of one kind by outcome.
type OpCounts struct {
	OK   int `json:"ok"`
	Fail int `json:"fail"`
	Info int `json:"info"`
}

// Total returns the number of operations counted.
func (c OpCounts) Total() int { return c.OK + c.Fail + c.Info }

// Latency sums up the latencies of one kind of operation that ended OK, in
// milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Files names the report files a run wrote (empty when Config.Out was).
type Files struct {
	Summary  string `json:"summary,omitempty"`
	Result   string `json:"result,omitempty"`
	History  string `json:"history,omitempty"`
	Timeline string `json:"timeline,omitempty"`
}

// Report is what a run found.
type Report struct {
	// Seed is the seed the run used.
	Seed int64 `json:"seed"`
	// Start and End bound the workload (before the quiet phase).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Result is the checker's verdict on the history.
	Result check.Result `json:"result"`
	// Ops counts operations per kind (see the Op* constants) by outcome.
	Ops map[string]OpCounts `json:"ops"`
	// Throughput is acknowledged records per second of the workload.
	Throughput float64 `json:"throughput_per_s"`
	// Latency per kind of operation that ended OK.
	Latency map[string]Latency `json:"latency"`
	// Faults injected during the run (from Config.Faults).
	Faults []check.Fault `json:"faults"`
	Files  Files         `json:"files"`

	history check.History // for the timeline
}

// Valid reports whether the checker found no anomaly.
func (r *Report) Valid() bool { return r.Result.Valid() }

// Operation kinds counted in Report.Ops and Report.Latency.
const (
	OpProducePlain      = "produce-plain"
	OpProduceIdempotent = "produce-idempotent"
	OpTxn               = "txn"
	OpInit              = "init-producer-id"
	OpPoll              = "poll"
	OpGroupCommit       = "group-commit"
	OpOffsetFetch       = "offset-fetch"
)

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(cfg.Bootstrap) == 0 {
		bad("Bootstrap: at least one address is required")
	}
	for _, a := range cfg.Bootstrap {
		if strings.TrimSpace(a) == "" {
			bad("Bootstrap: empty address")
		}
	}
	if cfg.Duration <= 0 {
		bad("Duration: must be positive, got %s", cfg.Duration)
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if cfg.Topics == 0 {
		cfg.Topics = 3
	}
	if cfg.Topics < 0 || cfg.Topics > 100 {
		bad("Topics: want 1 to 100, got %d", cfg.Topics)
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 3
	}
	if cfg.Partitions < 0 || cfg.Partitions > 1000 {
		bad("Partitions: want 1 to 1000, got %d", cfg.Partitions)
	}
	if cfg.ReplicationFactor < 0 {
		bad("ReplicationFactor: must not be negative, got %d", cfg.ReplicationFactor)
	}
	if cfg.Producers == (Producers{}) {
		cfg.Producers = Producers{Plain: 1, Idempotent: 2, Transactional: 2}
	}
	p := cfg.Producers
	if p.Plain < 0 || p.Idempotent < 0 || p.Transactional < 0 {
		bad("Producers: counts must not be negative, got %+v", p)
	}
	if cfg.Consumers == (Consumers{}) {
		cfg.Consumers = Consumers{AssignCommitted: 1, AssignUncommitted: 1, ClassicGroup: 2, ConsumerGroup: 2}
	}
	c := cfg.Consumers
	if c.AssignCommitted < 0 || c.AssignUncommitted < 0 || c.ClassicGroup < 0 || c.ConsumerGroup < 0 {
		bad("Consumers: counts must not be negative, got %+v", c)
	}
	switch cfg.Acks {
	case "", "all", "-1":
		cfg.Acks = "all"
	case "1", "leader":
		cfg.Acks = "1"
	case "0", "none":
		cfg.Acks = "0"
	default:
		bad("Acks: want all (-1), 1 (leader) or 0 (none), got %q", cfg.Acks)
	}
	if err := topicconfig.Validate(cfg.TopicConfigs); err != nil {
		bad("TopicConfigs: %v", err)
	}
	if cfg.Rate == 0 {
		cfg.Rate = 500
	}
	if cfg.Rate < 0 {
		bad("Rate: must be positive, got %d", cfg.Rate)
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = fmt.Sprintf("verify-%d-", cfg.Seed)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(problems) > 0 {
		return cfg, fmt.Errorf("verify: invalid config: %s", strings.Join(problems, "; "))
	}
	return cfg, nil
}
