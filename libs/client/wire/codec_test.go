package wire_test

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// A Frame encodes to exactly the bytes of the equivalent message, and each
// body slice's release runs once the buffers are freed.
func TestFrameEncodesAsTheMessage(t *testing.T) {
	head, err := wire.HeadOf(&storagev1.FetchResponse{Topic: "t", Partition: 3, HighWatermark: 42, NextOffset: 40})
	require.NoError(t, err)
	var released atomic.Int32
	big := bytes.Repeat([]byte("x"), 64<<10)
	f := &wire.Frame{Head: head, Field: 15, Body: [][]byte{[]byte("abc"), big},
		Release: []func(){func() { released.Add(1) }, func() { released.Add(1) }}}
	out, err := wire.PassThroughCodec().Marshal(f)
	require.NoError(t, err)
	encoded := out.Materialize()
	var got storagev1.FetchResponse
	require.NoError(t, proto.Unmarshal(encoded, &got))
	require.Equal(t, "abc"+string(big), string(got.GetBatches()))
	require.Equal(t, int64(42), got.GetHighWatermark())
	want, err := proto.Marshal(&storagev1.FetchResponse{Topic: "t", Partition: 3, HighWatermark: 42, NextOffset: 40, Batches: append([]byte("abc"), big...)})
	require.NoError(t, err)
	require.Equal(t, want, encoded)
	require.Equal(t, int32(1), released.Load(), "a tiny slice is copied and released at once; the large one is still referenced")
	out.Free()
	require.Equal(t, int32(2), released.Load())

	// Other messages take the protobuf path.
	out, err = wire.PassThroughCodec().Marshal(&storagev1.FetchResponse{Topic: "x"})
	require.NoError(t, err)
	require.NoError(t, proto.Unmarshal(out.Materialize(), &got))
	require.Equal(t, "x", got.GetTopic())
}
