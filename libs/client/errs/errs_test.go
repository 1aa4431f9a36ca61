package errs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Every code in the proto enum must have a catalog entry, and codes that
// Kafka also has must use Kafka's number, name and retriability so a Kafka
// protocol listener can pass them through.
func TestCatalogMatchesKafka(t *testing.T) {
	// Where Sluice deliberately differs from Kafka's retriable flag, and why.
	// franz-go still uses the name Kafka had before KIP-392.
	kafkaNames := map[string]string{"NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER"}
	for num, name := range edpb.ErrorCode_name {
		code := errs.Code(num)
		entry := errs.Lookup(code)
		if num == 0 {
			require.Equal(t, codes.OK, entry.GRPC)
			continue
		}
		require.NotEqual(t, codes.OK, entry.GRPC, "%s has no catalog entry", name)
		if num >= 1000 {
			require.Equal(t, int16(-1), entry.Kafka, name)
			continue
		}
		require.Equal(t, int16(num), entry.Kafka, name)
		kafkaErr := kerr.ErrorForCode(int16(num))
		var ke *kerr.Error
		require.True(t, errors.As(kafkaErr, &ke), "kerr does not know code %d (%s)", num, name)
		kname := ke.Message
		if renamed, ok := kafkaNames[kname]; ok {
			kname = renamed
		}
		require.Equal(t, "ERROR_CODE_"+kname, name, "code %d", num)
		require.Equal(t, ke.Retriable, entry.Retriable, "retriable flag of %s", name)
	}
}

// Every ErrorCode value carries its catalog option with a real gRPC code name:
// the catalog is derived from these options, so a value without one would be
// treated as an unknown, non-retriable code.
func TestEveryCodeHasAnEntry(t *testing.T) {
	vals := edpb.ErrorCode(0).Descriptor().Values()
	for i := 0; i < vals.Len(); i++ {
		v := vals.Get(i)
		row, ok := proto.GetExtension(v.Options(), edpb.E_Catalog).(*edpb.CatalogEntry)
		require.True(t, ok && row != nil, "%s has no (catalog) option", v.Name())
		var g codes.Code
		require.NoError(t, g.UnmarshalJSON([]byte(strconv.Quote(row.GetGrpc()))), "%s: grpc %q", v.Name(), row.GetGrpc())
		e := errs.Lookup(errs.Code(v.Number()))
		require.Equal(t, g, e.GRPC, "%s", v.Name())
		require.Equal(t, row.GetRetriable(), e.Retriable, "%s", v.Name())
	}
}

func TestStatusRoundTrip(t *testing.T) {
	orig := errs.New(errs.NotLeaderOrFollower, "node 1 does not lead t-0").WithLeader(&edpb.LeaderHint{
		Topic: "t", LeaderId: 2, LeaderEpoch: 7, LeaderAddress: "127.0.0.1:9100",
	})
	st := status.Convert(orig)
	require.Equal(t, codes.Unavailable, st.Code())
	require.Contains(t, st.Message(), "NOT_LEADER_OR_FOLLOWER")

	back := errs.From(st.Err())
	require.Equal(t, errs.NotLeaderOrFollower, back.Code)
	require.Equal(t, "node 1 does not lead t-0", back.Message)
	require.Equal(t, int32(2), back.Leader.GetLeaderId())
	require.Equal(t, "127.0.0.1:9100", back.Leader.GetLeaderAddress())
	require.True(t, back.Retriable())
}

func TestInvalidCarriesFieldViolation(t *testing.T) {
	err := errs.Invalid(errs.InvalidPartitions, "topics[0].num_partitions", "must be positive, got %d", -3)
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code())
	back := errs.From(st.Err())
	require.Len(t, back.Violations, 1)
	require.Equal(t, "topics[0].num_partitions", back.Violations[0].GetField())
	require.Equal(t, "must be positive, got -3", back.Violations[0].GetDescription())
}

func TestFromClassifiesForeignErrors(t *testing.T) {
	require.Nil(t, errs.From(nil))
	require.Equal(t, errs.RequestTimedOut, errs.CodeOf(fmt.Errorf("waiting: %w", context.DeadlineExceeded)))
	require.Equal(t, errs.UnknownServerError, errs.CodeOf(errors.New("boom")))
	// A transport failure has no Sluice details and must be retriable.
	transport := status.Error(codes.Unavailable, "connection refused")
	require.Equal(t, errs.NodeUnreachable, errs.CodeOf(transport))
	require.True(t, errs.IsRetriable(transport))
	// Wrapping keeps the code.
	wrapped := fmt.Errorf("producing: %w", errs.New(errs.MessageTooLarge, "batch of %d bytes", 2<<20))
	require.True(t, errs.Is(wrapped, errs.MessageTooLarge))
	require.False(t, errs.IsRetriable(wrapped))
}

func TestItemErrorNilIsSuccess(t *testing.T) {
	require.Nil(t, errs.ItemError(nil))
	require.Nil(t, errs.FromProto(nil))
	p := errs.ItemError(errs.New(errs.TopicAlreadyExists, "topic t exists"))
	require.Equal(t, errs.TopicAlreadyExists, p.GetCode())
	require.False(t, p.GetRetriable())
}

func TestFieldsCollectsAll(t *testing.T) {
	var f errs.Fields
	require.NoError(t, f.Err())
	f.Add("a", "must be positive, got %d", -1)
	f.Add("b[2].c", "is empty")
	err := f.Err()
	e := errs.From(err)
	require.Equal(t, errs.InvalidRequest, e.Code)
	require.Equal(t, "a: must be positive, got -1; b[2].c: is empty", e.Message)
	require.Len(t, e.Violations, 2)
}

func TestFieldsPicksCommonCode(t *testing.T) {
	var f errs.Fields
	f.AddCode(errs.InvalidTopic, "topics[0].name", "bad")
	require.Equal(t, errs.InvalidTopic, errs.CodeOf(f.Err()))
	f.AddCode(errs.InvalidPartitions, "topics[0].num_partitions", "bad")
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(f.Err()))
}
