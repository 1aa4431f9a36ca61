package nemesis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPlanIsDeterministic(t *testing.T) {
	o := PlanOptions{Duration: 2 * time.Minute, Partitions: true, Kinds: []Kind{Kill, Pause, Crash, Partition, Disk, Clock, Move}}
	a, err := Plan(42, o)
	require.NoError(t, err)
	b, err := Plan(42, o)
	require.NoError(t, err)
	require.Equal(t, a, b, "one seed must give one schedule")
	require.Greater(t, len(a), 5)
	c, err := Plan(43, o)
	require.NoError(t, err)
	require.NotEqual(t, a, c, "another seed should give another schedule")
}

func TestPlanStepsFollowEachOther(t *testing.T) {
	for seed := range int64(50) {
		o := PlanOptions{Duration: 90 * time.Second, Partitions: true, SessionTimeout: 4 * time.Second,
			Kinds: []Kind{Kill, Pause, Crash, Partition, Disk, Clock, Move, Delay, Duplicate}}
		steps, err := Plan(seed, o)
		require.NoError(t, err)
		end := time.Duration(0)
		for i, s := range steps {
			require.NoError(t, s.Validate())
			if i == 0 {
				require.GreaterOrEqual(t, s.At, 3*time.Second, "warmup")
			}
			require.GreaterOrEqual(t, s.At, end+2*time.Second, "seed %d step %d starts before the previous one ended plus the gap", seed, i)
			end = s.At + s.Duration
			require.LessOrEqual(t, end, o.Duration, "seed %d step %d ends after the plan", seed, i)
			switch s.Kind {
			case Pause, Partition:
				require.Greater(t, s.Duration, o.SessionTimeout, "seed %d: a %s must outlast the session timeout", seed, s.Kind)
			case Move:
				require.Equal(t, StorageLeader, s.Target)
			case Crash, Disk, Clock:
				require.Contains(t, []Role{StorageLeader, StorageFollower}, s.Target, "seed %d: %s needs a process with storage", seed, s.Kind)
			case Delay, Duplicate:
				l, err := ParseLink(s.Detail)
				require.NoError(t, err)
				links := DefaultLinks
				if s.Kind == Duplicate {
					links = DefaultDuplicateLinks
				}
				require.Contains(t, links, LinkPair{From: s.Target, To: l.To}, "seed %d: %s", seed, s)
			}
		}
	}
}

func TestPlanHonoursKindsAndCap(t *testing.T) {
	steps, err := Plan(7, PlanOptions{Duration: 5 * time.Minute, Kinds: []Kind{Kill}, Targets: []Role{Controller}, MaxSteps: 4})
	require.NoError(t, err)
	require.Len(t, steps, 4)
	for _, s := range steps {
		require.Equal(t, Kill, s.Kind)
		require.Equal(t, Controller, s.Target)
	}
	require.Equal(t, map[Kind]int{Kill: 4}, Counts(steps))
}

func TestPlanRejectsBadOptions(t *testing.T) {
	_, err := Plan(1, PlanOptions{})
	require.ErrorContains(t, err, "duration")
	_, err = Plan(1, PlanOptions{Duration: time.Minute, Kinds: []Kind{Partition}})
	require.ErrorContains(t, err, "network namespaces")
	_, err = Plan(1, PlanOptions{Duration: time.Minute, Kinds: []Kind{"melt"}})
	require.ErrorContains(t, err, "unknown fault kind")
	_, err = Plan(1, PlanOptions{Duration: time.Minute, Targets: []Role{"leader"}})
	require.ErrorContains(t, err, "unknown target role")
}

func TestStepValidate(t *testing.T) {
	require.NoError(t, Step{Kind: Clock, Target: AnyProcess, Detail: "-30s"}.Validate())
	require.Error(t, Step{Kind: Clock, Target: AnyProcess, Detail: "yesterday"}.Validate())
	require.Error(t, Step{Kind: Partition, Target: StorageLeader}.Validate())
	require.Error(t, Step{Kind: Disk, Target: StorageLeader, Detail: "full"}.Validate())
	require.Error(t, Step{Kind: Kill, Target: StorageLeader, At: -time.Second}.Validate())
}
