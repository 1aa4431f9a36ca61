package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// startLaggingNode serves a fakeNode whose metadata learns a created
// topic only after lag more metadata calls have asked about it.
func startLaggingNode(t *testing.T, lag int32) (*fakeNode, *Client) {
	t.Helper()
	f := &fakeNode{lag: lag}
	return f, startFake(t, f, Config{RequestTimeout: 10 * time.Second})
}

// Right after this client created a topic, a node whose metadata has not
// caught up answers UNKNOWN_TOPIC_OR_PARTITION: ListOffsets retries that
// until the topic shows up. A topic nobody created still fails at once.
func TestListOffsetsRetriesUnknownTopicRightAfterCreate(t *testing.T) {
	n, c := startLaggingNode(t, 3)
	ctx := context.Background()

	start := time.Now()
	_, err := c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"never", 0})
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
	require.Less(t, time.Since(start), 5*time.Second, "an absent topic nobody created fails at once, not at the timeout")

	_, err = c.CreateTopic(ctx, "fresh", 1, 1, nil)
	require.NoError(t, err)
	got, err := c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"fresh", 0})
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]int64{{"fresh", 0}: 0}, got)
	require.EqualValues(t, 4, n.asked.Load(), "three unknown-topic answers, then the topic")
	require.EqualValues(t, 1, n.listings.Load())
}

// A producer sending to a topic its client has just created waits for the
// lagging node's metadata instead of failing the record.
func TestProducerWaitsForATopicJustCreated(t *testing.T) {
	_, c := startLaggingNode(t, 3)
	ctx := context.Background()
	_, err := c.CreateTopic(ctx, "fresh", 1, 1, nil)
	require.NoError(t, err)
	p := c.NewProducer(ProducerConfig{})
	defer func() { _ = p.Close(ctx) }()
	n, err := p.md.partitionsWait(ctx, "fresh", 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	_, err = p.md.partitionsWait(ctx, "never", 10*time.Second)
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
}

// DeleteTopics removes created topics from the fake's metadata.
func (f *fakeNode) DeleteTopics(_ context.Context, req *controllerv1.DeleteTopicsRequest) (*controllerv1.DeleteTopicsResponse, error) {
	resp := &controllerv1.DeleteTopicsResponse{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range req.GetNames() {
		delete(f.created, name)
		resp.Results = append(resp.Results, &controllerv1.DeleteTopicResult{Name: name})
	}
	return resp, nil
}

// A topic this client created and then deleted is gone: its absence is
// final at once, not retried as a node catching up until the call's time
// runs out (which reported REQUEST_TIMED_OUT instead of the absence).
func TestTopicDeletedRightAfterCreateIsUnknownAtOnce(t *testing.T) {
	_, c := startLaggingNode(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.CreateTopic(ctx, "brief", 1, 1, nil)
	require.NoError(t, err)
	_, err = c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"brief", 0})
	require.NoError(t, err)

	_, err = c.DeleteTopics(ctx, "brief")
	require.NoError(t, err)
	_, err = c.ListOffsets(ctx, OffsetLatest, -1, TopicPartition{"brief", 0})
	require.True(t, errs.Is(err, errs.UnknownTopicOrPartition), "got %v", err)
}
