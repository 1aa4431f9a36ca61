package client

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

func TestDecodeFetchResponseMatchesProto(t *testing.T) {
	want := &storagev1.FetchResponse{
		Topic: "t", Partition: 7, HighWatermark: 1 << 40, LastStableOffset: 99, LogStartOffset: 3, NextOffset: 42,
		Error:               &edpb.Error{Code: 6, Message: "x"},
		AbortedTransactions: []*storagev1.AbortedTransaction{{ProducerId: 1, FirstOffset: 2}},
		DivergingEpoch:      &storagev1.EpochEndOffset{Epoch: 4, EndOffset: 5},
		Batches:             []byte("batch bytes"),
	}
	b, err := proto.Marshal(want)
	require.NoError(t, err)
	var got storagev1.FetchResponse
	require.NoError(t, decodeFetchResponse(b, &got))
	require.True(t, proto.Equal(want, &got), "%v", &got)
	// The batches alias the message buffer: no copy.
	require.Equal(t, &b[len(b)-len(got.Batches)], &got.Batches[0])
	require.Error(t, decodeFetchResponse([]byte{0xff}, &got))
}

func FuzzDecodeFetchResponse(f *testing.F) {
	b, _ := proto.Marshal(&storagev1.FetchResponse{Topic: "t", Batches: []byte{1, 2, 3}, Error: &edpb.Error{Code: 1}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m storagev1.FetchResponse
		if decodeFetchResponse(data, &m) != nil {
			return
		}
		// What decodes must round-trip through the standard codec.
		again, err := proto.Marshal(&m)
		require.NoError(t, err)
		var m2 storagev1.FetchResponse
		require.NoError(t, proto.Unmarshal(again, &m2))
		require.True(t, proto.Equal(&m, &m2))
	})
}
