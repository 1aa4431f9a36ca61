package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what a step does to its target.
type Kind string

// The fault kinds. Each is undone at the end of its step's Duration, so
// steps never overlap and the cluster is whole between them.
const (
	// Kill sends SIGKILL, waits Duration, and starts the process again.
	Kill Kind = "kill"
	// Pause sends SIGSTOP, waits Duration (planned longer than the session
	// timeout, so the process comes back as a zombie whose leases and
	// sessions expired), then SIGCONT.
	Pause Kind = "pause"
	// Crash asks the process (started with --unsafe.fault-injection) to
	// drop every byte it has not fsynced and exit at once, waits Duration,
	// and starts it again.
	Crash Kind = "crash"
	// Partition drops every packet between the target and the other
	// processes (Detail "isolate"), a random subset of them (Detail
	// "subset") or the other storage nodes (Detail "storage": it still
	// hears the controller) with nftables in its network namespace, then
	// heals.
	// Clients (on the bridge) still reach every process.
	Partition Kind = "partition"
	// Disk makes the target's writes fail with ENOSPC or its fsyncs slow
	// (Detail "enospc" or "slow-sync") for Duration, through the
	// fault-injection endpoint.
	Disk Kind = "disk"
	// Clock shifts the target's clock by Detail (such as "-30s") for
	// Duration, then shifts it back.
	Clock Kind = "clock"
	// Delay slows down the target's gRPC calls to a peer process: each
	// message either way waits a delay plus jitter (Detail is a Link, such
	// as "to=storage-leader delay=100ms jitter=50ms"), through the
	// fault-injection endpoint's link fault, for Duration.
	Delay Kind = "delay"
	// Duplicate sends each of the target's unary gRPC requests to a peer a
	// second time with a probability (Detail is a Link, such as
	// "to=storage-leader dup=0.5"), after the original was answered, for
	// Duration.
	Duplicate Kind = "duplicate"
	// Move reassigns a partition of a workload topic (its replicas rotated,
	// so another replica becomes the preferred leader) and runs a preferred
	// election: membership change through the admin API.
	Move Kind = "move"
	// LateEndTxn delivers a second copy of each committed EndTxn late,
	// after the producer's next transaction began (client side; see
	// ClientFaults).
	LateEndTxn Kind = "late-endtxn"
	// StallMember holds one group member's heartbeats past its session
	// timeout while it goes on committing (client side; see ClientFaults).
	// Detail, if set, restricts it to groups whose id contains it.
	StallMember Kind = "stall-member"
	// LateCommit delivers a second copy of a member's acknowledged offset
	// commit late, once the member has committed in a newer generation, for
	// groups whose id contains Detail (client side; see ClientFaults).
	LateCommit Kind = "late-commit"
)

// Kinds lists every kind in a fixed order.
var Kinds = []Kind{Kill, Pause, Crash, Partition, Disk, Clock, Delay, Duplicate, Move, LateEndTxn, StallMember, LateCommit}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown fault kind %q (known: %s)", s, joinKinds(Kinds))
}

func joinKinds(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Role selects the process a step hits, resolved when the step starts
// (leaders move, so the plan names roles, not processes).
type Role string

// The roles a step can target.
const (
	// Controller is the active controller (any controller if none is
	// known).
	Controller Role = "controller"
	// StandbyController is a controller that is not the active one.
	StandbyController Role = "standby-controller"
	// StorageLeader is the leader of a workload topic's partition (any
	// storage node if none is known).
	StorageLeader Role = "storage-leader"
	// StorageFollower is a storage node that leads no partition of the
	// chosen workload partition but holds a replica of it.
	StorageFollower Role = "storage-follower"
	// ReplicationWorker is a replication worker of its own process (a
	// storage node where replication runs inside storage nodes).
	ReplicationWorker Role = "replication"
	// GroupCoordinator is the coordinator of a workload consumer group.
	GroupCoordinator Role = "group-coordinator"
	// TxnCoordinator is a transaction coordinator.
	TxnCoordinator Role = "txn-coordinator"
	// AnyProcess is any process.
	AnyProcess Role = "any"
	// Clients are the workload's clients (client-side faults).
	Clients Role = "client"
)

// Roles lists every role in a fixed order.
var Roles = []Role{Controller, StandbyController, StorageLeader, StorageFollower, ReplicationWorker, GroupCoordinator, TxnCoordinator, AnyProcess, Clients}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown target role %q (known: %s)", s, strings.Join(names, ", "))
}

// Step is one fault of a schedule.
type Step struct {
	// At is when the fault starts, from the start of the run.
	At time.Duration `json:"at"`
	// Kind is the fault.
	Kind Kind `json:"kind"`
	// Target is the role of the process it hits.
	Target Role `json:"target"`
	// Duration is how long the fault lasts before it is undone.
	Duration time.Duration `json:"duration"`
	// Detail refines the kind: "isolate" or "subset" for partitions,
	// "enospc" or "slow-sync" for disk faults, the offset for clock faults,
	// "drop-unsynced" for crashes, a Link for delays and duplicates.
	Detail string `json:"detail,omitempty"`
}

// String renders a step as one line, as schedules are logged.
func (s Step) String() string {
	out := fmt.Sprintf("at %v %s %s for %v", s.At, s.Kind, s.Target, s.Duration)
	if s.Detail != "" {
		out += " (" + s.Detail + ")"
	}
	return out
}

// Validate checks a step's fields.
func (s Step) Validate() error {
	if _, err := ParseKind(string(s.Kind)); err != nil {
		return err
	}
	if _, err := ParseRole(string(s.Target)); err != nil {
		return err
	}
	if s.At < 0 || s.Duration < 0 {
		return fmt.Errorf("step %q: negative time", s)
	}
	switch s.Kind {
	case Partition:
		if s.Detail != "isolate" && s.Detail != "subset" && s.Detail != "storage" {
			return fmt.Errorf("step %q: a partition's detail is isolate, subset or storage", s)
		}
	case Disk:
		if s.Detail != "enospc" && s.Detail != "slow-sync" {
			return fmt.Errorf("step %q: a disk fault's detail is enospc or slow-sync", s)
		}
	case Delay, Duplicate:
		return validateLink(s)
	case LateEndTxn, StallMember, LateCommit:
		if s.Target != Clients {
			return fmt.Errorf("step %q: a client-side fault targets %s", s, Clients)
		}
	case Clock:
		if _, err := time.ParseDuration(s.Detail); err != nil {
			return fmt.Errorf("step %q: a clock fault's detail is an offset such as -30s: %v", s, err)
		}
	}
	return nil
}

// PlanOptions shape a generated schedule.
type PlanOptions struct {
	// Duration is the length of the faulty phase: every step is undone
	// before it ends. Required.
	Duration time.Duration
	// Warmup is the time before the first fault (default 3 s), so the
	// workload is running when it hits.
	Warmup time.Duration
	// Gap is the least time between the end of one step and the start of
	// the next (default 2 s); the planner adds up to another Gap at random.
	Gap time.Duration
	// Kinds to draw from (default kill, pause and crash, plus partition
	// when Partitions is set).
	Kinds []Kind
	// Partitions allows partition steps (network namespaces are in place).
	Partitions bool
	// Targets to draw from (default the active controller and storage
	// leaders, and coordinators when Coordinators is set).
	Targets []Role
	// Links are the links Delay steps draw from, in place of Targets
	// (default DefaultLinks); DuplicateLinks those of Duplicate steps
	// (default DefaultDuplicateLinks).
	Links, DuplicateLinks []LinkPair
	// SessionTimeout is the controller's session timeout: pauses last
	// longer (default 3 s).
	SessionTimeout time.Duration
	// MinFault and MaxFault bound a kill's, crash's, partition's or disk
	// fault's length (default 2 s and 6 s).
	MinFault, MaxFault time.Duration
	// MaxSteps caps the schedule (0 = no cap).
	MaxSteps int
}

func (o *PlanOptions) defaults() {
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Gap == 0 {
		o.Gap = 2 * time.Second
	}
	if len(o.Kinds) == 0 {
		o.Kinds = []Kind{Kill, Pause, Crash}
		if o.Partitions {
			o.Kinds = append(o.Kinds, Partition)
		}
	}
	if len(o.Targets) == 0 {
		o.Targets = []Role{StorageLeader, StorageLeader, Controller}
	}
	if len(o.Links) == 0 {
		o.Links = DefaultLinks
	}
	if len(o.DuplicateLinks) == 0 {
		o.DuplicateLinks = DefaultDuplicateLinks
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 3 * time.Second
	}
	if o.MinFault == 0 {
		o.MinFault = 2 * time.Second
	}
	if o.MaxFault < o.MinFault {
		o.MaxFault = max(6*time.Second, o.MinFault)
	}
}

// Validate checks the options.
func (o PlanOptions) Validate() error {
	if o.Duration <= 0 {
		return fmt.Errorf("plan duration must be positive, got %v", o.Duration)
	}
	for _, k := range o.Kinds {
		if _, err := ParseKind(string(k)); err != nil {
			return err
		}
		if k == Partition && !o.Partitions {
			return fmt.Errorf("partition steps need network namespaces (PlanOptions.Partitions)")
		}
	}
	for _, r := range o.Targets {
		if _, err := ParseRole(string(r)); err != nil {
			return err
		}
	}
	for _, p := range slices.Concat(o.Links, o.DuplicateLinks) {
		for _, r := range []Role{p.From, p.To} {
			if _, err := ParseRole(string(r)); err != nil {
				return err
			}
		}
		if p.From == Clients || p.To == Clients {
			return fmt.Errorf("link %s -> %s: links are between processes, not the workload's clients", p.From, p.To)
		}
	}
	if o.Warmup < 0 || o.Gap < 0 || o.MinFault < 0 || o.MaxFault < 0 || o.SessionTimeout < 0 {
		return fmt.Errorf("plan times cannot be negative")
	}
	return nil
}

// Plan returns the schedule of seed: the same seed and options always give
// the same steps, so a failing run replays. Steps follow each other with a
// gap, and the last one ends before o.Duration.
func Plan(seed int64, o PlanOptions) ([]Step, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.defaults()
	// The stream constant keeps plans apart from other users of the seed
	// (the workload draws its own numbers from it).
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e656d65736973))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var steps []Step
	t := o.Warmup
	for o.MaxSteps == 0 || len(steps) < o.MaxSteps {
		s := Step{At: t, Kind: o.Kinds[rng.IntN(len(o.Kinds))], Target: o.Targets[rng.IntN(len(o.Targets))]}
		switch s.Kind {
		case Pause:
			s.Duration = o.SessionTimeout + between(time.Second, 3*time.Second)
		case Partition:
			s.Duration = o.SessionTimeout + between(time.Second, 3*time.Second)
			s.Detail = []string{"isolate", "subset"}[rng.IntN(2)]
		case Disk:
			s.Target = storageRole(rng)
			s.Duration = between(o.MinFault, o.MaxFault)
			s.Detail = []string{"enospc", "slow-sync"}[rng.IntN(2)]
		case Clock:
			s.Target = storageRole(rng)
			s.Duration = between(o.MinFault, o.MaxFault)
			s.Detail = []string{"-30s", "30s", "-5m", "5m"}[rng.IntN(4)]
		case Crash:
			s.Target = storageRole(rng)
			s.Duration = between(o.MinFault, o.MaxFault)
			s.Detail = "drop-unsynced"
		case Delay:
			planLink(&s, o.Links, rng)
			s.Duration = between(o.MinFault, o.MaxFault)
		case Duplicate:
			planLink(&s, o.DuplicateLinks, rng)
			s.Duration = between(o.MinFault, o.MaxFault)
		case Move:
			s.Target = StorageLeader
			s.Duration = 0
		case LateEndTxn, StallMember:
			s.Target = Clients
			s.Duration = o.SessionTimeout + between(time.Second, 3*time.Second)
		case LateCommit:
			// Only classic groups: the consumer protocol accepts an older
			// member epoch from a partition's owner (KIP-1251), so a late
			// copy there may be a legitimate regression.
			s.Target = Clients
			s.Duration = o.SessionTimeout + between(time.Second, 3*time.Second)
			s.Detail = "classic"
		default:
			s.Duration = between(o.MinFault, o.MaxFault)
		}
		if s.At+s.Duration > o.Duration {
			break
		}
		steps = append(steps, s)
		t = s.At + s.Duration + o.Gap + between(0, o.Gap)
	}
	return steps, nil
}

// storageRole picks the storage role of a fault that goes through the
// storage layer's fault file system (crash, disk, clock): processes without
// storage refuse them.
func storageRole(rng *rand.Rand) Role {
	return []Role{StorageLeader, StorageFollower}[rng.IntN(2)]
}

// Counts returns how many steps of each kind a schedule has.
func Counts(steps []Step) map[Kind]int {
	out := map[Kind]int{}
	for _, s := range steps {
		out[s.Kind]++
	}
	return out
}

// Sorted returns the steps ordered by start time (stable for equal
// starts).
func Sorted(steps []Step) []Step {
	out := slices.Clone(steps)
	slices.SortStableFunc(out, func(a, b Step) int { return int(a.At - b.At) })
	return out
}
