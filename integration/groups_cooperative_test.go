package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	client "github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
)

// TestCooperativeMemberServesDuringRebalance checks KIP-429's promise: a
// cooperative member keeps returning records of the partitions it keeps
// while a rebalance runs. A second member that joined once and then stays
// silent holds the second (KIP-429) rebalance open for its whole rebalance
// timeout; meanwhile the first member must go on returning new records.
func TestCooperativeMemberServesDuringRebalance(t *testing.T) {
	e := gapiStart(t, 1)
	const topic = "coop-orders"
	_, err := e.cl.CreateTopic(e.ctx, topic, 4, 1, nil)
	require.NoError(t, err)

	a, err := e.cl.NewGroupConsumer(client.GroupConsumerConfig{GroupID: "coop", Topics: []string{topic},
		Assignors: []assign.Assignor{assign.CooperativeSticky()}, Reset: client.ResetEarliest,
		HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	var got []*client.ConsumedRecord
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			recs, _ := a.Poll(pctx)
			cancel()
			mu.Lock()
			got = append(got, recs...)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		_ = a.Close(context.Background())
	})
	require.Eventually(t, func() bool { return len(a.Assignment()) == 4 }, 30*time.Second, 50*time.Millisecond)

	// A raw member joins with a 30 s rebalance timeout, syncs once, and is
	// silent afterwards.
	gc := e.at(e.c.StorageNodes()[0].Addr)
	r := &gapiMember{gc: gc, group: "coop", sessionMs: 30000, protocols: []*groupv1.JoinGroupProtocol{{Name: "cooperative-sticky",
		Metadata: assign.EncodeSubscription(assign.CooperativeSticky(), []string{topic}, nil, -1, "")}}}
	r.firstJoin(t, e.ctx)
	r.joined(t, r.joinAsync(e.ctx))
	<-r.syncAsync(e.ctx, nil)

	// The first round moved two partitions out of a's assignment; a now
	// asks for the second round, which waits for r until its rebalance
	// timeout.
	require.Eventually(t, func() bool { return len(a.Assignment()) == 2 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return gapiDescribe(t, e.ctx, gc, "coop").GetState() == "PreparingRebalance"
	}, 20*time.Second, 50*time.Millisecond, "the second rebalance did not start")
	mu.Lock()
	before := len(got)
	mu.Unlock()

	p := e.cl.NewProducer(client.ProducerConfig{})
	defer p.Close(context.Background())
	for i := range 40 {
		_, err := p.ProduceSync(e.ctx, &client.Record{Topic: topic, Partition: int32(i % 4), Value: []byte("during")})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > before
	}, 15*time.Second, 50*time.Millisecond, "the member returned no record while the rebalance ran")
	require.Equal(t, "PreparingRebalance", gapiDescribe(t, e.ctx, gc, "coop").GetState(),
		"the records came only after the rebalance ended")
	mu.Lock()
	for _, rec := range got[before:] {
		require.Contains(t, a.Assignment(), client.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}, "a record of a partition the member gave up")
	}
	mu.Unlock()
}
