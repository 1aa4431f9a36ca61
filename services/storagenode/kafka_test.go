package storagenode

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace/noop"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/service"
)

const (
	testTopicID  = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"
	otherTopicID = "11111111-2222-4333-8444-555555555555"
)

// newKafkaNode returns a storage node (node 1) leading t-0 alone, with
// topic u led by node 2, whose Kafka endpoint is 10.0.0.2:9092.
func newKafkaNode(t *testing.T) *StorageNode {
	t.Helper()
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{
		Revision: 1, ControllerId: -1,
		Brokers: []*commonv1.Broker{
			{Id: 1, Endpoints: []*commonv1.Endpoint{{Name: "grpc", Host: "127.0.0.1", Port: 1}}, State: commonv1.BrokerState_BROKER_STATE_ALIVE},
			{Id: 2, Rack: "r2", State: commonv1.BrokerState_BROKER_STATE_ALIVE, Endpoints: []*commonv1.Endpoint{
				{Name: "grpc", Host: "10.0.0.2", Port: 2}, {Name: "kafka", Host: "10.0.0.2", Port: 9092}}},
		},
		Topics: []*controllerv1.TopicMetadata{
			{Name: "t", TopicId: testTopicID, Configs: map[string]string{"min.insync.replicas": "1", "sluice.fsync.before.ack": "false"},
				Partitions: []*commonv1.PartitionState{{Topic: "t", LeaderId: 1, LeaderEpoch: 3, Replicas: []int32{1}, Isr: []int32{1}}}},
			{Name: "u", TopicId: otherTopicID,
				Partitions: []*commonv1.PartitionState{{Topic: "u", LeaderId: 2, LeaderEpoch: 5, Replicas: []int32{2}, Isr: []int32{2}}}},
		},
	}))
	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	dir := t.TempDir()
	m := replica.NewManager(replica.Config{Dir: dir + "/logs", LagTimeMax: time.Hour}, 1, cache, nil, pool, log.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	meter := metricnoop.NewMeterProvider().Meter("")
	r := &StorageNode{deps: service.Deps{Metadata: cache, Replicas: m, Pool: pool, Node: config.Node{DataDir: dir}}, replicas: m,
		logger: log.Discard(), tracer: noop.NewTracerProvider().Tracer("")}
	r.producedBytes, _ = meter.Int64Counter("b")
	r.producedRecords, _ = meter.Int64Counter("r")
	r.duplicateBatches, _ = meter.Int64Counter("d")
	r.fetchedBytes, _ = meter.Int64Counter("f")
	// Registering also checks every advertised range is one kmsg encodes.
	r.registerKafka(kafka.NewMux())
	return r
}

// call runs a handler and returns its response, waiting for a Reply.Wait.
func call(t *testing.T, h kafka.Handler, msg kmsg.Request) kmsg.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := h(ctx, &kafka.Request{Key: msg.Key(), Version: msg.GetVersion(), Msg: msg})
	require.NoError(t, err)
	if reply.Release != nil {
		// The response may point into what Release gives back (a fetch's
		// page-cache chunks): it is read until the test ends.
		t.Cleanup(reply.Release)
	}
	if reply.Wait != nil {
		return reply.Wait(ctx)
	}
	require.NotNil(t, reply.Msg)
	return reply.Msg
}

func kafkaBatch(t *testing.T, codec record.Codec, values ...string) []byte {
	t.Helper()
	b := record.NewBuilder(codec)
	for _, v := range values {
		require.NoError(t, b.Append(&record.Record{Timestamp: 1700000000000, Key: []byte("k-" + v), Value: []byte(v),
			Headers: []record.Header{{Key: "h", Value: []byte(v)}}}))
	}
	out, err := b.Build()
	require.NoError(t, err)
	return bytes.Clone(out)
}

func produceReq(version, acks int16, topic string, partition int32, batches []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batches
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func fetchReq(version int16, topic string, id [16]byte, offset int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.SessionEpoch = version, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func onlyProduce(t *testing.T, resp kmsg.Response) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	pr := resp.(*kmsg.ProduceResponse)
	require.Len(t, pr.Topics, 1)
	require.Len(t, pr.Topics[0].Partitions, 1)
	return pr.Topics[0].Partitions[0]
}

func onlyFetch(t *testing.T, resp kmsg.Response) kmsg.FetchResponseTopicPartition {
	t.Helper()
	fr := resp.(*kmsg.FetchResponse)
	require.Zero(t, fr.ErrorCode)
	require.Len(t, fr.Topics, 1)
	require.Len(t, fr.Topics[0].Partitions, 1)
	return fr.Topics[0].Partitions[0]
}

// Batches produced over Kafka are fetched back byte for byte (with the
// offsets and leader epoch the leader stamped), by topic name and by id.
func TestKafkaProduceThenFetchSameBytes(t *testing.T) {
	r := newKafkaNode(t)
	var sent [][]byte
	for i, codec := range []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd} {
		b := kafkaBatch(t, codec, "a", "b", "c")
		sent = append(sent, bytes.Clone(b))
		rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, b)))
		require.Zero(t, rp.ErrorCode, "codec %v: %v", codec, rp.ErrorMessage)
		require.EqualValues(t, 3*i, rp.BaseOffset)
		require.EqualValues(t, -1, rp.LogAppendTime)
		require.Zero(t, rp.LogStartOffset)
	}
	var want []byte
	for i, b := range sent {
		record.AssignOffsets(b, int64(3*i), 3)
		want = append(want, b...)
	}
	id, ok := kafka.TopicID(testTopicID)
	require.True(t, ok)
	for _, version := range []int16{4, 11, 12, 13, 16} {
		fp := onlyFetch(t, call(t, r.kafkaFetch, fetchReq(version, "t", id, 0)))
		require.Zero(t, fp.ErrorCode, "v%d", version)
		require.Equal(t, want, fp.RecordBatches, "v%d: the stored batches, unchanged", version)
		require.EqualValues(t, 15, fp.HighWatermark)
		require.EqualValues(t, 15, fp.LastStableOffset)
		require.Zero(t, fp.LogStartOffset)
		require.EqualValues(t, -1, fp.PreferredReadReplica)
		require.Nil(t, fp.AbortedTransactions, "read_uncommitted has no aborted list")
	}
	// A fetch from the middle of a batch returns the whole batch.
	fp := onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, 4)))
	require.Equal(t, want[len(sent[0]):], fp.RecordBatches)
	// At the end: nothing, after MaxWait.
	req := fetchReq(11, "t", [16]byte{}, 15)
	req.MaxWaitMillis, req.MinBytes, req.IsolationLevel = 30, 1, 1
	fp = onlyFetch(t, call(t, r.kafkaFetch, req))
	require.Zero(t, fp.ErrorCode)
	require.Empty(t, fp.RecordBatches)
	require.NotNil(t, fp.RecordBatches, "empty records, never null (librdkafka refuses null)")
	require.NotNil(t, fp.AbortedTransactions, "read_committed answers an aborted list, if empty")
	// The same on the wire, for a partition with an error too.
	for _, req := range []*kmsg.FetchRequest{req, fetchReq(11, "nope", [16]byte{}, 0)} {
		resp := call(t, r.kafkaFetch, req).(*kmsg.FetchResponse)
		wire := resp.AppendTo(nil)
		back := kmsg.NewPtrFetchResponse()
		back.Version = req.Version
		require.NoError(t, back.ReadFrom(wire))
		require.NotNil(t, back.Topics[0].Partitions[0].RecordBatches)
	}
}

// A fetch waiting at the log end for MinBytes is answered as soon as a
// produce lands, well before MaxWait, and other requests are not held
// meanwhile (the wait runs in Reply.Wait).
func TestKafkaFetchLongPollWakesOnProduce(t *testing.T) {
	r := newKafkaNode(t)
	req := fetchReq(12, "t", [16]byte{}, 0)
	req.MaxWaitMillis, req.MinBytes = 20000, 1
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reply, err := r.kafkaFetch(ctx, &kafka.Request{Key: 1, Version: 12, Msg: req})
	require.NoError(t, err)
	require.NotNil(t, reply.Wait, "nothing to answer yet: the wait comes later")
	done := make(chan kmsg.Response, 1)
	go func() { done <- reply.Wait(ctx) }()
	rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(9, 1, "t", 0, kafkaBatch(t, record.CodecNone, "x"))))
	require.Zero(t, rp.ErrorCode)
	select {
	case resp := <-done:
		fp := onlyFetch(t, resp)
		require.NotEmpty(t, fp.RecordBatches)
		require.EqualValues(t, 1, fp.HighWatermark)
	case <-ctx.Done():
		t.Fatal("the fetch was not woken by the produce")
	}
	// Less than MinBytes there: the wait ends at MaxWait with what there is.
	req = fetchReq(12, "t", [16]byte{}, 0)
	req.MaxWaitMillis, req.MinBytes = 50, 1<<20
	fp := onlyFetch(t, call(t, r.kafkaFetch, req))
	require.Zero(t, fp.ErrorCode)
	require.NotEmpty(t, fp.RecordBatches)
}

// Bad input is answered with Kafka codes per partition; the others go on.
func TestKafkaProduceRefusals(t *testing.T) {
	r := newKafkaNode(t)
	good := kafkaBatch(t, record.CodecNone, "ok")

	rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, 2, "t", 0, good)))
	require.Equal(t, kafka.ErrorCode(errs.New(errs.InvalidRequiredAcks, "")), rp.ErrorCode)
	require.EqualValues(t, 21, rp.ErrorCode)

	rp = onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, nil)))
	require.EqualValues(t, 42, rp.ErrorCode, "no records: INVALID_REQUEST")
	require.NotNil(t, rp.ErrorMessage)

	rp = onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "nope", 0, good)))
	require.EqualValues(t, 3, rp.ErrorCode, "UNKNOWN_TOPIC_OR_PARTITION")

	garbage := bytes.Clone(good)
	garbage[len(garbage)-1] ^= 0xff // the CRC no longer matches
	rp = onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, garbage)))
	require.Contains(t, []int16{2, 87}, rp.ErrorCode, "CORRUPT_MESSAGE or INVALID_RECORD, got %d", rp.ErrorCode)
	require.EqualValues(t, -1, rp.BaseOffset)

	// Two partitions, one repeated: both of its entries are refused, the
	// other partition is appended.
	req := produceReq(11, -1, "t", 0, kafkaBatch(t, record.CodecNone, "dup1"))
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, req.Topics[0].Partitions[0])
	other := kmsg.NewProduceRequestTopic()
	other.Topic = "nope"
	other.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: good}}
	req.Topics = append(req.Topics, other)
	resp := call(t, r.kafkaProduce, req).(*kmsg.ProduceResponse)
	require.Len(t, resp.Topics, 2)
	require.EqualValues(t, 42, resp.Topics[0].Partitions[0].ErrorCode)
	require.EqualValues(t, 42, resp.Topics[0].Partitions[1].ErrorCode)
	require.EqualValues(t, 3, resp.Topics[1].Partitions[0].ErrorCode)

	// acks=0: no answer on success; a failed partition closes the
	// connection (the handler's error), as Kafka does.
	reply, err := r.kafkaProduce(context.Background(), &kafka.Request{Key: 0, Version: 11, Msg: produceReq(11, 0, "t", 0, kafkaBatch(t, record.CodecNone, "z"))})
	require.NoError(t, err)
	require.Nil(t, reply.Msg)
	require.Nil(t, reply.Wait)
	_, err = r.kafkaProduce(context.Background(), &kafka.Request{Key: 0, Version: 11, Msg: produceReq(11, 0, "nope", 0, good)})
	require.Error(t, err)
}

// A partition led elsewhere is answered NOT_LEADER_OR_FOLLOWER with the
// current leader and its Kafka endpoint (KIP-951) where the version has them.
func TestKafkaNotLeaderNamesTheLeader(t *testing.T) {
	r := newKafkaNode(t)
	resp := call(t, r.kafkaProduce, produceReq(10, -1, "u", 0, kafkaBatch(t, record.CodecNone, "x"))).(*kmsg.ProduceResponse)
	rp := resp.Topics[0].Partitions[0]
	require.EqualValues(t, 6, rp.ErrorCode)
	require.EqualValues(t, 2, rp.CurrentLeader.LeaderID)
	require.EqualValues(t, 5, rp.CurrentLeader.LeaderEpoch)
	require.Len(t, resp.Brokers, 1)
	require.Equal(t, "10.0.0.2", resp.Brokers[0].Host)
	require.EqualValues(t, 9092, resp.Brokers[0].Port)
	require.Equal(t, "r2", *resp.Brokers[0].Rack)

	id, _ := kafka.TopicID(otherTopicID)
	fresp := call(t, r.kafkaFetch, fetchReq(16, "", id, 0)).(*kmsg.FetchResponse)
	fp := fresp.Topics[0].Partitions[0]
	require.EqualValues(t, 6, fp.ErrorCode)
	require.EqualValues(t, 2, fp.CurrentLeader.LeaderID)
	require.Len(t, fresp.Brokers, 1)
	require.EqualValues(t, -1, fp.HighWatermark)

	// Before v12 neither field exists.
	fp = onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "u", [16]byte{}, 0)))
	require.EqualValues(t, 6, fp.ErrorCode)
	require.EqualValues(t, -1, fp.CurrentLeader.LeaderID)
}

func TestKafkaFetchRefusals(t *testing.T) {
	r := newKafkaNode(t)
	rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, kafkaBatch(t, record.CodecNone, "a", "b"))))
	require.Zero(t, rp.ErrorCode)

	// An incremental fetch session this node cannot have.
	req := fetchReq(12, "t", [16]byte{}, 0)
	req.SessionID, req.SessionEpoch = 7, 3
	fresp := call(t, r.kafkaFetch, req).(*kmsg.FetchResponse)
	require.EqualValues(t, 70, fresp.ErrorCode, "FETCH_SESSION_ID_NOT_FOUND")
	require.Empty(t, fresp.Topics)
	// A new session (epoch 0) is a full fetch without a session.
	req.SessionID, req.SessionEpoch = 0, 0
	fresp = call(t, r.kafkaFetch, req).(*kmsg.FetchResponse)
	require.Zero(t, fresp.ErrorCode)
	require.Zero(t, fresp.SessionID)
	require.NotEmpty(t, fresp.Topics[0].Partitions[0].RecordBatches)

	fp := onlyFetch(t, call(t, r.kafkaFetch, fetchReq(13, "", [16]byte{1, 2, 3}, 0)))
	require.EqualValues(t, 100, fp.ErrorCode, "UNKNOWN_TOPIC_ID")

	fp = onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, 3)))
	require.EqualValues(t, 1, fp.ErrorCode, "OFFSET_OUT_OF_RANGE")
	require.EqualValues(t, 2, fp.HighWatermark, "the bounds help the client reset")

	fp = onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, -5)))
	require.EqualValues(t, 1, fp.ErrorCode)

	for epoch, code := range map[int32]int16{2: 74, 4: 75, 3: 0} {
		req := fetchReq(11, "t", [16]byte{}, 0)
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch
		fp = onlyFetch(t, call(t, r.kafkaFetch, req))
		require.Equal(t, code, fp.ErrorCode, "current leader epoch %d", epoch)
	}

	fp = onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "bad name!", [16]byte{}, 0)))
	require.EqualValues(t, 3, fp.ErrorCode)
}

func listReq(version int16, iso int8, ts ...int64) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.IsolationLevel = version, iso
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	for _, x := range ts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = x
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func TestKafkaOffsetsAPIs(t *testing.T) {
	r := newKafkaNode(t)
	b := record.NewBuilder(record.CodecNone)
	for i := range 4 {
		require.NoError(t, b.AppendKV(1000*int64(i+1), nil, []byte{byte(i)}))
	}
	batch, err := b.Build()
	require.NoError(t, err)
	rp := onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, bytes.Clone(batch))))
	require.Zero(t, rp.ErrorCode)

	for _, tc := range []struct {
		ts           int64
		offset, when int64
	}{{-2, 0, -1}, {-1, 4, -1}, {2500, 2, 3000}, {9999, -1, -1}} {
		resp := call(t, r.kafkaListOffsets, listReq(6, 0, tc.ts)).(*kmsg.ListOffsetsResponse)
		p := resp.Topics[0].Partitions[0]
		require.Zero(t, p.ErrorCode, "timestamp %d", tc.ts)
		require.Equal(t, tc.offset, p.Offset, "timestamp %d", tc.ts)
		require.Equal(t, tc.when, p.Timestamp, "timestamp %d", tc.ts)
		if tc.offset >= 0 {
			require.EqualValues(t, 3, p.LeaderEpoch, "timestamp %d", tc.ts)
		}
	}
	one := func(version int16, iso int8, ts int64) kmsg.ListOffsetsResponseTopicPartition {
		resp := call(t, r.kafkaListOffsets, listReq(version, iso, ts)).(*kmsg.ListOffsetsResponse)
		require.Len(t, resp.Topics[0].Partitions, 1)
		return resp.Topics[0].Partitions[0]
	}
	require.EqualValues(t, 4, one(6, 1, -1).Offset, "read_committed latest: the LSO")
	require.EqualValues(t, 42, one(6, 0, -3).ErrorCode, "max timestamp is a spec of v7+")
	require.EqualValues(t, 42, one(7, 0, -4).ErrorCode, "earliest local is a spec of v8+")
	resp := call(t, r.kafkaListOffsets, listReq(6, 0, -1, -2)).(*kmsg.ListOffsetsResponse)
	require.EqualValues(t, 42, resp.Topics[0].Partitions[1].ErrorCode, "a partition asked twice")
	p := one(8, 0, -3)
	require.Zero(t, p.ErrorCode)
	require.EqualValues(t, 3, p.Offset, "the record with the largest timestamp")
	require.EqualValues(t, 4000, p.Timestamp)
	require.EqualValues(t, 3, p.LeaderEpoch)
	require.EqualValues(t, 0, one(8, 0, -4).Offset, "earliest local: the earliest, without tiered storage")
	// A later batch whose largest timestamp is in its middle, and one
	// with an older timestamp after it.
	b2 := record.NewBuilder(record.CodecZstd)
	for _, ts := range []int64{5000, 9000, 6000} {
		require.NoError(t, b2.AppendKV(ts, nil, []byte("x")))
	}
	batch2, err := b2.Build()
	require.NoError(t, err)
	require.Zero(t, onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, bytes.Clone(batch2)))).ErrorCode)
	require.Zero(t, onlyProduce(t, call(t, r.kafkaProduce, produceReq(11, -1, "t", 0, bytes.Clone(batch)))).ErrorCode)
	p = one(7, 0, -3)
	require.EqualValues(t, 5, p.Offset)
	require.EqualValues(t, 9000, p.Timestamp)

	oreq := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oreq.Version = 4
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "t"
	op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	op.LeaderEpoch, op.CurrentLeaderEpoch = 3, 3
	ot.Partitions = append(ot.Partitions, op)
	op.Partition = 9
	ot.Partitions = append(ot.Partitions, op)
	oreq.Topics = append(oreq.Topics, ot)
	oresp := call(t, r.kafkaOffsetForLeaderEpoch, oreq).(*kmsg.OffsetForLeaderEpochResponse)
	require.Zero(t, oresp.Topics[0].Partitions[0].ErrorCode)
	require.EqualValues(t, 3, oresp.Topics[0].Partitions[0].LeaderEpoch)
	require.EqualValues(t, 11, oresp.Topics[0].Partitions[0].EndOffset)
	require.EqualValues(t, 3, oresp.Topics[0].Partitions[1].ErrorCode)

	dreq := kmsg.NewPtrDeleteRecordsRequest()
	dreq.Version = 2
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "t"
	dt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 2}, {Partition: 0, Offset: 3}}
	dreq.Topics = append(dreq.Topics, dt)
	dresp := call(t, r.kafkaDeleteRecords, dreq).(*kmsg.DeleteRecordsResponse)
	require.Zero(t, dresp.Topics[0].Partitions[0].ErrorCode)
	require.EqualValues(t, 2, dresp.Topics[0].Partitions[0].LowWatermark)
	require.EqualValues(t, 42, dresp.Topics[0].Partitions[1].ErrorCode, "a repeated partition")
	resp = call(t, r.kafkaListOffsets, listReq(6, 0, -2)).(*kmsg.ListOffsetsResponse)
	require.EqualValues(t, 2, resp.Topics[0].Partitions[0].Offset)

	lreq := kmsg.NewPtrDescribeLogDirsRequest()
	lreq.Version = 4
	lresp := call(t, r.kafkaDescribeLogDirs, lreq).(*kmsg.DescribeLogDirsResponse)
	require.Len(t, lresp.Dirs, 1)
	require.Len(t, lresp.Dirs[0].Topics, 1)
	require.Equal(t, "t", lresp.Dirs[0].Topics[0].Topic)
	require.Positive(t, lresp.Dirs[0].Topics[0].Partitions[0].Size)
	require.Positive(t, lresp.Dirs[0].TotalBytes)

	preq := kmsg.NewPtrDescribeProducersRequest()
	preq.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: "t", Partitions: []int32{0}}, {Topic: "u", Partitions: []int32{0}}}
	presp := call(t, r.kafkaDescribeProducers, preq).(*kmsg.DescribeProducersResponse)
	require.Zero(t, presp.Topics[0].Partitions[0].ErrorCode)
	require.EqualValues(t, 6, presp.Topics[1].Partitions[0].ErrorCode)
}

// Errors only Sluice has are answered with a code Kafka clients retry when
// they are retriable.
func TestItemCode(t *testing.T) {
	code, msg := itemCode(errs.New(errs.NodeNotReady, "stopping").Proto())
	require.EqualValues(t, 7, code, "REQUEST_TIMED_OUT")
	require.Equal(t, "stopping", *msg)
	code, _ = itemCode(errs.New(errs.NotLeaderOrFollower, "x").Proto())
	require.EqualValues(t, 6, code)
	code, msg = itemCode(nil)
	require.Zero(t, code)
	require.Nil(t, msg)
}

func TestTopicIDOf(t *testing.T) {
	id, ok := kafka.TopicID(testTopicID)
	require.True(t, ok)
	require.Equal(t, [16]byte{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x49, 0x78, 0x86, 0x95, 0xa4, 0xb3, 0xc2, 0xd1, 0xe0, 0xf0}, id)
	for _, bad := range []string{"", "id", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0fz"} {
		_, ok := kafka.TopicID(bad)
		require.False(t, ok, bad)
	}
}

// The Kafka listener reuses a Produce request's frame, which the request's
// record batches point into, once the response is encoded: nothing of the
// append path may keep them. Each request's batches are overwritten once
// its response is built, as a reused frame would be, and every batch must
// still be fetched back byte for byte and the responses must not change.
func TestKafkaProduceKeepsNoneOfTheRequestBytes(t *testing.T) {
	r := newKafkaNode(t)
	var want []byte
	next, seq := int64(0), int32(0)
	for i := range 30 {
		acks := []int16{-1, 1, 0}[i%3]
		values := make([]string, 1+i%4)
		for j := range values {
			values[j] = string(bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*37+j))
		}
		b := kafkaBatch(t, record.CodecNone, values...)
		if i%2 == 1 {
			// Idempotent: the producer state keeps its sequence range.
			bld := record.NewBuilder(record.CodecNone)
			bld.SetProducer(4242, 0, seq)
			seq += int32(len(values))
			for _, v := range values {
				require.NoError(t, bld.Append(&record.Record{Timestamp: 1700000000000, Value: []byte(v)}))
			}
			out, err := bld.Build()
			require.NoError(t, err)
			b = bytes.Clone(out)
		}
		sent := bytes.Clone(b)
		req := produceReq(11, acks, "t", 0, b)
		var before string
		if acks == 0 {
			reply, err := r.kafkaProduce(context.Background(), &kafka.Request{Key: 0, Version: 11, Msg: req})
			require.NoError(t, err)
			require.Nil(t, reply.Msg)
		} else {
			resp := call(t, r.kafkaProduce, req)
			before = fmt.Sprintf("%+v", resp)
			rp := onlyProduce(t, resp)
			require.Zero(t, rp.ErrorCode, "request %d: %v", i, rp.ErrorMessage)
			require.Equal(t, next, rp.BaseOffset)
			for k := range b {
				b[k] = 0xdb // the frame, reused
			}
			require.Equal(t, before, fmt.Sprintf("%+v", resp), "request %d: the response points into the request", i)
		}
		for k := range b {
			b[k] = 0xdb
		}
		record.AssignOffsets(sent, next, 3)
		want = append(want, sent...)
		next += int64(len(values))
	}
	var got []byte
	for offset := int64(0); offset < next; {
		fp := onlyFetch(t, call(t, r.kafkaFetch, fetchReq(11, "t", [16]byte{}, offset)))
		require.Zero(t, fp.ErrorCode)
		require.NotEmpty(t, fp.RecordBatches)
		got = append(got, fp.RecordBatches...)
		for it := record.Batches(fp.RecordBatches); it.Next(); {
			h := it.Header()
			offset = h.LastOffset() + 1
		}
	}
	require.Equal(t, want, got)
}
