package integration

import (
	"bytes"
	"context"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage"
)

// Bad produce and fetch input gets a typed error, changes nothing, and
// leaves a produce stream usable for the next request.
func TestDataPathBadInput(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "small", 1, 1, map[string]string{"max.message.bytes": "1024"})
	require.NoError(t, err)
	conn, err := cl.Conn(c.Processes()[0].Addr)
	require.NoError(t, err)
	sc := storagev1.NewStorageServiceClient(conn)

	batch := func(value []byte) []byte {
		b := record.NewBuilder(record.CodecNone)
		require.NoError(t, b.AppendKV(time.Now().UnixMilli(), []byte("k"), value))
		out, err := b.Build()
		require.NoError(t, err)
		return append([]byte(nil), out...)
	}
	produce := func(topic string, p int32, data []byte) error {
		resp, err := sc.Produce(ctx, &storagev1.ProduceRequest{Partitions: []*storagev1.ProducePartition{{
			Topic: topic, Partition: p, Data: &storagev1.ProducePartition_Batches{Batches: data}}}})
		if err != nil {
			return err
		}
		if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
			return e
		}
		return nil
	}
	corrupt := batch([]byte("v"))
	corrupt[len(corrupt)-1] ^= 0xff // breaks the CRC
	for _, tc := range []struct {
		name  string
		err   error
		code  errs.Code
		words string
	}{
		{"unknown topic", produce("nope", 0, batch([]byte("v"))), errs.UnknownTopicOrPartition, `topic "nope" does not exist`},
		{"unknown partition", produce("small", 7, batch([]byte("v"))), errs.UnknownTopicOrPartition, "7 does not exist"},
		{"oversized batch", produce("small", 0, batch(make([]byte, 4096))), errs.MessageTooLarge, "1024"},
		{"corrupt batch", produce("small", 0, corrupt), errs.CorruptMessage, "CRC"},
		{"not a batch", produce("small", 0, []byte{1, 2, 3}), errs.CorruptMessage, ""},
	} {
		require.Error(t, tc.err, tc.name)
		require.Equal(t, tc.code, errs.CodeOf(tc.err), "%s: %v", tc.name, tc.err)
		require.Contains(t, tc.err.Error(), tc.words, tc.name)
	}
	end, err := cl.ListOffset(ctx, "small", 0, storagev1.OffsetSpec_OFFSET_SPEC_LATEST)
	require.NoError(t, err)
	require.Equal(t, int64(0), end, "nothing was appended")

	// Batches with a valid header and CRC whose records do not decode are
	// refused as INVALID_RECORD (not retriable: the same bytes can never
	// pass), whatever the codec, and nothing of them is appended: once
	// stored, no consumer or cleaner could read them. A length field beyond
	// the request is a damaged frame: CORRUPT_MESSAGE.
	_, err = cl.CreateTopic(ctx, "records", 1, 1, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the partition has a leader
		_, err := cl.ListOffset(ctx, "records", 0, storagev1.OffsetSpec_OFFSET_SPEC_LATEST)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	for _, tc := range []struct {
		name  string
		batch []byte
		code  errs.Code
		words string
	}{
		{"random bytes as records", recordsBatch(t, record.CodecNone, 20, randomBytes(4000)), errs.InvalidRecord, "record 0 of 20"},
		{"random bytes, zstd", recordsBatch(t, record.CodecZstd, 20, randomBytes(4000)), errs.InvalidRecord, "record 0 of 20"},
		{"random bytes, gzip", recordsBatch(t, record.CodecGzip, 20, randomBytes(4000)), errs.InvalidRecord, "record 0 of 20"},
		{"count above the records present", withCount(t, batch([]byte("value of a record")), 3), errs.InvalidRecord, "record 1 of 3"},
		{"1 GiB of zeros, zstd", zstdZeros(t, 1<<30), errs.InvalidRecord, "record 0 of 1000"},
		{"length field beyond the request", append(make([]byte, 8), 0x2d, 0x6e, 0x2b, 0x70, 1, 2, 3), errs.CorruptMessage, "truncated"},
	} {
		err := produce("records", 0, tc.batch)
		require.Error(t, err, tc.name)
		require.Equal(t, tc.code, errs.CodeOf(err), "%s: %v", tc.name, err)
		require.Contains(t, err.Error(), tc.words, tc.name)
	}
	end, err = cl.ListOffset(ctx, "records", 0, storagev1.OffsetSpec_OFFSET_SPEC_LATEST)
	require.NoError(t, err)
	require.Equal(t, int64(0), end, "no bad batch was appended")

	// Fetch: a negative offset is refused up front; one beyond the end is
	// out of range for that partition.
	fetch := func(offset int64) (*storagev1.FetchResponse, error) {
		stream, err := sc.Fetch(ctx, &storagev1.FetchRequest{Partitions: []*storagev1.FetchPartition{{Topic: "small", FetchOffset: offset}}})
		if err != nil {
			return nil, err
		}
		return stream.Recv()
	}
	_, err = fetch(-5)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, err.Error(), "fetch_offset: must not be negative")
	resp, err := fetch(100)
	require.NoError(t, err)
	require.Equal(t, errs.OffsetOutOfRange, resp.GetError().GetCode())

	// A bad request on a produce stream is answered with its error; the
	// next request on the same stream succeeds.
	stream, err := sc.ProduceStream(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&storagev1.ProduceStreamRequest{RequestId: 1, Request: &storagev1.ProduceRequest{Acks: 9}}))
	require.NoError(t, stream.Send(&storagev1.ProduceStreamRequest{RequestId: 2, Request: &storagev1.ProduceRequest{
		Partitions: []*storagev1.ProducePartition{{Topic: "small", Data: &storagev1.ProducePartition_Batches{Batches: corrupt}}}}}))
	require.NoError(t, stream.Send(&storagev1.ProduceStreamRequest{RequestId: 3, Request: &storagev1.ProduceRequest{
		Partitions: []*storagev1.ProducePartition{{Topic: "small", Data: &storagev1.ProducePartition_Batches{Batches: batch([]byte("ok"))}}}}}))
	r1, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, uint64(1), r1.GetRequestId())
	require.Equal(t, errs.InvalidRequest, r1.GetError().GetCode())
	require.Contains(t, r1.GetError().GetMessage(), "acks")
	r2, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, errs.CorruptMessage, r2.GetResponse().GetResults()[0].GetError().GetCode())
	r3, err := stream.Recv()
	require.NoError(t, err)
	require.Nil(t, r3.GetResponse().GetResults()[0].GetError())
	require.Equal(t, int64(0), r3.GetResponse().GetResults()[0].GetBaseOffset(), "the first valid batch gets offset 0")
	require.NoError(t, stream.CloseSend())

	// The SDK producer splits a batch refused as too large whose records
	// fit one by one, and sends the pieces in order; a record too large
	// alone fails with the leader's error.
	_, err = cl.CreateTopic(ctx, "split", 1, 1, map[string]string{"max.message.bytes": "1024"})
	require.NoError(t, err)
	p := cl.NewProducer(client.ProducerConfig{Linger: 100 * time.Millisecond})
	defer func() { _ = p.Close(context.Background()) }()
	recs := make([]*client.Record, 40)
	for i := range recs {
		recs[i] = &client.Record{Topic: "split", Partition: 0, Value: bytes.Repeat([]byte{byte('a' + i%26)}, 100)}
	}
	recs[20].Value = make([]byte, 2000)
	res, err := p.ProduceSync(ctx, recs...)
	require.Error(t, err)
	next := int64(0)
	for i, r := range res {
		if i == 20 {
			require.Equal(t, errs.MessageTooLarge, errs.CodeOf(r.Err), "%v", r.Err)
			require.Contains(t, r.Err.Error(), "1024")
			continue
		}
		require.NoError(t, r.Err, "record %d", i)
		require.Equal(t, next, r.Offset, "record %d", i)
		next++
	}
}

func randomBytes(n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// recordsBatch wraps records (the uncompressed record section) in a batch
// of count records with a valid header and CRC, as any client can.
func recordsBatch(t *testing.T, c record.Codec, count int32, records []byte) []byte {
	t.Helper()
	payload, err := record.Compress(nil, records, c)
	require.NoError(t, err)
	return headerFor(c, count, payload)
}

func headerFor(c record.Codec, count int32, payload []byte) []byte {
	b := append(make([]byte, record.BatchHeaderSize, record.BatchHeaderSize+len(payload)), payload...)
	record.PutBatchHeader(b, &record.BatchHeader{
		BatchLength: int32(len(b) - record.LogOverhead), PartitionLeaderEpoch: -1, Magic: record.Magic,
		Attributes: record.Attributes(c), LastOffsetDelta: count - 1, ProducerID: -1, ProducerEpoch: -1,
		BaseSequence: -1, RecordCount: count,
	})
	record.UpdateCRC(b)
	return b
}

// withCount rewrites a batch's record count and last offset delta and
// fixes its CRC.
func withCount(t *testing.T, batch []byte, count int32) []byte {
	t.Helper()
	h, ok := record.ParseBatchHeader(batch)
	require.True(t, ok)
	h.RecordCount, h.LastOffsetDelta = count, count-1
	b := bytes.Clone(batch)
	record.PutBatchHeader(b, &h)
	record.UpdateCRC(b)
	return b
}

// zstdZeros is a batch claiming 1000 records whose zstd payload inflates to
// n zero bytes: one frame of 1 MiB of zeros, repeated (a zstd stream may
// hold many frames).
func zstdZeros(t *testing.T, n int) []byte {
	t.Helper()
	frame, err := record.Compress(nil, make([]byte, 1<<20), record.CodecZstd)
	require.NoError(t, err)
	return headerFor(record.CodecZstd, 1000, bytes.Repeat(frame, n>>20))
}

// A batch no reader can decode may already be on disk (written before the
// leader decoded produced batches). Readers stop at it and say where: the
// SDK consumer delivers the records before it and then a *DecodeError
// naming topic, partition and offset, and fetches the partition no more
// (it used to reconnect every 50 ms forever, delivering nothing); a
// plain-records fetch answers INVALID_RECORD naming the offset (it used to
// skip the batch silently).
func TestUndecodableBatchOnDisk(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := cl.CreateTopic(ctx, "old", 1, 1, nil)
	require.NoError(t, err)
	p := c.Processes()[0]
	sc := func() storagev1.StorageServiceClient {
		conn, err := cl.Conn(p.Addr)
		require.NoError(t, err)
		return storagev1.NewStorageServiceClient(conn)
	}
	good := func(values ...string) []byte {
		b := record.NewBuilder(record.CodecNone)
		for _, v := range values {
			require.NoError(t, b.AppendKV(time.Now().UnixMilli(), []byte("k"), []byte(v)))
		}
		out, err := b.Build()
		require.NoError(t, err)
		return bytes.Clone(out)
	}
	for _, vs := range [][]string{{"r0", "r1", "r2"}, {"r3", "r4"}} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := sc().Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL, Partitions: []*storagev1.ProducePartition{{
				Topic: "old", Data: &storagev1.ProducePartition_Batches{Batches: good(vs...)}}}})
			require.NoError(ct, err)
			require.Nil(ct, resp.GetResults()[0].GetError())
		}, 30*time.Second, 100*time.Millisecond)
	}

	// Offsets 5..7: a batch whose header and CRC are valid and whose
	// record count exceeds the records present; then a valid batch at 8.
	require.NoError(t, p.Stop(20*time.Second))
	var dir string
	require.NoError(t, filepath.WalkDir(p.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "old-0" {
			dir = path
		}
		return err
	}))
	require.NotEmpty(t, dir, "log directory of old-0 under %s", p.DataDir)
	l, err := storage.Open(dir, storage.DefaultConfig(), storage.Options{})
	require.NoError(t, err)
	epoch, _ := l.LatestEpoch()
	bad := withCount(t, good("r5 has a value of some length", "r6 too"), 3)
	for _, b := range [][]byte{bad, good("r8")} {
		record.SetBaseOffset(b, l.LogEndOffset())
		record.SetPartitionLeaderEpoch(b, epoch)
		_, err = l.AppendAsFollower(b)
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush())
	require.NoError(t, l.Close())
	require.NoError(t, p.Start())
	require.NoError(t, p.WaitHealthy(ctx, 60*time.Second))

	// The SDK consumer: records 0..4, then the decode error, once.
	k := cl.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})
	defer k.Close()
	tp := client.TopicPartition{Topic: "old", Partition: 0}
	k.Assign(tp)
	var offsets []int64
	var decodeErr *client.DecodeError
	for decodeErr == nil {
		recs, err := k.Poll(ctx)
		if err != nil {
			require.ErrorAs(t, err, &decodeErr, "records so far: %v", offsets)
			break
		}
		for _, r := range recs {
			offsets = append(offsets, r.Offset)
		}
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4}, offsets, "the records before the bad batch are delivered")
	require.Equal(t, "old", decodeErr.Topic)
	require.EqualValues(t, 0, decodeErr.Partition)
	require.EqualValues(t, 5, decodeErr.Offset)
	require.Equal(t, errs.CorruptMessage, errs.CodeOf(decodeErr))
	require.Contains(t, decodeErr.Error(), "old-0: the batch at offset 5")
	require.EqualValues(t, 5, k.Position(tp))
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	recs, err := k.Poll(pctx)
	pcancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the error is returned once; the partition waits for Seek")
	require.Empty(t, recs)
	k.Seek(tp, 8)
	recs, err = k.Poll(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 8, recs[0].Offset, "Seek past the batch continues")

	// Plain records: 0..4 with next offset 5, then CORRUPT_MESSAGE at 5.
	fetch := func(offset int64) *storagev1.FetchResponse {
		stream, err := sc().Fetch(ctx, &storagev1.FetchRequest{Format: storagev1.RecordFormat_RECORD_FORMAT_RECORDS,
			Partitions: []*storagev1.FetchPartition{{Topic: "old", FetchOffset: offset}}})
		require.NoError(t, err)
		resp, err := stream.Recv()
		require.NoError(t, err)
		return resp
	}
	resp := fetch(0)
	require.Nil(t, resp.GetError())
	require.Len(t, resp.GetRecords().GetRecords(), 5)
	require.EqualValues(t, 5, resp.GetNextOffset())
	resp = fetch(5)
	require.Equal(t, errs.InvalidRecord, resp.GetError().GetCode())
	require.Contains(t, resp.GetError().GetMessage(), "old-0: the batch at offset 5 cannot be decoded")
	resp = fetch(8)
	require.Nil(t, resp.GetError())
	require.Len(t, resp.GetRecords().GetRecords(), 1)
}
