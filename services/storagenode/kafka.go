package storagenode

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Versions of the Kafka APIs the storage node serves. Each range is the
// versions served completely: clients use the highest common version, so a
// version whose fields are not all honoured is not advertised.
const (
	// Produce v3 is the first with RecordBatch (magic 2); v10 and v11 add
	// the current leader and node endpoints of KIP-951 (filled). v12 and
	// v13 (KIP-890's server-side epoch bump, topic ids) are not served.
	kafkaProduceMin, kafkaProduceMax = 3, 11
	// Fetch v4 is the first with isolation levels; v13 addresses topics by
	// id; v16 adds the node endpoints of KIP-951. v17+ (replica
	// directories) are for brokers.
	kafkaFetchMin, kafkaFetchMax = 4, 16
	// ListOffsets v7 adds the max-timestamp spec (-3), v8 the earliest
	// local offset (-4); v9+ name tiered-storage offsets.
	kafkaListOffsetsMin, kafkaListOffsetsMax = 1, 8
	// OffsetForLeaderEpoch v2 adds the caller's current leader epoch.
	kafkaOffsetForLeaderEpochMin, kafkaOffsetForLeaderEpochMax = 2, 4
	kafkaDeleteRecordsMin, kafkaDeleteRecordsMax               = 0, 2
	kafkaDescribeProducersMin, kafkaDescribeProducersMax       = 0, 0
	// DescribeLogDirs v4 adds total and usable bytes; v5 (cordoned log
	// directories) is not served.
	kafkaDescribeLogDirsMin, kafkaDescribeLogDirsMax = 0, 4
)

// kafkaFetchSessionIDNotFound is Kafka's FETCH_SESSION_ID_NOT_FOUND: it
// exists only in the Kafka protocol (fetch sessions), so the catalog has no
// entry for it.
const kafkaFetchSessionIDNotFound int16 = 70

// registerKafka registers the storage node's Kafka APIs on the process's
// mux: each converts the Kafka request to the gRPC one, runs the same
// validation and the same code, and converts the answer back.
func (r *StorageNode) registerKafka(m *kafka.Mux) {
	m.Handle(int16(kmsg.Produce), kafkaProduceMin, kafkaProduceMax, r.kafkaProduce)
	m.Handle(int16(kmsg.Fetch), kafkaFetchMin, kafkaFetchMax, r.kafkaFetch)
	m.Handle(int16(kmsg.ListOffsets), kafkaListOffsetsMin, kafkaListOffsetsMax, r.kafkaListOffsets)
	m.Handle(int16(kmsg.OffsetForLeaderEpoch), kafkaOffsetForLeaderEpochMin, kafkaOffsetForLeaderEpochMax, r.kafkaOffsetForLeaderEpoch)
	m.Handle(int16(kmsg.DeleteRecords), kafkaDeleteRecordsMin, kafkaDeleteRecordsMax, r.kafkaDeleteRecords)
	m.Handle(int16(kmsg.DescribeProducers), kafkaDescribeProducersMin, kafkaDescribeProducersMax, r.kafkaDescribeProducers)
	m.Handle(int16(kmsg.DescribeLogDirs), kafkaDescribeLogDirsMin, kafkaDescribeLogDirsMax, r.kafkaDescribeLogDirs)
}

// itemCode is the Kafka error code and message of a per-item error of the
// gRPC answers (nil: success).
func itemCode(e *edpb.Error) (int16, *string) {
	if e == nil || e.GetCode() == errs.None {
		return 0, nil
	}
	msg := e.GetMessage()
	return kafka.ErrorCode(errs.FromProto(e)), &msg
}

// leaderOf returns the current leader a NOT_LEADER_OR_FOLLOWER or
// FENCED_LEADER_EPOCH answer names (KIP-951), so a client can move without
// a metadata round trip.
func leaderOf(e *edpb.Error) (id, epoch int32, ok bool) {
	switch e.GetCode() {
	case errs.NotLeaderOrFollower, errs.FencedLeaderEpoch:
	default:
		return -1, -1, false
	}
	h := e.GetLeader()
	if h == nil || h.GetLeaderId() < 0 {
		return -1, -1, false
	}
	return h.GetLeaderId(), h.GetLeaderEpoch(), true
}

// kafkaNode is a node's Kafka endpoint, for the node endpoints of
// KIP-951 answers.
type kafkaNode struct {
	id   int32
	host string
	port int32
	rack *string
}

// kafkaNodeOf returns the Kafka endpoint of a node, if it has one: a
// leader without a Kafka listener is not named (the client would have
// nowhere to go).
func kafkaNodeOf(img *metadata.Image, id int32) (kafkaNode, bool) {
	b, ok := img.Brokers[id]
	if !ok {
		return kafkaNode{}, false
	}
	e := metadata.KafkaEndpoint(b)
	if e == nil {
		return kafkaNode{}, false
	}
	n := kafkaNode{id: id, host: e.GetHost(), port: e.GetPort()}
	if rk := b.GetRack(); rk != "" {
		n.rack = &rk
	}
	return n, true
}
