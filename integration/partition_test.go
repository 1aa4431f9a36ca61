package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/integration/netns"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// A storage node cut off from the controller and the other storage nodes
// (but still reachable by clients) never acknowledges an acks=all write:
// its followers cannot fetch from it, so its high watermark cannot move.
// After the partition heals, every record that was acknowledged is read
// back, and the replicas agree byte for byte.
func TestIsolatedNodeNeverAcknowledges(t *testing.T) {
	net, hosts := namespaces(t, 4)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3, ExtraArgs: fastSessions, Hosts: hosts, Wrap: net.Exec})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, partitions = "cut", int32(3)
	_, stopWorkload := startWorkload(t, ctx, cl, topic, partitions, 3*time.Minute)
	time.Sleep(3 * time.Second)

	ls, _ := leaders(t, ctx, cl, topic)
	victim := nodeByID(c, ls[0])
	k := int(victim.NodeID - 1) // process index = host index
	var others []int
	for i := range net.Hosts {
		if i != k {
			others = append(others, i)
		}
	}
	t.Logf("cutting node %d (%s) off from the controller and the other storage nodes", victim.NodeID, victim.Addr)
	net.Isolate(k, others...)

	// Produce straight to the isolated node for the partition it led,
	// with its old leader epoch, for the whole isolation: nothing may be
	// acknowledged.
	conn, err := cl.Conn(victim.Addr)
	require.NoError(t, err)
	sc := storagev1.NewStorageServiceClient(conn)
	isolatedUntil := time.Now().Add(15 * time.Second)
	attempts, refused := 0, map[string]int{}
	for time.Now().Before(isolatedUntil) {
		rctx, rcancel := context.WithTimeout(ctx, 4*time.Second)
		resp, err := sc.Produce(rctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, TimeoutMs: 3000,
			Partitions: []*storagev1.ProducePartition{{Topic: topic, Partition: 0,
				Data: &storagev1.ProducePartition_Records{Records: oneRecord("from-the-minority")}}}})
		rcancel()
		attempts++
		if err == nil {
			err = errs.FromProto(resp.GetResults()[0].GetError())
		}
		require.Error(t, err, "the isolated node acknowledged a write")
		refused[errs.Name(errs.CodeOf(err))]++
	}
	t.Logf("%d writes sent to the isolated node, none acknowledged: %v", attempts, refused)
	net.Heal(k)
	t.Logf("healed")
	time.Sleep(5 * time.Second)
	acked, _ := stopWorkload()
	waitFullISR(t, ctx, cl, topic)
	read := readAll(t, ctx, cl, topic, partitions)
	dups := checkHistory(t, acked, read)
	for _, recs := range read {
		for _, r := range recs {
			require.NotEqual(t, "from-the-minority", r.key, "a write refused by the isolated node survived")
		}
	}
	t.Logf("%d acknowledged records all read back (%d duplicates from retries)", len(acked), dups)
	checkReplicasIdentical(t, ctx, c, cl, topic, partitions)
}

// namespaces gives n hosts, each a network namespace of its own, and their
// addresses; it skips the test where namespaces cannot be made, unless
// SLUICE_REQUIRE_NETNS says they must.
func namespaces(t *testing.T, n int) (*netns.Net, []string) {
	t.Helper()
	if err := netns.Available(); err != nil {
		if os.Getenv("SLUICE_REQUIRE_NETNS") != "" {
			t.Fatalf("network namespaces are required here: %v", err)
		}
		t.Skipf("no network namespaces: %v", err)
	}
	net := netns.New(t, n)
	hosts := make([]string, 0, n)
	for _, h := range net.Hosts {
		hosts = append(hosts, h.IP)
	}
	return net, hosts
}
