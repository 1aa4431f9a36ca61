package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLinkDetailRoundTrips(t *testing.T) {
	for _, l := range []Link{
		{To: StorageLeader, Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond},
		{To: Controller, Duplicate: 0.5},
		{To: AnyProcess, Delay: time.Second, Duplicate: 1},
	} {
		got, err := ParseLink(l.String())
		require.NoError(t, err, l.String())
		require.Equal(t, l, got)
	}
	require.Equal(t, "to=storage-leader delay=100ms jitter=50ms", Link{To: StorageLeader, Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond}.String())
	for detail, want := range map[string]string{
		"":                   "to=<role> is required",
		"to=leader delay=1s": "unknown target role",
		"to=client dup=1":    "not a peer",
		"to=any delay=soon":  "invalid duration",
		"to=any delay=-1s":   "negative",
		"to=any delay=2m":    "at most 1m",
		"to=any dup=2":       "probability",
		"to=any dup=NaN":     "probability",
		"to=any latency=1s":  "unknown key",
		"to=any 1s":          "not key=value",
	} {
		_, err := ParseLink(detail)
		require.ErrorContains(t, err, want, detail)
	}
}

func TestLinkStepsValidate(t *testing.T) {
	require.NoError(t, Step{Kind: Delay, Target: StorageFollower, Detail: "to=storage-leader delay=100ms"}.Validate())
	require.NoError(t, Step{Kind: Duplicate, Target: TxnCoordinator, Detail: "to=any dup=0.5"}.Validate())
	require.ErrorContains(t, Step{Kind: Delay, Target: StorageFollower, Detail: "to=storage-leader dup=0.5"}.Validate(), "needs delay")
	require.ErrorContains(t, Step{Kind: Duplicate, Target: StorageFollower, Detail: "to=storage-leader delay=1s"}.Validate(), "needs dup")
	require.ErrorContains(t, Step{Kind: Delay, Target: Clients, Detail: "to=any delay=1s"}.Validate(), "not at the workload's clients")
	require.Error(t, Step{Kind: Delay, Target: StorageLeader}.Validate())
}

func TestPlanDrawsLinksFromTheGivenPairs(t *testing.T) {
	links := []LinkPair{{ReplicationWorker, StorageLeader}, {ReplicationWorker, StorageFollower}}
	o := PlanOptions{Duration: 5 * time.Minute, Kinds: []Kind{Delay, Duplicate}, Links: links,
		DuplicateLinks: []LinkPair{{ReplicationWorker, StorageLeader}, {ReplicationWorker, AnyProcess}}}
	a, err := Plan(9, o)
	require.NoError(t, err)
	b, err := Plan(9, o)
	require.NoError(t, err)
	require.Equal(t, a, b, "one seed must give one schedule")
	counts := Counts(a)
	require.Positive(t, counts[Delay])
	require.Positive(t, counts[Duplicate])
	tos := map[Role]int{}
	for _, s := range a {
		require.NoError(t, s.Validate())
		require.Equal(t, ReplicationWorker, s.Target)
		l, err := ParseLink(s.Detail)
		require.NoError(t, err)
		tos[l.To]++
		require.GreaterOrEqual(t, s.Duration, 2*time.Second)
		require.LessOrEqual(t, s.Duration, 6*time.Second)
		if s.Kind == Delay {
			require.Positive(t, l.Delay)
			require.Less(t, l.Delay, time.Second, "a slow link, not a cut")
			require.Zero(t, l.Duplicate)
		} else {
			require.Positive(t, l.Duplicate)
			require.Zero(t, l.Delay)
		}
	}
	require.Len(t, tos, 3, "every link drawn: %v", tos)

	// Without Links, the defaults.
	steps, err := Plan(9, PlanOptions{Duration: 5 * time.Minute, Kinds: []Kind{Delay, Duplicate}})
	require.NoError(t, err)
	for _, s := range steps {
		l, _ := ParseLink(s.Detail)
		if s.Kind == Delay {
			require.Contains(t, DefaultLinks, LinkPair{s.Target, l.To})
		} else {
			require.Contains(t, DefaultDuplicateLinks, LinkPair{s.Target, l.To})
		}
	}
	_, err = Plan(1, PlanOptions{Duration: time.Minute, Kinds: []Kind{Delay}, Links: []LinkPair{{Clients, StorageLeader}}})
	require.ErrorContains(t, err, "between processes")
	_, err = Plan(1, PlanOptions{Duration: time.Minute, Kinds: []Kind{Delay}, DuplicateLinks: []LinkPair{{StorageLeader, "nobody"}}})
	require.ErrorContains(t, err, "unknown target role")
}

func TestRunInstallsALinkToThePeerAndClearsIt(t *testing.T) {
	ft := &fakeTarget{}
	var log Log
	require.NoError(t, Run(context.Background(), []Step{
		{Kind: Delay, Target: StorageFollower, Duration: 50 * time.Millisecond, Detail: "to=storage-leader delay=100ms jitter=50ms"},
		// Far enough after the first step's undo that a loaded machine keeps the order.
		{At: 600 * time.Millisecond, Kind: Duplicate, Target: TxnCoordinator, Duration: 50 * time.Millisecond, Detail: "to=any dup=0.5"},
	}, ft, log.Add))
	require.Equal(t, []string{
		"link p-storage-follower->p-storage-leader to=storage-leader delay=100ms jitter=50ms for 50ms", "clear p-storage-follower",
		"link p-txn-coordinator->* to=any dup=0.5 for 50ms", "clear p-txn-coordinator",
	}, ft.calls)
	faults := log.Faults()
	require.Len(t, faults, 2)
	require.Equal(t, "delay", faults[0].Kind)
	require.Equal(t, "p-storage-follower", faults[0].Target)
	require.Equal(t, "the storage-follower; to=storage-leader delay=100ms jitter=50ms; link to p-storage-leader (the storage-leader of p-storage-follower)", faults[0].Detail)
	require.GreaterOrEqual(t, faults[0].End-faults[0].Start, int64(50*time.Millisecond), "the link fault lasts its duration")
	require.Equal(t, "duplicate", faults[1].Kind)
	require.Contains(t, faults[1].Detail, "link to * (every peer)")
}

func TestRunSkipsALinkWithoutPeer(t *testing.T) {
	ft := &fakeTarget{none: map[Role]bool{Controller: true}}
	var log Log
	err := Run(context.Background(), []Step{
		{Kind: Delay, Target: StorageLeader, Duration: time.Millisecond, Detail: "to=controller delay=10ms"},
	}, ft, log.Add)
	skipped, failed := Skipped(err)
	require.NoError(t, failed)
	require.Len(t, skipped, 1)
	require.ErrorContains(t, skipped[0], "finding the controller peer of p-storage-leader")
	require.Empty(t, ft.calls)
	require.Empty(t, log.Faults())
}
