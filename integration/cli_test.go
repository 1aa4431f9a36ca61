package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// runCLI runs the sluice CLI against a cluster and returns its stdout.
func runCLI(t *testing.T, c *devcluster.Cluster, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.CLI(t), append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ",")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "sluice %s: %s", strings.Join(args, " "), errOut.String())
	return out.String()
}

func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// The README's round trip through the CLI: create a topic, pipe 100,000
// lines into `sluice produce`, read them back with `sluice consume`, on one
// process with every role (RF=1) and on three storage nodes (RF=3).
func TestCLIRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts cluster.Options
		rf   string
	}{
		{"one-process-rf1", cluster.Options{Combined: true}, "1"},
		{"three-storage-nodes-rf3", cluster.Options{Controllers: 1, StorageNodes: 3}, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster.Start(t, tc.opts)
			runCLI(t, c, "", "topic", "create", "t", "--partitions", "3", "--replication-factor", tc.rf)
			produced := runCLI(t, c, seqLines(100000), "produce", "t", "--acks", "all", "-o", "json")
			var res struct{ Records, Acknowledged, Failed int64 }
			require.NoError(t, json.Unmarshal([]byte(produced), &res), produced)
			require.Equal(t, int64(100000), res.Records)
			require.Equal(t, int64(100000), res.Acknowledged, "every record acknowledged before produce exits")
			require.Zero(t, res.Failed)
			out := runCLI(t, c, "", "consume", "t", "--from-beginning", "--max-messages", "100000", "--timeout", "60s")
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, lines, 100000)
			seen := make([]bool, 100001)
			for _, l := range lines {
				n, err := strconv.Atoi(l)
				require.NoError(t, err, l)
				require.False(t, seen[n], "line %d printed twice", n)
				seen[n] = true
			}
			desc := runCLI(t, c, "", "topic", "describe", "t")
			require.Contains(t, desc, "Partitions: 3")
		})
	}
}
