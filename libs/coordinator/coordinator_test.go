package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
)

func ExamplePartitionFor() {
	// Where Kafka keeps the group "my-group" in a 50-partition
	// __consumer_offsets (and a transactional id in __transaction_state).
	fmt.Println(PartitionFor("my-group", 50))
	// Output: 12
}

// Reconcile drops shards no longer wanted or no longer fitting, keeps the
// others, and creates the missing ones.
func TestReconcile(t *testing.T) {
	shards := map[int32]string{1: "keep", 2: "gone", 3: "misfit"}
	wanted := map[int32]Placement{1: {}, 3: {Epoch: 7}, 4: {Epoch: 2}}
	drop, start := Reconcile(shards, wanted, func(s string, w Placement) bool { return s != "misfit" },
		func(id int32, w Placement) string { return fmt.Sprintf("new-%d-%d", id, w.Epoch) })
	require.ElementsMatch(t, []string{"gone", "misfit"}, drop)
	require.ElementsMatch(t, []string{"new-3-7", "new-4-2"}, start)
	require.Equal(t, map[int32]string{1: "keep", 3: "new-3-7", 4: "new-4-2"}, shards)
}

// NotLoaded says who coordinates a key: this node while it takes over,
// another (with a hint), or nobody.
func TestNotLoaded(t *testing.T) {
	img := metadata.Empty()
	alive := commonv1.BrokerState_BROKER_STATE_ALIVE
	img.Brokers[1] = &commonv1.Broker{Id: 1, Roles: []string{"storage-node", "transaction-coordinator"}, State: alive,
		Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "h1", Port: 9}}}
	img.Topics[metadata.TransactionStateTopic] = &metadata.Topic{Name: metadata.TransactionStateTopic,
		Partitions: []*commonv1.PartitionState{{Topic: metadata.TransactionStateTopic, Partition: 0, LeaderId: 1}}}
	e := NotLoaded(img, metadata.TransactionStateTopic, "transaction-coordinator", 1, "tx", `transactional id "tx"`, 0)
	require.Equal(t, errs.CoordinatorLoadInProgress, e.Code)
	e = NotLoaded(img, metadata.TransactionStateTopic, "transaction-coordinator", 2, "tx", `transactional id "tx"`, 0)
	require.Equal(t, errs.NotCoordinator, e.Code)
	require.Equal(t, int32(1), e.Coordinator.GetNodeId())
	require.Equal(t, "h1:9", e.Coordinator.GetAddress())
	require.Equal(t, "tx", e.Coordinator.GetKey())
	img.Brokers[1].State = commonv1.BrokerState_BROKER_STATE_FENCED
	e = NotLoaded(img, metadata.TransactionStateTopic, "transaction-coordinator", 2, "tx", `transactional id "tx"`, 0)
	require.Equal(t, errs.CoordinatorNotAvailable, e.Code)
}

func TestWriteError(t *testing.T) {
	for _, c := range []struct {
		err     error
		stopped bool
		want    errs.Code
	}{
		{errs.New(errs.NotLeaderOrFollower, "moved"), false, errs.NotCoordinator},
		{errs.New(errs.FencedLeaderEpoch, "old"), false, errs.NotCoordinator},
		{errs.New(errs.NotCoordinator, "fenced"), false, errs.NotCoordinator},
		{errs.New(errs.NotEnoughReplicas, "isr"), false, errs.CoordinatorNotAvailable},
		{errs.New(errs.RequestTimedOut, "slow"), false, errs.CoordinatorNotAvailable},
		{errors.New("disk on fire"), false, errs.UnknownServerError},
		{errors.New("closed"), true, errs.NotCoordinator},
	} {
		require.Equal(t, c.want, WriteError(c.err, "__t", 3, c.stopped).Code, "%v", c.err)
	}
}

// A Writer applies a write only once it is acknowledged, under the
// shard's lock; a refused one runs failed instead, and a refusal by a
// later coordinator calls Fenced.
func TestWriterAppliesAfterAck(t *testing.T) {
	var mu sync.Mutex
	l := &MemLog{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fenced []*errs.Error
	w := &Writer{Topic: "__t", Partition: 3, Log: l, Mu: &mu, Ctx: ctx, Now: time.Now,
		Fenced: func(e *errs.Error) { fenced = append(fenced, e) }}
	applied := map[string]int64{}

	mu.Lock()
	done := w.WriteLocked([]KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b")}}, func(base int64) { applied["ab"] = base }, nil)
	require.Empty(t, applied, "nothing applies before the acknowledgement")
	mu.Unlock()
	require.Nil(t, Await(ctx, "__t", done))
	mu.Lock()
	require.Equal(t, map[string]int64{"ab": 0}, applied)
	mu.Unlock()
	recs := l.Records()
	require.Len(t, recs, 2)
	require.Nil(t, recs[1].Value, "a tombstone")

	l.Fail = func() error { return errs.New(errs.NotCoordinator, "a later coordinator fenced the partition") }
	var failed *errs.Error
	mu.Lock()
	done = w.WriteLocked([]KV{{Key: []byte("c"), Value: []byte("2")}}, func(int64) { applied["c"] = 1 }, func(e *errs.Error) { failed = e })
	mu.Unlock()
	e := Await(ctx, "__t", done)
	require.Equal(t, errs.NotCoordinator, e.Code)
	mu.Lock()
	defer mu.Unlock()
	require.Same(t, e, failed)
	require.NotContains(t, applied, "c")
	require.Len(t, fenced, 1)
}
