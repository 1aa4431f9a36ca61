package txncoord

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
)

// RegisterKafkaElsewhere registers the transaction API keys on the mux of a
// process that does not run the transaction-coordinator role. Every Kafka
// broker serves them, and clients judge the cluster by the brokers they
// reach: librdkafka's idempotent producer asks a connected broker that
// lists InitProducerId for its producer id and gives up ("not supported by
// any of the connected brokers") when the one it reached first does not.
// InitProducerId without a transactional id is passed to a live transaction
// coordinator over gRPC, as any Kafka broker answers it; everything naming
// a transactional id is answered NOT_COORDINATOR, so the client finds the
// coordinator (FindCoordinator, which every process answers) and goes
// there; ListTransactions lists nothing, as none is coordinated here.
//
// a, when given, is the process's authorizer: the InitProducerId passed on
// is authorized here, for the Kafka client, since the coordinator sees
// this process as the caller. None given allows every client.
func RegisterKafkaElsewhere(m *kafka.Mux, nodeID int32, md *metadata.Cache, pool *wire.Pool, a ...authz.Authorizer) {
	var az authz.Authorizer = authz.AllowAll{}
	if len(a) > 0 && a[0] != nil {
		az = a[0]
	}
	notCoord := errs.New(errs.NotCoordinator, "node %d does not run the transaction-coordinator role; find the transactional id's coordinator with FindCoordinator", nodeID)
	forward := func(ctx context.Context, req *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
		if req.GetTransactionalId() != "" {
			return &txnv1.InitProducerIdResponse{Error: notCoord.Proto(), ProducerId: -1, ProducerEpoch: -1}, nil
		}
		b := md.Load().AnyOf(string(role.TransactionCoordinator))
		if b == nil {
			return nil, errs.New(errs.CoordinatorNotAvailable, "no live process runs the transaction-coordinator role")
		}
		conn, err := pool.Get(metadata.BrokerAddress(b))
		if err != nil {
			return nil, err
		}
		return txnv1.NewTransactionCoordinatorServiceClient(conn).InitProducerId(ctx, req)
	}
	m.Handle(kmsg.InitProducerID.Int16(), 0, initPIDMaxVersion, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
		return initProducerIDReply(ctx, req, az, md, forward)
	})
	nc := kafka.ErrorCode(notCoord)
	// Up to v3, the clients' versions: v4+ are sent by brokers to the
	// coordinator they looked up.
	m.Handle(kmsg.AddPartitionsToTxn.Int16(), 0, min(3, addPartitionsMaxVersion), func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		in, ok := req.Msg.(*kmsg.AddPartitionsToTxnRequest)
		if !ok {
			return kafka.Reply{}, badMsg(req)
		}
		out := kmsg.NewPtrAddPartitionsToTxnResponse()
		for _, t := range in.Topics {
			ot := kmsg.NewAddPartitionsToTxnResponseTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				op.Partition, op.ErrorCode = p, nc
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		return kafka.Now(out), nil
	})
	m.Handle(kmsg.AddOffsetsToTxn.Int16(), 0, addOffsetsMaxVersion, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		out := kmsg.NewPtrAddOffsetsToTxnResponse()
		out.ErrorCode = nc
		return kafka.Now(out), nil
	})
	m.Handle(kmsg.EndTxn.Int16(), 0, endTxnMaxVersion, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		out := kmsg.NewPtrEndTxnResponse()
		out.ErrorCode, out.ProducerID, out.ProducerEpoch = nc, -1, -1
		return kafka.Now(out), nil
	})
	m.Handle(kmsg.DescribeTransactions.Int16(), 0, describeTxnsMaxVersion, func(_ context.Context, req *kafka.Request) (kafka.Reply, error) {
		in, ok := req.Msg.(*kmsg.DescribeTransactionsRequest)
		if !ok {
			return kafka.Reply{}, badMsg(req)
		}
		out := kmsg.NewPtrDescribeTransactionsResponse()
		for _, id := range in.TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode, st.ProducerID, st.ProducerEpoch = id, nc, -1, -1
			out.TransactionStates = append(out.TransactionStates, st)
		}
		return kafka.Now(out), nil
	})
	m.Handle(kmsg.ListTransactions.Int16(), 0, listTxnsMaxVersion, func(context.Context, *kafka.Request) (kafka.Reply, error) {
		return kafka.Now(kmsg.NewPtrListTransactionsResponse()), nil
	})
}
