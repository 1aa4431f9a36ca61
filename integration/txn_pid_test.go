package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
)

// Producer ids of idempotent producers (InitProducerId without a
// transactional id) are never handed out twice: not across calls, not
// across a crash of the transaction coordinator (which loses the rest of
// its block) and not across a restart of the controller, which keeps the
// counter of allocated blocks in etcd. More ids than one block holds (1000)
// are drawn, so blocks are fetched before and after both restarts.
func TestInitProducerIDNeverReusesAnID(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 1})
	cl := cluster.Client(t, c)
	seen := map[int64]bool{}
	draw := func(n int) {
		t.Helper()
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			id, epoch, err := cl.InitProducerID(ctx, "", time.Minute, -1, -1)
			cancel()
			require.NoError(t, err)
			require.Zero(t, epoch)
			require.GreaterOrEqual(t, id, int64(0))
			require.False(t, seen[id], "producer id %d handed out twice", id)
			seen[id] = true
		}
	}
	draw(700)

	// The coordinator crashes: the ids left in its block are skipped.
	coord := c.StorageNodes()[0]
	require.NoError(t, coord.Kill())
	require.NoError(t, coord.Start())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, coord.WaitHealthy(ctx, 90*time.Second))
	draw(700)

	// The controller crashes and comes back: it goes on from its counter.
	ctrl := c.Controllers()[0]
	require.NoError(t, ctrl.Kill())
	require.NoError(t, ctrl.Start())
	require.NoError(t, ctrl.WaitHealthy(ctx, 90*time.Second))
	draw(1200)
	require.Len(t, seen, 2600)
}
