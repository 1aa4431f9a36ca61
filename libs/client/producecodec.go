package client

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// Field numbers of the produce messages, from their descriptors.
var (
	fieldStreamRequestID  = wire.FieldNumber(&storagev1.ProduceStreamRequest{}, "request_id")
	fieldStreamRequest    = wire.FieldNumber(&storagev1.ProduceStreamRequest{}, "request")
	fieldRequestPartition = wire.FieldNumber(&storagev1.ProduceRequest{}, "partitions")
	fieldPartitionBatches = wire.FieldNumber(&storagev1.ProducePartition{}, "batches")
)

// encodeProduceStream encodes a ProduceStreamRequest as proto.Marshal
// would, except that each partition's batches are referenced, not copied:
// the small fields go into one buffer, and the batches follow their length
// prefixes as pieces of their own. Fields come in another order than
// proto.Marshal's (a partition's batches last), which protobuf allows.
//
// It sets req's Partitions and each partition's Data aside while encoding
// the rest, so req must not be used concurrently.
func encodeProduceStream(id uint64, req *storagev1.ProduceRequest) (wire.Encoded, error) {
	parts := req.Partitions
	req.Partitions = nil
	head, err := proto.Marshal(req)
	req.Partitions = parts
	if err != nil {
		return nil, err
	}
	// Encode each partition's small fields once, and size everything.
	encs := make([]partEnc, len(parts))
	reqLen := len(head)
	for i, pp := range parts {
		e := &encs[i]
		if b, ok := pp.GetData().(*storagev1.ProducePartition_Batches); ok {
			pp.Data = nil
			e.fields, err = proto.Marshal(pp)
			pp.Data = b
			e.batches, e.hasBatches = b.Batches, true
		} else {
			e.fields, err = proto.Marshal(pp)
		}
		if err != nil {
			return nil, err
		}
		reqLen += protowire.SizeTag(fieldRequestPartition) + protowire.SizeBytes(e.partLen())
	}
	small := make([]byte, 0, 16+len(head)+len(parts)*32)
	small = protowire.AppendTag(small, fieldStreamRequestID, protowire.VarintType)
	small = protowire.AppendVarint(small, id)
	small = protowire.AppendTag(small, fieldStreamRequest, protowire.BytesType)
	small = protowire.AppendVarint(small, uint64(reqLen))
	small = append(small, head...)
	out := make(wire.Encoded, 0, 1+2*len(parts))
	start := 0
	for _, e := range encs {
		small = protowire.AppendTag(small, fieldRequestPartition, protowire.BytesType)
		small = protowire.AppendVarint(small, uint64(e.partLen()))
		small = append(small, e.fields...)
		if !e.hasBatches {
			continue
		}
		small = protowire.AppendTag(small, fieldPartitionBatches, protowire.BytesType)
		small = protowire.AppendVarint(small, uint64(len(e.batches)))
		if len(e.batches) == 0 {
			continue
		}
		out = append(out, small[start:len(small):len(small)], e.batches)
		start = len(small)
	}
	if start < len(small) {
		out = append(out, small[start:])
	}
	return out, nil
}

// partEnc is one partition of a request being encoded.
type partEnc struct {
	fields     []byte // every field but the batches
	batches    []byte
	hasBatches bool // the batches field is set (else fields hold it all)
}

// partLen is the encoded length of the partition message.
func (e *partEnc) partLen() int {
	if !e.hasBatches {
		return len(e.fields)
	}
	return len(e.fields) + protowire.SizeTag(fieldPartitionBatches) + protowire.SizeBytes(len(e.batches))
}
