package nemesis

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Link is the detail of a Delay or Duplicate step: the step's target
// process slows down (Delay plus up to Jitter per message, either way) or
// duplicates (each unary request sent twice with probability Duplicate)
// its gRPC calls to the process that plays To, through the
// fault-injection endpoint's link fault. Written in a step's Detail as
// "to=storage-leader delay=100ms jitter=50ms dup=0.5" (fields left out are
// zero).
type Link struct {
	// To is the role of the peer, resolved when the step starts (a
	// follower of a partition the target leads, the leader of one it
	// follows, the active controller, ...); AnyProcess means every peer.
	To            Role
	Delay, Jitter time.Duration
	Duplicate     float64
}

// LinkPair is a link a plan may draw: calls of From's process to To's.
type LinkPair struct {
	From, To Role
}

// DefaultLinks are the links Delay steps draw from when PlanOptions.Links
// is empty: the follower's replication fetches from its leader (the
// leader's batches reach it late), a storage node's heartbeats, metadata
// watch and ISR changes with the controller, and the coordinators' calls
// to every peer (transaction markers to the workload's leaders, writes to
// the leaders of the offsets and transaction logs, producer id blocks from
// the controller).
var DefaultLinks = []LinkPair{
	{StorageFollower, StorageLeader},
	{StorageLeader, Controller},
	{TxnCoordinator, AnyProcess},
	{GroupCoordinator, AnyProcess},
}

// DefaultDuplicateLinks are the links Duplicate steps draw from when
// PlanOptions.DuplicateLinks is empty. Only unary requests are sent twice,
// so these are the processes that make them: the coordinators (markers,
// log writes) and a storage node (ISR changes, and the calls of the
// coordinators it hosts), each to every peer.
var DefaultDuplicateLinks = []LinkPair{
	{TxnCoordinator, AnyProcess},
	{GroupCoordinator, AnyProcess},
	{StorageLeader, AnyProcess},
}

// String renders l as a step's Detail.
func (l Link) String() string {
	parts := []string{"to=" + string(l.To)}
	if l.Delay != 0 {
		parts = append(parts, "delay="+l.Delay.String())
	}
	if l.Jitter != 0 {
		parts = append(parts, "jitter="+l.Jitter.String())
	}
	if l.Duplicate != 0 {
		parts = append(parts, "dup="+strconv.FormatFloat(l.Duplicate, 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

// ParseLink reads a Link from a step's Detail.
func ParseLink(s string) (Link, error) {
	var l Link
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return l, fmt.Errorf("link %q: %q is not key=value (to, delay, jitter, dup)", s, f)
		}
		var err error
		switch k {
		case "to":
			l.To, err = ParseRole(v)
		case "delay":
			l.Delay, err = time.ParseDuration(v)
		case "jitter":
			l.Jitter, err = time.ParseDuration(v)
		case "dup":
			l.Duplicate, err = strconv.ParseFloat(v, 64)
		default:
			err = fmt.Errorf("unknown key %q (to, delay, jitter, dup)", k)
		}
		if err != nil {
			return l, fmt.Errorf("link %q: %w", s, err)
		}
	}
	switch {
	case l.To == "":
		return l, fmt.Errorf("link %q: to=<role> is required", s)
	case l.To == Clients:
		return l, fmt.Errorf("link %q: the workload's clients are not a peer of a process", s)
	case l.Delay < 0 || l.Jitter < 0:
		return l, fmt.Errorf("link %q: negative delay", s)
	case l.Delay > time.Minute || l.Jitter > time.Minute:
		return l, fmt.Errorf("link %q: delay and jitter are at most 1m", s)
	case !(l.Duplicate >= 0 && l.Duplicate <= 1):
		return l, fmt.Errorf("link %q: dup is a probability between 0 and 1", s)
	}
	return l, nil
}

// validateLink checks the detail of a Delay or Duplicate step.
func validateLink(s Step) error {
	l, err := ParseLink(s.Detail)
	if err != nil {
		return fmt.Errorf("step %q: %w", s, err)
	}
	if s.Kind == Delay && l.Delay == 0 && l.Jitter == 0 {
		return fmt.Errorf("step %q: a delay step needs delay= or jitter=", s)
	}
	if s.Kind == Duplicate && l.Duplicate == 0 {
		return fmt.Errorf("step %q: a duplicate step needs dup=", s)
	}
	if s.Target == Clients {
		return fmt.Errorf("step %q: a link starts at a process, not at the workload's clients", s)
	}
	return nil
}

// planLink draws a link step's target and detail.
func planLink(s *Step, links []LinkPair, rng *rand.Rand) {
	p := links[rng.IntN(len(links))]
	s.Target = p.From
	l := Link{To: p.To}
	if s.Kind == Delay {
		// Well below the session and lag timeouts: a slow link, not a cut.
		l.Delay = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}[rng.IntN(4)]
		l.Jitter = l.Delay / 2
	} else {
		l.Duplicate = []float64{0.2, 0.5, 1}[rng.IntN(3)]
	}
	s.Detail = l.String()
}
