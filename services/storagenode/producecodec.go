package storagenode

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// produceIn receives one ProduceStreamRequest without copying its batches:
// they point into the received buffer, which is freed once they are
// appended. At hundreds of MB/s the copy, and the garbage of a fresh
// message-sized buffer per request, were among the larger costs of the
// produce path.
type produceIn struct {
	msg storagev1.ProduceStreamRequest
	wire.Held
}

// DecodeBuffer implements wire.BufferDecoder.
func (p *produceIn) DecodeBuffer(buf mem.Buffer) error {
	p.Hold(buf)
	p.msg.Reset()
	return decodeProduceStreamRequest(buf.ReadOnlyData(), &p.msg)
}

// Field numbers of the messages decoded by hand, from their descriptors;
// everything else goes through the protobuf decoder.
var (
	fieldStreamRequest     = wire.FieldNumber(&storagev1.ProduceStreamRequest{}, "request")
	fieldRequestPartitions = wire.FieldNumber(&storagev1.ProduceRequest{}, "partitions")
	fieldPartitionBatches  = wire.FieldNumber(&storagev1.ProducePartition{}, "batches")
	fieldPartitionRecords  = wire.FieldNumber(&storagev1.ProducePartition{}, "records")
)

var mergeOpts = proto.UnmarshalOptions{Merge: true}

// decodeProduceStreamRequest parses b into m as proto.Unmarshal would,
// except that batches point into b.
func decodeProduceStreamRequest(b []byte, m *storagev1.ProduceStreamRequest) error {
	rest, err := wire.SplitField(b, fieldStreamRequest, func(v []byte) error {
		if m.Request == nil {
			m.Request = &storagev1.ProduceRequest{}
		}
		return decodeProduceRequest(v, m.Request) // repeated occurrences merge
	}, nil)
	if err == nil {
		err = mergeOpts.Unmarshal(rest, m)
	}
	if err != nil {
		return fmt.Errorf("decoding a produce stream request: %w", err)
	}
	return nil
}

func decodeProduceRequest(b []byte, m *storagev1.ProduceRequest) error {
	rest, err := wire.SplitField(b, fieldRequestPartitions, func(v []byte) error {
		pp := &storagev1.ProducePartition{}
		if err := decodeProducePartition(v, pp); err != nil {
			return err
		}
		m.Partitions = append(m.Partitions, pp)
		return nil
	}, nil)
	if err != nil {
		return err
	}
	return mergeOpts.Unmarshal(rest, m)
}

func decodeProducePartition(b []byte, m *storagev1.ProducePartition) error {
	var batches []byte
	sawBatches, sawRecords := false, false
	rest, err := wire.SplitField(b, fieldPartitionBatches, func(v []byte) error {
		batches, sawBatches = v, true
		return nil
	}, func(n protowire.Number) {
		sawRecords = sawRecords || n == fieldPartitionRecords
	})
	if err != nil {
		return err
	}
	if sawBatches && sawRecords {
		// Both members of the oneof: its last-one-wins rules are the
		// protobuf decoder's to apply (no producer sends this).
		m.Reset()
		return proto.Unmarshal(b, m)
	}
	if err := mergeOpts.Unmarshal(rest, m); err != nil {
		return err
	}
	if sawBatches {
		m.Data = &storagev1.ProducePartition_Batches{Batches: batches}
	}
	return nil
}
