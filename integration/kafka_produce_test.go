package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// kpRecord is one record as both protocols must return it.
type kpRecord struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   string
	Timestamp int64
}

func kpHeaders(keys []string, values [][]byte) string {
	s := ""
	for i := range keys {
		s += keys[i] + "=" + string(values[i]) + ";"
	}
	return s
}

func kpFromKgo(r *kgo.Record) kpRecord {
	keys, values := make([]string, len(r.Headers)), make([][]byte, len(r.Headers))
	for i, h := range r.Headers {
		keys[i], values[i] = h.Key, h.Value
	}
	return kpRecord{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value),
		Headers: kpHeaders(keys, values), Timestamp: r.Timestamp.UnixMilli()}
}

func kpFromSDK(r *client.ConsumedRecord) kpRecord {
	keys, values := make([]string, len(r.Headers)), make([][]byte, len(r.Headers))
	for i, h := range r.Headers {
		keys[i], values[i] = h.Key, h.Value
	}
	return kpRecord{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value),
		Headers: kpHeaders(keys, values), Timestamp: r.Timestamp.UnixMilli()}
}

// kpCreateTopic creates a topic over gRPC and waits until every partition
// has a leader.
func kpCreateTopic(t *testing.T, cl *client.Client, topic string, partitions, rf int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, topic, partitions, rf, nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		md, err := cl.Metadata(ctx, topic)
		require.NoError(c, err)
		require.Len(c, md.GetTopics(), 1)
		for _, p := range md.GetTopics()[0].GetPartitions() {
			require.GreaterOrEqual(c, p.GetLeaderId(), int32(0))
			require.Len(c, p.GetIsr(), int(rf))
		}
	}, 30*time.Second, 100*time.Millisecond)
}

// kpReadGRPC reads want records of a topic over gRPC with the SDK consumer,
// from the earliest offsets, keyed by partition and offset.
func kpReadGRPC(t *testing.T, cl *client.Client, topic string, want int, readCommitted bool) map[[2]int64]kpRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, ReadCommitted: readCommitted})
	defer k.Close()
	require.NoError(t, k.AssignTopic(ctx, topic))
	out := map[[2]int64]kpRecord{}
	for len(out) < want {
		recs, err := k.Poll(ctx)
		require.NoError(t, err, "read %d of %d records over gRPC", len(out), want)
		for _, r := range recs {
			out[[2]int64{int64(r.Partition), r.Offset}] = kpFromSDK(r)
		}
	}
	require.Len(t, out, want)
	return out
}

// kpReadKafka reads want records of a topic over Kafka with kgo, from the
// start of every partition.
func kpReadKafka(t *testing.T, bootstrap []string, topic string, want int, opts ...kgo.Opt) map[[2]int64]kpRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	defer k.Close()
	out := map[[2]int64]kpRecord{}
	for len(out) < want {
		fs := k.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records over Kafka", len(out), want)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { out[[2]int64{int64(r.Partition), r.Offset}] = kpFromKgo(r) })
	}
	require.Len(t, out, want)
	return out
}

// kpLeader returns the process leading a partition.
func kpLeader(t *testing.T, c *devcluster.Cluster, cl *client.Client, topic string, partition int32) *devcluster.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := cl.Metadata(ctx, topic)
	require.NoError(t, err)
	id := md.GetTopics()[0].GetPartitions()[partition].GetLeaderId()
	for _, p := range c.Processes() {
		if p.NodeID == id {
			return p
		}
	}
	t.Fatalf("no process is node %d", id)
	return nil
}

// kpRawGRPC returns a partition's stored batches from offset 0 over gRPC
// (BATCHES format, straight from the leader's log).
func kpRawGRPC(t *testing.T, leader *devcluster.Process, topic string, partition int32) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(leader.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	stream, err := storagev1.NewStorageServiceClient(conn).Fetch(ctx, &storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: topic, Partition: partition, PartitionMaxBytes: 16 << 20}},
		MaxBytes:   16 << 20, Format: storagev1.RecordFormat_RECORD_FORMAT_BATCHES})
	require.NoError(t, err)
	var out []byte
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		require.Nil(t, resp.GetError())
		out = append(out, resp.GetBatches()...)
	}
	return out
}

// kpRawKafka returns a partition's batches from offset 0 with one Kafka
// Fetch to its leader.
func kpRawKafka(t *testing.T, k *kgo.Client, leader int32, topic string, partition int32, isolation int8) *kmsg.FetchResponseTopicPartition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes, req.SessionEpoch, req.IsolationLevel = 16<<20, -1, isolation
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = partition, 16<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// Fetch v13+ names topics by id: give the id Metadata reports.
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := k.Request(ctx, mreq)
	require.NoError(t, err)
	req.Topics[0].TopicID = mresp.(*kmsg.MetadataResponse).Topics[0].TopicID
	resp, err := k.Broker(int(leader)).Request(ctx, req)
	require.NoError(t, err)
	fr := resp.(*kmsg.FetchResponse)
	require.Zero(t, fr.ErrorCode)
	require.Len(t, fr.Topics, 1)
	require.Len(t, fr.Topics[0].Partitions, 1)
	return &fr.Topics[0].Partitions[0]
}

// Kafka and gRPC over the same logs, on 3 storage nodes with replication
// factor 3: records produced with franz-go (idempotent, acks=all, every
// codec) read over gRPC at the same offsets with the same keys, headers and
// timestamps, and the other way round; the Kafka fetch returns the very
// bytes the gRPC fetch does; read_committed; ListOffsets; a leader killed
// while franz-go produces.
func TestKafkaProduceConsume(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	sdk := cluster.Client(t, c)
	bootstrap := c.KafkaBootstrap()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	t.Run("kafka-to-grpc", func(t *testing.T) {
		for _, codec := range []struct {
			name string
			c    kgo.CompressionCodec
		}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
			{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
			t.Run(codec.name, func(t *testing.T) {
				topic := "kp-" + codec.name
				kpCreateTopic(t, sdk, topic, 3, 3)
				k, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ProducerBatchCompression(codec.c), kgo.ProducerLinger(5*time.Millisecond))
				require.NoError(t, err)
				defer k.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				const n = 300
				var recs []*kgo.Record
				for i := range n {
					recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("key-" + strconv.Itoa(i%17)),
						Value: []byte(fmt.Sprintf("value-%d-%s", i, codec.name)), Timestamp: base.Add(time.Duration(i) * time.Millisecond),
						Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: nil}}})
				}
				require.NoError(t, k.ProduceSync(ctx, recs...).FirstErr())
				want := map[[2]int64]kpRecord{}
				for _, r := range recs {
					want[[2]int64{int64(r.Partition), r.Offset}] = kpFromKgo(r)
				}
				require.Len(t, want, n, "every record got its own offset")
				require.Equal(t, want, kpReadGRPC(t, sdk, topic, n, false))
				require.Equal(t, want, kpReadKafka(t, bootstrap, topic, n))
			})
		}
	})

	t.Run("grpc-to-kafka", func(t *testing.T) {
		const topic, n = "kp-from-grpc", 300
		kpCreateTopic(t, sdk, topic, 3, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := sdk.NewProducer(client.ProducerConfig{Compression: record.CodecZstd, Linger: 5 * time.Millisecond})
		var recs []*client.Record
		for i := range n {
			recs = append(recs, &client.Record{Topic: topic, Partition: -1, Key: []byte("key-" + strconv.Itoa(i%13)), Value: []byte("v" + strconv.Itoa(i)),
				Timestamp: base.Add(time.Duration(i) * time.Millisecond), Headers: []record.Header{{Key: "h", Value: []byte(strconv.Itoa(i))}}})
		}
		res, err := p.ProduceSync(ctx, recs...)
		require.NoError(t, err)
		require.NoError(t, p.Close(ctx))
		want := map[[2]int64]kpRecord{}
		for _, r := range res {
			require.NoError(t, r.Err)
			want[[2]int64{int64(r.Partition), r.Offset}] = kpRecord{Partition: r.Partition, Offset: r.Offset, Key: string(r.Record.Key),
				Value: string(r.Record.Value), Headers: "h=" + string(r.Record.Headers[0].Value) + ";", Timestamp: r.Record.Timestamp.UnixMilli()}
		}
		require.Equal(t, want, kpReadKafka(t, bootstrap, topic, n))

		// The same bytes: a Kafka fetch returns exactly the batches a gRPC
		// fetch streams from the leader's log.
		k, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...))
		require.NoError(t, err)
		defer k.Close()
		for part := range int32(3) {
			leader := kpLeader(t, c, sdk, topic, part)
			raw := kpRawGRPC(t, leader, topic, part)
			require.NotEmpty(t, raw)
			kp := kpRawKafka(t, k, leader.NodeID, topic, part, 0)
			require.Zero(t, kp.ErrorCode)
			require.Equal(t, raw, kp.RecordBatches, "partition %d", part)
		}
	})

	t.Run("read-committed", func(t *testing.T) {
		const topic = "kp-txn"
		kpCreateTopic(t, sdk, topic, 1, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := sdk.NewProducer(client.ProducerConfig{TransactionalID: "kp-txn-writer"})
		require.NoError(t, p.InitTransactions(ctx))
		for i, commit := range []bool{true, false, true} {
			require.NoError(t, p.BeginTransaction())
			for j := range 10 {
				require.NoError(t, p.Produce(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("txn%d-%d", i, j))}, nil))
			}
			if commit {
				require.NoError(t, p.CommitTransaction(ctx))
			} else {
				// Sent first: an abort drops what is not sent yet.
				require.NoError(t, p.Flush(ctx))
				require.NoError(t, p.AbortTransaction(ctx))
			}
		}
		require.NoError(t, p.Close(ctx))
		committed := kpReadKafka(t, bootstrap, topic, 20, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		for _, r := range committed {
			require.NotContains(t, r.Value, "txn1-", "an aborted record read under read_committed")
		}
		require.Equal(t, kpReadGRPC(t, sdk, topic, 20, true), committed)
		require.Len(t, kpReadKafka(t, bootstrap, topic, 30), 30, "read_uncommitted sees the aborted records too")

		k, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...))
		require.NoError(t, err)
		defer k.Close()
		leader := kpLeader(t, c, sdk, topic, 0)
		kp := kpRawKafka(t, k, leader.NodeID, topic, 0, 1)
		require.Len(t, kp.AbortedTransactions, 1, "the aborted transaction, for the client to drop")
		require.EqualValues(t, 33, kp.LastStableOffset, "30 records and 3 markers")
	})

	t.Run("list-offsets", func(t *testing.T) {
		const topic = "kp-none"
		k, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...))
		require.NoError(t, err)
		defer k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, tc := range []struct {
			ts   int64
			want []int64
		}{{-2, []int64{0, 0, 0}}, {-1, nil}} {
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for p := range int32(3) {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = p, tc.ts
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			shards := k.RequestSharded(ctx, req)
			got := make([]int64, 3)
			for _, s := range shards {
				require.NoError(t, s.Err)
				for _, t2 := range s.Resp.(*kmsg.ListOffsetsResponse).Topics {
					for _, p := range t2.Partitions {
						require.Zero(t, p.ErrorCode)
						got[p.Partition] = p.Offset
					}
				}
			}
			if tc.want == nil {
				ends, err := sdk.ListOffsets(ctx, client.OffsetLatest, 0,
					client.TopicPartition{Topic: topic, Partition: 0}, client.TopicPartition{Topic: topic, Partition: 1}, client.TopicPartition{Topic: topic, Partition: 2})
				require.NoError(t, err)
				var sum int64
				for p := range int32(3) {
					tc.want = append(tc.want, ends[client.TopicPartition{Topic: topic, Partition: p}])
					sum += ends[client.TopicPartition{Topic: topic, Partition: p}]
				}
				require.EqualValues(t, 300, sum)
			}
			require.Equal(t, tc.want, got, "timestamp %d", tc.ts)
		}
	})

	// Last: it kills a node. franz-go keeps producing through the leader
	// change (idempotent, acks=all); every record is in the log once, in
	// order, at the offset it was acknowledged at.
	t.Run("leader-kill", func(t *testing.T) {
		const topic, n = "kp-kill", 3000
		kpCreateTopic(t, sdk, topic, 1, 3)
		k, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ProducerLinger(2*time.Millisecond), kgo.MaxBufferedRecords(500),
			kgo.RetryTimeout(time.Minute))
		require.NoError(t, err)
		defer k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
		defer cancel()
		var mu sync.Mutex
		acked := map[int64]int64{} // value → offset
		var failed []error
		var wg sync.WaitGroup
		var killed *devcluster.Process
		for i := range int64(n) {
			if i == n/3 {
				require.NoError(t, k.Flush(ctx))
				killed = kpLeader(t, c, sdk, topic, 0)
				t.Logf("killing %s, the leader, after %d records", killed.Name, i)
				require.NoError(t, killed.Kill())
			}
			wg.Add(1)
			k.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(strconv.FormatInt(i, 10))}, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[i] = r.Offset
			})
		}
		wg.Wait()
		require.Empty(t, failed)
		require.Len(t, acked, n)
		require.NoError(t, killed.Start())
		read := kpReadGRPC(t, sdk, topic, n, false)
		for off := range int64(n) {
			r, ok := read[[2]int64{0, off}]
			require.True(t, ok, "offset %d", off)
			require.Equal(t, strconv.FormatInt(off, 10), r.Value, "offset %d: records in produce order, none twice", off)
			require.Equal(t, off, acked[off], "record %d acknowledged at its offset", off)
		}
	})
}
