package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/errs"
	"github.com/sluice-io/sluice/libs/record"
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
}
