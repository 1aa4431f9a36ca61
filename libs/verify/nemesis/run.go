package nemesis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// Victim is the process a step hit and why it was chosen.
type Victim struct {
	// Name is the process name, such as "storage-2".
	Name string
	// Why says which role it played, such as "leader of t/1" or "active
	// controller"; "" when the role could not be found and any process of
	// the kind was taken.
	Why string
}

// Target is the cluster a schedule runs against. ClusterTarget implements
// it over libs/devcluster; tests use fakes.
type Target interface {
	// Resolve picks the process that plays role now, passing over the
	// processes in busy (under another fault at the moment) where it can.
	// When no process can be taken its error wraps ErrNoTarget.
	Resolve(ctx context.Context, role Role, busy map[string]bool, rng *rand.Rand) (Victim, error)
	// Kill sends SIGKILL and waits for the exit.
	Kill(ctx context.Context, name string) error
	// Start starts a process that exited and waits until it is healthy.
	Start(ctx context.Context, name string) error
	// Pause sends SIGSTOP; Resume sends SIGCONT.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	// Crash makes the process drop its unsynced bytes (if dropUnsynced)
	// and exit at once.
	Crash(ctx context.Context, name string, dropUnsynced bool) error
	// Peers returns the names of every other process, or with storageOnly
	// of the other storage nodes.
	Peers(name string, storageOnly bool) []string
	// Isolate drops all traffic between name and the processes in from;
	// Heal lifts it.
	Isolate(ctx context.Context, name string, from []string) error
	Heal(ctx context.Context, name string) error
	// Disk injects a disk fault ("enospc" or "slow-sync") for d.
	Disk(ctx context.Context, name, detail string, d time.Duration) error
	// Clock shifts the process's clock by offset.
	Clock(ctx context.Context, name string, offset time.Duration) error
	// Clear removes every injected fault of the process.
	Clear(ctx context.Context, name string) error
	// Peer picks the process that plays role now as a peer of from (for
	// a storage follower, one that follows a partition from leads; for a
	// storage leader, the leader of one from follows), never from itself.
	// For AnyProcess it returns the Victim named "*": every peer. When no
	// process can be taken its error wraps ErrNoTarget.
	Peer(ctx context.Context, role Role, from string, rng *rand.Rand) (Victim, error)
	// Link slows down or duplicates name's calls to peer (a process name,
	// or "*" for every peer) for d; Clear lifts it.
	Link(ctx context.Context, name, peer string, l Link, d time.Duration) error
	// Move reassigns one workload partition so another replica leads it and
	// says which.
	Move(ctx context.Context, rng *rand.Rand) (string, error)
	// StartClientFault turns on a client-side fault (LateEndTxn,
	// StallMember) for d; StopClientFault turns it off and describes what
	// it did.
	StartClientFault(ctx context.Context, k Kind, detail string, d time.Duration) error
	StopClientFault(k Kind) string
}

// Log collects the faults a run injected. It implements
// verify.FaultSource: hand it to verify.Config.Faults, and pass its Add to
// Run.
type Log struct {
	mu     sync.Mutex
	faults []check.Fault
}

// Add records a fault.
func (l *Log) Add(f check.Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

// Faults returns the faults recorded so far, in the order they ended.
func (l *Log) Faults() []check.Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.faults)
}

// undoTimeout bounds undoing a fault after the run was cancelled.
const undoTimeout = 90 * time.Second

// targetWait bounds how long a step waits for a process of its role: one
// that another step killed counts again once it has restarted and is
// healthy (that step releases it then). A variable for tests.
var targetWait = 15 * time.Second

// SkippedError is a step that was not run because no process played its
// role within targetWait (the only process of the role down and not
// coming back, say). It says nothing about the system under test: Run
// returns it among its errors and Skipped tells it from failures.
type SkippedError struct {
	Step   Step
	Reason error
}

func (e *SkippedError) Error() string {
	return fmt.Sprintf("step %s skipped: %v", e.Step, e.Reason)
}

func (e *SkippedError) Unwrap() error { return e.Reason }

// Skipped splits an error of Run into the steps skipped for want of a
// target and the failures (nil when there are none).
func Skipped(err error) ([]*SkippedError, error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var skipped []*SkippedError
	var failed []error
	for _, e := range errs {
		if se, ok := e.(*SkippedError); ok {
			skipped = append(skipped, se)
		} else {
			failed = append(failed, e)
		}
	}
	return skipped, errors.Join(failed...)
}

// Run executes steps against target, each at its At from now. Steps that
// overlap in time run at the same time (Plan never makes such schedules;
// hand-written ones may, such as a second leader killed while the first
// is down). Every fault is undone at the end of its Duration, and also when
// ctx ends, so the cluster is whole when Run returns. log gets each fault
// when it has been undone, with its start and end times. Run goes on after
// a step fails and returns every failure joined; a fault that could not be
// undone (a process that did not come back) is among them. A step whose
// role no running process played within targetWait is skipped and returned
// as a *SkippedError (see Skipped).
func Run(ctx context.Context, steps []Step, target Target, log func(check.Fault)) error {
	for _, s := range steps {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	steps = Sorted(steps)
	// Role resolution draws from generators seeded by the schedule, so a
	// replayed schedule picks the same partitions.
	h := fnv.New64a()
	for _, s := range steps {
		fmt.Fprint(h, s.String())
	}
	seed := h.Sum64()
	start := time.Now()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	b := &busySet{names: map[string]bool{}}
	for i, s := range steps {
		if wait := time.Until(start.Add(s.At)); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			err := runStep(ctx, s, target, b, rng, log)
			var se *SkippedError
			if errors.As(err, &se) {
				err = se
			} else if err != nil {
				err = fmt.Errorf("step %d (%s): %w", i+1, s, err)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runStep injects one fault, waits its duration (or until ctx ends) and
// undoes it.
func runStep(ctx context.Context, s Step, t Target, busy *busySet, rng *rand.Rand, log func(check.Fault)) error {
	f := check.Fault{Kind: string(s.Kind), Detail: string(s.Target)}
	if s.Detail != "" {
		f.Detail += "; " + s.Detail
	}
	if s.Kind == Move {
		f.Start = time.Now().UnixNano()
		what, err := t.Move(ctx, rng)
		f.End = time.Now().UnixNano()
		if err != nil {
			return err
		}
		f.Target, f.Detail = what, string(s.Target)
		log(f)
		return nil
	}
	if s.Target == Clients {
		f.Target = string(Clients)
		f.Start = time.Now().UnixNano()
		if err := t.StartClientFault(ctx, s.Kind, s.Detail, s.Duration); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.Duration):
		}
		f.Detail = t.StopClientFault(s.Kind)
		f.End = time.Now().UnixNano()
		log(f)
		return nil
	}
	v, err := busy.resolve(ctx, t, s.Target, rng, targetWait)
	if errors.Is(err, ErrNoTarget) {
		// A nemesis that finds nothing to hit is no finding about the
		// system: the step is left out, with the reason.
		return &SkippedError{Step: s, Reason: fmt.Errorf("finding the %s for %v: %w", s.Target, targetWait, err)}
	}
	if err != nil {
		return fmt.Errorf("finding the %s: %w", s.Target, err)
	}
	defer busy.release(v.Name)
	f.Target = v.Name
	if v.Why != "" {
		f.Detail = v.Why
		if s.Detail != "" {
			f.Detail += "; " + s.Detail
		}
	}
	var undo func(context.Context) error
	f.Start = time.Now().UnixNano()
	switch s.Kind {
	case Kill:
		err = t.Kill(ctx, v.Name)
		undo = func(ctx context.Context) error { return t.Start(ctx, v.Name) }
	case Crash:
		err = t.Crash(ctx, v.Name, s.Detail == "drop-unsynced")
		undo = func(ctx context.Context) error { return t.Start(ctx, v.Name) }
	case Pause:
		err = t.Pause(ctx, v.Name)
		undo = func(ctx context.Context) error { return t.Resume(ctx, v.Name) }
	case Partition:
		from := t.Peers(v.Name, s.Detail == "storage")
		if s.Detail == "subset" && len(from) > 1 {
			rng.Shuffle(len(from), func(i, j int) { from[i], from[j] = from[j], from[i] })
			from = from[:1+rng.IntN(len(from)-1)]
			slices.Sort(from)
		}
		f.Detail += fmt.Sprintf("; cut from %v", from)
		err = t.Isolate(ctx, v.Name, from)
		undo = func(ctx context.Context) error { return t.Heal(ctx, v.Name) }
	case Disk:
		err = t.Disk(ctx, v.Name, s.Detail, s.Duration)
		undo = func(ctx context.Context) error { return t.Clear(ctx, v.Name) }
	case Clock:
		off, _ := time.ParseDuration(s.Detail) // checked by Validate
		err = t.Clock(ctx, v.Name, off)
		undo = func(ctx context.Context) error { return t.Clock(ctx, v.Name, 0) }
	case Delay, Duplicate:
		l, _ := ParseLink(s.Detail) // checked by Validate
		p, perr := t.Peer(ctx, l.To, v.Name, rng)
		if errors.Is(perr, ErrNoTarget) {
			return &SkippedError{Step: s, Reason: fmt.Errorf("finding the %s peer of %s: %w", l.To, v.Name, perr)}
		}
		if perr != nil {
			return fmt.Errorf("finding the %s peer of %s: %w", l.To, v.Name, perr)
		}
		f.Detail += "; link to " + p.Name
		if p.Why != "" {
			f.Detail += " (" + p.Why + ")"
		}
		f.Start = time.Now().UnixNano()
		err = t.Link(ctx, v.Name, p.Name, l, s.Duration)
		undo = func(ctx context.Context) error { return t.Clear(ctx, v.Name) }
	default:
		return fmt.Errorf("kind %q cannot be run", s.Kind)
	}
	if err != nil {
		// A half-applied fault (a crash request that killed the process
		// but answered an error) is undone all the same.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		uerr := undo(uctx)
		f.End = time.Now().UnixNano()
		f.Detail += "; failed: " + err.Error()
		log(f)
		if uerr != nil {
			return errors.Join(err, fmt.Errorf("undoing: %w", uerr))
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(s.Duration):
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	uerr := undo(uctx)
	f.End = time.Now().UnixNano()
	if uerr != nil {
		f.Detail += "; undo failed: " + uerr.Error()
	}
	log(f)
	if uerr != nil {
		return fmt.Errorf("undoing %s on %s: %w", s.Kind, v.Name, uerr)
	}
	return nil
}

// busySet holds the processes under a fault, so overlapping steps hit
// different processes.
type busySet struct {
	mu    sync.Mutex
	names map[string]bool
}

// resolve resolves a role passing over busy processes and marks the one
// chosen busy. While no process plays the role (ErrNoTarget) it tries again
// for up to wait: a process under another step's kill is released once it
// is healthy again.
func (b *busySet) resolve(ctx context.Context, t Target, r Role, rng *rand.Rand, wait time.Duration) (Victim, error) {
	deadline := time.Now().Add(wait)
	for {
		b.mu.Lock()
		avoid := maps.Clone(b.names)
		b.mu.Unlock()
		v, err := t.Resolve(ctx, r, avoid, rng)
		if err == nil {
			b.mu.Lock()
			b.names[v.Name] = true
			b.mu.Unlock()
			return v, nil
		}
		if !errors.Is(err, ErrNoTarget) || !time.Now().Before(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(min(500*time.Millisecond, time.Until(deadline))):
		}
	}
}

func (b *busySet) release(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.names, name)
}
