package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
)

// chaosProgram is sluice-chaos (tools/chaos); the Makefile passes
// bin/sluice-chaos in SLUICE_CHAOS.
var chaosProgram = &program{env: "SLUICE_CHAOS", pkg: "github.com/sluice-io/sluice/tools/chaos", name: "sluice-chaos"}

// chaosResult is one line of sluice-chaos's results.jsonl.
type chaosResult struct {
	Name    string         `json:"name"`
	Seed    int64          `json:"seed"`
	Planted string         `json:"planted"`
	Unsafe  string         `json:"unsafe"`
	Valid   bool           `json:"valid"`
	Caught  bool           `json:"caught"`
	Expect  []string       `json:"expect"`
	Counts  map[string]int `json:"counts"`
	Skipped []string       `json:"skipped"`
	Summary string         `json:"summary"`
	Error   string         `json:"error"`
	Dir     string         `json:"dir"`
	WallS   float64        `json:"wall_s"`
	Faults  []struct {
		Kind, Target, Detail string
		Start, End           int64
	} `json:"faults"`
}

// runChaos runs sluice-chaos with args and returns its exit status and the
// cases' results.
func runChaos(t *testing.T, timeout time.Duration, args ...string) (int, []chaosResult) {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, chaosProgram.get(t), append([]string{"run", "--out", out}, args...)...)
	output, err := cmd.CombinedOutput()
	t.Logf("sluice-chaos %s:\n%s", strings.Join(args, " "), output)
	status := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "running sluice-chaos: %v", err)
		status = ee.ExitCode()
	}
	require.NoError(t, ctx.Err(), "sluice-chaos ran past %v", timeout)
	f, err := os.Open(filepath.Join(out, "results.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var results []chaosResult
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r chaosResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		results = append(results, r)
	}
	require.NoError(t, sc.Err())
	if t.Failed() || status != 0 {
		// Keep the reports and process logs of a failed run.
		if keep := os.Getenv("SLUICE_TEST_LOGS"); keep != "" {
			_ = exec.Command("cp", "-r", out, filepath.Join(keep, t.Name())).Run()
		}
	}
	return status, results
}

// The PR tier of sluice-chaos: every case must end valid, with the faults
// its schedule names injected (leader and controller kills, a pause past
// the session timeout, partitions, crashes that drop unsynced bytes,
// duplicated requests and a slowed replication link, coordinator kills in
// the split topology).
func TestChaosPRTier(t *testing.T) {
	status, results := runChaos(t, 12*time.Minute, "--tier", "pr", "--sluiced", cluster.Sluiced(t))
	require.NotEmpty(t, results)
	kinds := map[string]int{}
	for _, r := range results {
		require.Empty(t, r.Error, "case %s (seed %d) could not be run", r.Name, r.Seed)
		require.True(t, r.Valid, "case %s (seed %d) found anomalies; replay with make chaos SEED=%d:\n%s", r.Name, r.Seed, r.Seed, r.Summary)
		for _, f := range r.Faults {
			require.NotContains(t, f.Detail, "failed:", "case %s: a fault was not injected", r.Name)
			require.Greater(t, f.End, f.Start, "case %s: fault %+v", r.Name, f)
			kinds[f.Kind]++
		}
		if os.Getenv("SLUICE_REQUIRE_NETNS") != "" {
			require.Empty(t, r.Skipped, "case %s skipped steps", r.Name)
		}
	}
	require.Equal(t, 0, status)
	require.Positive(t, kinds["kill"], "no process was killed: %v", kinds)
	require.Positive(t, kinds["pause"], "no process was paused: %v", kinds)
	require.Positive(t, kinds["crash"], "no process crashed: %v", kinds)
	require.Positive(t, kinds["delay"], "no link was slowed down: %v", kinds)
	require.Positive(t, kinds["duplicate"], "no request was duplicated: %v", kinds)
	t.Logf("faults injected by kind: %v", kinds)
}

// Each planted bug of a sluice_planted build, run with the case built for
// it, must make the checker report an anomaly of the kind it causes: the
// test of the tester.
func TestPlantedBugsAreCaught(t *testing.T) {
	planted := plantedSluiced.get(t)
	for _, bug := range []string{"ack_before_replication", "truncate_to_hw", "no_dedup_window", "lso_off_by_one", "no_epoch_bump", "stale_generation_accepted"} {
		t.Run(bug, func(t *testing.T) {
			// Catching a bug is a matter of timing under load (lso_off_by_one
			// needs a read_committed poll inside an open transaction that
			// then aborts): up to three runs of the case, as a soak would.
			var r chaosResult
			for attempt := 1; attempt <= 3; attempt++ {
				_, results := runChaos(t, 3*time.Minute, "--planted", bug, "--sluiced", planted)
				require.Len(t, results, 1)
				r = results[0]
				require.Empty(t, r.Error, "the case of %s could not be run", bug)
				require.Empty(t, r.Skipped, "the case of %s skipped fault steps it needs", bug)
				if !r.Valid && r.Caught {
					break
				}
				t.Logf("attempt %d of the case of %s did not catch it (valid=%v, anomalies %v)", attempt, bug, r.Valid, r.Counts)
			}
			require.False(t, r.Valid, "the checker missed the planted bug %s in three runs (case %s, seed %d)", bug, r.Name, r.Seed)
			require.True(t, r.Caught, "planted %s: anomalies %v, none of the expected kinds %v:\n%s", bug, r.Counts, r.Expect, r.Summary)
		})
	}
}

// The negative control: the normal build with settings that allow
// acknowledged records to be lost (acks=1 plain producers, topics with
// unclean leader election and min.insync.replicas=1) under faults that make
// an out-of-sync replica the only one alive must make the checker report
// lost or inconsistent records; the same case with acks=all and the safe
// topic configs must be valid.
func TestNegativeControlIsCaught(t *testing.T) {
	sluiced := cluster.Sluiced(t)
	t.Run("unsafe", func(t *testing.T) {
		status, results := runChaos(t, 4*time.Minute, "--negative", "--sluiced", sluiced)
		require.Len(t, results, 1)
		r := results[0]
		require.Empty(t, r.Error, "the case %s could not be run", r.Name)
		require.Empty(t, r.Skipped, "the case %s skipped fault steps it needs", r.Name)
		require.Contains(t, r.Unsafe, "acks=1")
		require.False(t, r.Valid, "the checker found nothing with %s (case %s, seed %d)", r.Unsafe, r.Name, r.Seed)
		require.True(t, r.Caught, "%s: anomalies %v, none of the expected kinds %v:\n%s", r.Unsafe, r.Counts, r.Expect, r.Summary)
		require.Equal(t, 0, status)
	})
	t.Run("control", func(t *testing.T) {
		status, results := runChaos(t, 4*time.Minute, "--negative", "--control", "--sluiced", sluiced)
		require.Len(t, results, 1)
		r := results[0]
		require.Empty(t, r.Error, "the case %s could not be run", r.Name)
		require.Empty(t, r.Unsafe)
		require.True(t, r.Valid, "case %s (seed %d) with acks=all and unclean election off found anomalies:\n%s", r.Name, r.Seed, r.Summary)
		require.Equal(t, 0, status)
	})
}
