package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/record"
)

// compatRecord is one record as the compatibility tests compare it across
// clients and protocols: headers rendered as kcat's %h does (k=v joined by
// commas), the timestamp in milliseconds.
type compatRecord struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   string
	Timestamp int64
}

func (r compatRecord) String() string {
	return fmt.Sprintf("%d\t%d\t%s\t%s\t%s\t%d", r.Partition, r.Offset, r.Key, r.Value, r.Headers, r.Timestamp)
}

// sortCompatRecords orders records by partition, then offset.
func sortCompatRecords(recs []compatRecord) {
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
}

// compatHeaders renders headers as kcat's %h does.
func compatHeaders(hs []record.Header) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.Key + "=" + string(h.Value)
	}
	return strings.Join(parts, ",")
}

// compatRequireContiguous checks that each partition's offsets run from 0
// with no gap or repeat (recs sorted by sortCompatRecords).
func compatRequireContiguous(t *testing.T, recs []compatRecord) {
	t.Helper()
	next := map[int32]int64{}
	for _, r := range recs {
		require.Equal(t, next[r.Partition], r.Offset, "partition %d: record %v", r.Partition, r)
		next[r.Partition]++
	}
}

// compatCreateTopic creates a topic over gRPC and waits until every
// partition has a leader, so a Kafka client's first metadata request
// already sees them.
func compatCreateTopic(t *testing.T, cl *client.Client, topic string, partitions, rf int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, partitions, rf, nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		md, err := cl.Metadata(ctx, topic)
		require.NoError(c, err)
		require.Len(c, md.GetTopics(), 1)
		ps := md.GetTopics()[0].GetPartitions()
		require.Len(c, ps, int(partitions))
		for _, p := range ps {
			require.GreaterOrEqual(c, p.GetLeaderId(), int32(0), "partition %d has no leader", p.GetPartition())
		}
	}, 30*time.Second, 100*time.Millisecond)
}

// compatReadGRPC reads every record of the topic's partitions with the SDK
// consumer over gRPC, up to their end offsets now, sorted.
func compatReadGRPC(t *testing.T, cl *client.Client, topic string, partitions int32) []compatRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tps []client.TopicPartition
	for p := range partitions {
		tps = append(tps, client.TopicPartition{Topic: topic, Partition: p})
	}
	ends, err := cl.ListOffsets(ctx, client.OffsetLatest, 0, tps...)
	require.NoError(t, err)
	var want int64
	for _, end := range ends {
		want += end
	}
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	k.Assign(tps...)
	var recs []compatRecord
	for int64(len(recs)) < want {
		got, err := k.Poll(ctx)
		require.NoError(t, err, "read %d of %d records over gRPC", len(recs), want)
		for _, r := range got {
			recs = append(recs, compatRecord{
				Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value),
				Headers: compatHeaders(r.Headers), Timestamp: r.Timestamp.UnixMilli(),
			})
		}
	}
	sortCompatRecords(recs)
	return recs
}

// compatRequireSameRecords checks that got holds exactly the keys, values and
// headers of want (in any partition order) and that each key's records
// kept the order they were produced in.
func compatRequireSameRecords(t *testing.T, want, got []compatRecord, headers string) {
	t.Helper()
	require.Equal(t, len(want), len(got), "records")
	wantByKey := map[string][]string{}
	for _, r := range want {
		wantByKey[r.Key] = append(wantByKey[r.Key], r.Value)
	}
	gotByKey := map[string][]string{}
	keyPartition := map[string]int32{}
	for _, r := range got {
		require.Equal(t, headers, r.Headers, "headers of %v", r)
		if p, ok := keyPartition[r.Key]; ok {
			require.Equal(t, p, r.Partition, "key %q in two partitions", r.Key)
		}
		keyPartition[r.Key] = r.Partition
		gotByKey[r.Key] = append(gotByKey[r.Key], r.Value)
	}
	require.Equal(t, wantByKey, gotByKey, "values per key, in produce order")
}
