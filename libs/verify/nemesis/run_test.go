package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// fakeTarget records the actions a run takes.
type fakeTarget struct {
	mu      sync.Mutex
	calls   []string
	failOn  string
	running map[string]bool
	// single makes one process, "p-only", play every role; none lists
	// roles no process plays.
	single bool
	none   map[Role]bool
}

func (f *fakeTarget) do(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if call == f.failOn {
		return errors.New("refused")
	}
	return nil
}

func (f *fakeTarget) Resolve(_ context.Context, r Role, busy map[string]bool, _ *rand.Rand) (Victim, error) {
	if f.none[r] || (f.single && busy["p-only"]) {
		return Victim{}, fmt.Errorf("%w: no running process plays %s", ErrNoTarget, r)
	}
	if f.single {
		return Victim{Name: "p-only", Why: "the " + string(r)}, nil
	}
	name := "p-" + string(r)
	if busy[name] {
		name += "-2"
	}
	return Victim{Name: name, Why: "the " + string(r)}, nil
}
func (f *fakeTarget) Kill(_ context.Context, n string) error   { return f.do("kill " + n) }
func (f *fakeTarget) Start(_ context.Context, n string) error  { return f.do("start " + n) }
func (f *fakeTarget) Pause(_ context.Context, n string) error  { return f.do("pause " + n) }
func (f *fakeTarget) Resume(_ context.Context, n string) error { return f.do("resume " + n) }
func (f *fakeTarget) Crash(_ context.Context, n string, drop bool) error {
	return f.do(fmt.Sprintf("crash %s %v", n, drop))
}
func (f *fakeTarget) Peers(_ string, storageOnly bool) []string {
	if storageOnly {
		return []string{"a"}
	}
	return []string{"a", "b", "c"}
}
func (f *fakeTarget) Isolate(_ context.Context, n string, from []string) error {
	return f.do(fmt.Sprintf("isolate %s %v", n, from))
}
func (f *fakeTarget) Heal(_ context.Context, n string) error { return f.do("heal " + n) }
func (f *fakeTarget) Disk(_ context.Context, n, d string, _ time.Duration) error {
	return f.do("disk " + n + " " + d)
}
func (f *fakeTarget) Clock(_ context.Context, n string, o time.Duration) error {
	return f.do(fmt.Sprintf("clock %s %v", n, o))
}
func (f *fakeTarget) Clear(_ context.Context, n string) error { return f.do("clear " + n) }
func (f *fakeTarget) Peer(_ context.Context, r Role, from string, _ *rand.Rand) (Victim, error) {
	if f.none[r] {
		return Victim{}, fmt.Errorf("%w: no running process plays %s", ErrNoTarget, r)
	}
	if r == AnyProcess {
		return Victim{Name: "*", Why: "every peer"}, nil
	}
	return Victim{Name: "p-" + string(r), Why: "the " + string(r) + " of " + from}, nil
}
func (f *fakeTarget) Link(_ context.Context, n, peer string, l Link, d time.Duration) error {
	return f.do(fmt.Sprintf("link %s->%s %s for %v", n, peer, l, d))
}
func (f *fakeTarget) Move(context.Context, *rand.Rand) (string, error) {
	return "t/0", f.do("move")
}

func (f *fakeTarget) StartClientFault(_ context.Context, k Kind, _ string, _ time.Duration) error {
	return f.do("start " + string(k))
}
func (f *fakeTarget) StopClientFault(k Kind) string {
	_ = f.do("stop " + string(k))
	return "done"
}

func TestRunAppliesAndUndoesEachStep(t *testing.T) {
	steps := []Step{
		{At: 100 * time.Millisecond, Kind: Pause, Target: StorageLeader, Duration: 50 * time.Millisecond},
		{At: 0, Kind: Kill, Target: Controller, Duration: 50 * time.Millisecond},
		{At: 200 * time.Millisecond, Kind: Partition, Target: StorageFollower, Duration: 50 * time.Millisecond, Detail: "isolate"},
		{At: 300 * time.Millisecond, Kind: Clock, Target: AnyProcess, Duration: 50 * time.Millisecond, Detail: "-30s"},
		{At: 400 * time.Millisecond, Kind: Crash, Target: StorageLeader, Duration: 50 * time.Millisecond, Detail: "drop-unsynced"},
		{At: 500 * time.Millisecond, Kind: Move, Target: StorageLeader},
		{At: 600 * time.Millisecond, Kind: LateEndTxn, Target: Clients, Duration: 50 * time.Millisecond},
	}
	ft := &fakeTarget{}
	var log Log
	require.NoError(t, Run(context.Background(), steps, ft, log.Add))
	// Steps run side by side (faults may overlap), so on a loaded machine
	// one step's undo can come after the next step's injection: check
	// each injection and its undo, in that order, not one global order.
	pairs := [][2]string{
		{"kill p-controller", "start p-controller"},
		{"pause p-storage-leader", "resume p-storage-leader"},
		{"isolate p-storage-follower [a b c]", "heal p-storage-follower"},
		{"clock p-any -30s", "clock p-any 0s"},
		{"crash p-storage-leader true", "start p-storage-leader"},
		{"start late-endtxn", "stop late-endtxn"},
	}
	want := []string{"move"}
	for _, p := range pairs {
		want = append(want, p[0], p[1])
	}
	require.ElementsMatch(t, want, ft.calls)
	for _, p := range pairs {
		require.Less(t, slices.Index(ft.calls, p[0]), slices.Index(ft.calls, p[1]), "%q undone before it was done: %v", p[0], ft.calls)
	}
	faults := log.Faults()
	require.Len(t, faults, 7)
	require.Equal(t, "done", faults[6].Detail)
	require.Equal(t, check.Fault{Kind: "kill", Target: "p-controller", Detail: "the controller", Start: faults[0].Start, End: faults[0].End}, faults[0])
	for _, f := range faults[:5] {
		require.Less(t, f.Start, f.End, "%+v", f)
	}
	require.GreaterOrEqual(t, faults[1].End-faults[1].Start, int64(50*time.Millisecond), "the pause lasts its duration")
}

func TestRunOverlapsStepsThatOverlap(t *testing.T) {
	ft := &fakeTarget{}
	var log Log
	require.NoError(t, Run(context.Background(), []Step{
		// Margins of 400+ ms keep the order on a loaded machine.
		{Kind: Kill, Target: StorageLeader, Duration: time.Second},
		{At: 100 * time.Millisecond, Kind: Kill, Target: StorageFollower, Duration: 100 * time.Millisecond},
	}, ft, log.Add))
	require.Equal(t, []string{"kill p-storage-leader", "kill p-storage-follower", "start p-storage-follower", "start p-storage-leader"}, ft.calls)
}

func TestRunPassesOverBusyProcesses(t *testing.T) {
	ft := &fakeTarget{}
	var log Log
	require.NoError(t, Run(context.Background(), []Step{
		{Kind: Partition, Target: StorageLeader, Duration: time.Second, Detail: "storage"},
		{At: 100 * time.Millisecond, Kind: Kill, Target: StorageLeader, Duration: 100 * time.Millisecond},
		{At: 1500 * time.Millisecond, Kind: Kill, Target: StorageLeader, Duration: 10 * time.Millisecond},
	}, ft, log.Add))
	require.Equal(t, []string{"isolate p-storage-leader [a]", "kill p-storage-leader-2", "start p-storage-leader-2",
		"heal p-storage-leader", "kill p-storage-leader", "start p-storage-leader"}, ft.calls)
}

func TestRunUndoesTheFaultInProgressWhenCancelled(t *testing.T) {
	ft := &fakeTarget{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var log Log
	start := time.Now()
	err := Run(ctx, []Step{
		{Kind: Pause, Target: StorageLeader, Duration: time.Hour},
		{At: time.Hour, Kind: Kill, Target: Controller, Duration: time.Second},
	}, ft, log.Add)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, []string{"pause p-storage-leader", "resume p-storage-leader"}, ft.calls)
	require.Len(t, log.Faults(), 1)
}

func TestRunReportsFailuresAndGoesOn(t *testing.T) {
	ft := &fakeTarget{failOn: "start p-controller"}
	var log Log
	err := Run(context.Background(), []Step{
		{Kind: Kill, Target: Controller, Duration: time.Millisecond},
		{At: 50 * time.Millisecond, Kind: Pause, Target: StorageLeader, Duration: time.Millisecond},
	}, ft, log.Add)
	require.ErrorContains(t, err, "undoing kill on p-controller")
	require.Contains(t, ft.calls, "resume p-storage-leader", "the next step still ran")
	require.Contains(t, log.Faults()[0].Detail, "undo failed")
}

func TestRunRejectsInvalidSteps(t *testing.T) {
	err := Run(context.Background(), []Step{{Kind: Partition, Target: StorageLeader}}, &fakeTarget{}, func(check.Fault) {})
	require.ErrorContains(t, err, "isolate, subset or storage")
}

func TestRunWaitsForTheTargetAnotherStepRestarts(t *testing.T) {
	// One process plays every role (all-in-one): the disk step comes while
	// the kill step still holds it, and takes it once it is back.
	ft := &fakeTarget{single: true}
	var log Log
	require.NoError(t, Run(context.Background(), []Step{
		{Kind: Kill, Target: AnyProcess, Duration: 300 * time.Millisecond},
		{At: 50 * time.Millisecond, Kind: Disk, Target: StorageLeader, Duration: 10 * time.Millisecond, Detail: "enospc"},
	}, ft, log.Add))
	require.Equal(t, []string{"kill p-only", "start p-only", "disk p-only enospc", "clear p-only"}, ft.calls)
	faults := log.Faults()
	require.Len(t, faults, 2)
	require.GreaterOrEqual(t, faults[1].Start, faults[0].End, "the disk fault began after the restart")
}

func TestRunSkipsAStepWhoseRoleNobodyPlays(t *testing.T) {
	defer func(w time.Duration) { targetWait = w }(targetWait)
	targetWait = 200 * time.Millisecond
	ft := &fakeTarget{none: map[Role]bool{ReplicationWorker: true}, failOn: "start p-controller"}
	var log Log
	start := time.Now()
	err := Run(context.Background(), []Step{
		{Kind: Kill, Target: ReplicationWorker, Duration: time.Millisecond},
		{At: 10 * time.Millisecond, Kind: Kill, Target: Controller, Duration: time.Millisecond},
		{At: 20 * time.Millisecond, Kind: Pause, Target: StorageLeader, Duration: time.Millisecond},
	}, ft, log.Add)
	require.GreaterOrEqual(t, time.Since(start), targetWait, "the step waited for a target")
	skipped, failed := Skipped(err)
	require.Len(t, skipped, 1)
	require.Equal(t, ReplicationWorker, skipped[0].Step.Target)
	require.ErrorIs(t, skipped[0], ErrNoTarget)
	require.ErrorContains(t, skipped[0], "no running process plays replication")
	require.ErrorContains(t, failed, "undoing kill on p-controller", "a real failure stays a failure")
	require.NotContains(t, failed.Error(), "replication")
	require.ElementsMatch(t, []string{"kill p-controller", "start p-controller", "pause p-storage-leader", "resume p-storage-leader"}, ft.calls)
	require.Len(t, log.Faults(), 2, "a skipped step injects no fault")

	only, failed := Skipped(&SkippedError{Step: Step{Kind: Kill, Target: ReplicationWorker}, Reason: ErrNoTarget})
	require.Len(t, only, 1)
	require.NoError(t, failed)
	none, failed := Skipped(nil)
	require.Empty(t, none)
	require.NoError(t, failed)
}
