package replication

import (
	"google.golang.org/grpc/mem"

	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// batchesField is FollowerFetchResponse.batches.
var batchesField = wire.FieldNumber(&replicationv1.FollowerFetchResponse{}, "batches")

// chunkIn receives one FollowerFetchResponse without copying its batches:
// they point into the received buffer until the chunk is applied. On a
// follower every replicated byte passed through that copy.
type chunkIn struct {
	msg replicationv1.FollowerFetchResponse
	wire.Held
}

// DecodeBuffer implements wire.BufferDecoder.
func (c *chunkIn) DecodeBuffer(buf mem.Buffer) error {
	c.Hold(buf)
	c.msg.Reset()
	return wire.UnmarshalAliasing(buf.ReadOnlyData(), &c.msg, batchesField, func(b []byte) { c.msg.Batches = b })
}
