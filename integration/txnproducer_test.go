package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// consumeValues reads every partition of topic from the start with the
// given isolation until want values arrived, then a little longer to catch
// extras, and returns them sorted.
func consumeValues(t *testing.T, cl *client.Client, topic string, readCommitted bool, want int) []string {
	t.Helper()
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: readCommitted})
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, k.AssignTopic(ctx, topic))
	var got []string
	settle := time.Time{}
	for {
		if len(got) >= want && settle.IsZero() {
			settle = time.Now().Add(time.Second)
		}
		if !settle.IsZero() && time.Now().After(settle) {
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		recs, err := k.Poll(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d values (read_committed=%v) before the deadline", len(got), want, readCommitted)
		}
		if err != nil && pctx.Err() == nil {
			require.NoError(t, err)
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	slices.Sort(got)
	return got
}

// The SDK's transactional producer against real processes: committed
// transactions are read by read_committed consumers, aborted ones only by
// read_uncommitted ones, over several partitions and epochs; a second
// producer with the same transactional id fences the first, whose open
// transaction is aborted and whose commit fails with PRODUCER_FENCED.
func TestTransactionalProducer(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "txn-sdk"
	_, err := cl.CreateTopic(ctx, topic, 3, 3, nil)
	require.NoError(t, err)

	p := cl.NewProducer(client.ProducerConfig{TransactionalID: "txn-sdk-1"})
	defer func() { _ = p.Close(context.Background()) }()
	require.Error(t, p.BeginTransaction(), "InitTransactions comes first")
	require.NoError(t, p.InitTransactions(ctx))
	require.Error(t, p.Produce(ctx, &client.Record{Topic: topic, Partition: -1, Value: []byte("x")}, nil), "no transaction open")

	var committed, all []string
	for i := range 4 {
		require.NoError(t, p.BeginTransaction())
		var vals []string
		for j := range 30 {
			v := fmt.Sprintf("t%d-%02d", i, j)
			vals = append(vals, v)
			require.NoError(t, p.Produce(ctx, &client.Record{Topic: topic, Partition: int32(j % 3), Value: []byte(v)}, nil))
		}
		all = append(all, vals...)
		if i%2 == 0 {
			require.NoError(t, p.CommitTransaction(ctx))
			committed = append(committed, vals...)
		} else {
			// Sent first, so the aborted records are in the log.
			require.NoError(t, p.Flush(ctx))
			require.NoError(t, p.AbortTransaction(ctx))
		}
	}
	slices.Sort(committed)
	slices.Sort(all)
	require.Equal(t, committed, consumeValues(t, cl, topic, true, len(committed)))
	require.Equal(t, all, consumeValues(t, cl, topic, false, len(all)))

	// A zombie: the first producer has a transaction open when another
	// producer with its transactional id starts.
	require.NoError(t, p.BeginTransaction())
	for j := range 6 {
		require.NoError(t, p.Produce(ctx, &client.Record{Topic: topic, Partition: int32(j % 3), Value: []byte(fmt.Sprintf("zombie-%d", j))}, nil))
	}
	require.NoError(t, p.Flush(ctx))
	p2 := cl.NewProducer(client.ProducerConfig{TransactionalID: "txn-sdk-1"})
	defer func() { _ = p2.Close(context.Background()) }()
	require.NoError(t, p2.InitTransactions(ctx))
	err = p.CommitTransaction(ctx)
	require.Error(t, err)
	require.Contains(t, []errs.Code{errs.ProducerFenced, errs.InvalidProducerEpoch}, errs.CodeOf(err), "%v", err)
	require.Error(t, p.BeginTransaction(), "a fenced producer stays fenced")

	require.NoError(t, p2.BeginTransaction())
	require.NoError(t, p2.Produce(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte("after-fence")}, nil))
	require.NoError(t, p2.CommitTransaction(ctx))
	want := append(slices.Clone(committed), "after-fence")
	slices.Sort(want)
	require.Equal(t, want, consumeValues(t, cl, topic, true, len(want)), "the zombie's records never become visible")
}
