package txncoord

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/kafka"
)

// authzHarness is a harness whose authorizer grants pat a transactional
// producer's ACLs (Write on tx and on topic t, Read on group g), ida an
// idempotent producer's (Write on topic t), and dora Describe on tx.
func authzHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.r.deps.Authz = authztest.New(
		authztest.Allow("User:pat", authz.Write, authz.TransactionalID, "tx"),
		authztest.Allow("User:pat", authz.Write, authz.Topic, "t"),
		authztest.Allow("User:pat", authz.Read, authz.Group, "g"),
		authztest.Allow("User:ida", authz.Write, authz.Topic, "t"),
		authztest.Allow("User:dora", authz.Describe, authz.TransactionalID, "tx"),
	)
	return h
}

// kafkaAs is kafkaCall with the identity User:name.
func (h *harness) kafkaAs(name string, msg kmsg.Request) kmsg.Response {
	h.t.Helper()
	m := kafka.NewMux()
	h.r.registerKafka(m)
	handler, _, _, ok := m.Lookup(msg.Key())
	require.True(h.t, ok)
	c := authztest.Ctx(ctx(h.t), name)
	rep, err := handler(c, &kafka.Request{Key: msg.Key(), Version: msg.GetVersion(), Msg: msg})
	require.NoError(h.t, err)
	if rep.Wait != nil {
		return rep.Wait(c)
	}
	return rep.Msg
}

func initReq(v int16, tid *string) *kmsg.InitProducerIDRequest {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = v, tid, 30000, -1, -1
	return req
}

func TestKafkaTransactionsNeedTransactionalIDACLs(t *testing.T) {
	h := authzHarness(t)
	txnAuth, clusterAuth := kcode(errs.TransactionalIDAuthorizationFailed), kcode(errs.ClusterAuthorizationFailed)

	require.Equal(t, txnAuth, h.kafkaAs("bob", initReq(4, ptr("tx"))).(*kmsg.InitProducerIDResponse).ErrorCode)
	init := h.kafkaAs("pat", initReq(4, ptr("tx"))).(*kmsg.InitProducerIDResponse)
	require.Zero(t, init.ErrorCode)
	// Idempotence: IdempotentWrite on the cluster or Write on a topic.
	require.Equal(t, clusterAuth, h.kafkaAs("bob", initReq(4, nil)).(*kmsg.InitProducerIDResponse).ErrorCode)
	require.Zero(t, h.kafkaAs("ida", initReq(4, nil)).(*kmsg.InitProducerIDResponse).ErrorCode)

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, "tx", init.ProducerID, init.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
	for _, c := range partitionCodes(h.kafkaAs("bob", add).(*kmsg.AddPartitionsToTxnResponse)) {
		require.Equal(t, txnAuth, c)
	}
	for _, c := range partitionCodes(h.kafkaAs("pat", add).(*kmsg.AddPartitionsToTxnResponse)) {
		require.Zero(t, c)
	}
	// v4+ is the brokers' batch form: ClusterAction.
	add4 := kmsg.NewPtrAddPartitionsToTxnRequest()
	add4.Version = 4
	require.Equal(t, clusterAuth, h.kafkaAs("pat", add4).(*kmsg.AddPartitionsToTxnResponse).ErrorCode)

	offs := kmsg.NewPtrAddOffsetsToTxnRequest()
	offs.Version, offs.TransactionalID, offs.ProducerID, offs.ProducerEpoch, offs.Group = 3, "tx", init.ProducerID, init.ProducerEpoch, "other"
	require.Equal(t, kcode(errs.GroupAuthorizationFailed), h.kafkaAs("pat", offs).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
	offs.Group = "g"
	require.Equal(t, txnAuth, h.kafkaAs("bob", offs).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)
	require.Zero(t, h.kafkaAs("pat", offs).(*kmsg.AddOffsetsToTxnResponse).ErrorCode)

	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{"tx"}
	require.Equal(t, txnAuth, h.kafkaAs("bob", dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode)
	require.Zero(t, h.kafkaAs("dora", dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode)
	lt := kmsg.NewPtrListTransactionsRequest()
	require.Empty(t, h.kafkaAs("bob", lt).(*kmsg.ListTransactionsResponse).TransactionStates)
	require.Len(t, h.kafkaAs("dora", lt).(*kmsg.ListTransactionsResponse).TransactionStates, 1)

	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 5, "tx", init.ProducerID, init.ProducerEpoch, true
	require.Equal(t, txnAuth, h.kafkaAs("dora", end).(*kmsg.EndTxnResponse).ErrorCode, "Describe does not imply Write")
	require.Zero(t, h.kafkaAs("pat", end).(*kmsg.EndTxnResponse).ErrorCode)
}

func TestGRPCTransactionsNeedACLs(t *testing.T) {
	h := authzHarness(t)
	pat, bob := authztest.Ctx(ctx(t), "pat"), authztest.Ctx(ctx(t), "bob")
	_, err := h.r.InitProducerId(bob, &txnv1.InitProducerIdRequest{TransactionalId: "tx", TransactionTimeoutMs: 30000, ProducerId: -1, ProducerEpoch: -1})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, errs.CodeOf(err))
	init, err := h.r.InitProducerId(pat, &txnv1.InitProducerIdRequest{TransactionalId: "tx", TransactionTimeoutMs: 30000, ProducerId: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	require.Nil(t, init.GetError())

	// A topic pat may not write fails the call: nothing is added, the
	// other partitions are OPERATION_NOT_ATTEMPTED (Kafka's rule).
	out, err := h.r.AddPartitionsToTxn(pat, &txnv1.AddPartitionsToTxnRequest{TransactionalId: "tx", ProducerId: init.GetProducerId(),
		ProducerEpoch: init.GetProducerEpoch(), Partitions: []*commonv1.TopicPartition{tp("t", 0), tp("u", 0)}})
	require.NoError(t, err)
	require.Equal(t, errs.OperationNotAttempted, out.GetResults()[0].GetError().GetCode())
	require.Equal(t, errs.TopicAuthorizationFailed, out.GetResults()[1].GetError().GetCode())
	require.Empty(t, h.state("tx").partitions)

	// Verification is the storage node's and the group coordinator's.
	verify := &txnv1.AddPartitionsToTxnRequest{TransactionalId: "tx", ProducerId: init.GetProducerId(), ProducerEpoch: init.GetProducerEpoch(),
		Partitions: []*commonv1.TopicPartition{tp("t", 0)}, VerifyOnly: true}
	_, err = h.r.AddPartitionsToTxn(pat, verify)
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err))
	_, err = h.r.AddPartitionsToTxn(authztest.RoleCtx(ctx(t), "storage-node"), verify)
	require.NoError(t, err)

	_, err = h.r.EndTxn(bob, &txnv1.EndTxnRequest{TransactionalId: "tx", ProducerId: init.GetProducerId(), ProducerEpoch: init.GetProducerEpoch()})
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, errs.CodeOf(err))
	_, err = h.r.AbortTransaction(bob, &txnv1.AbortTransactionRequest{TransactionalId: "tx"})
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, errs.CodeOf(err))
	list, err := h.r.ListTransactions(bob, &txnv1.ListTransactionsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetTransactions())
	desc, err := h.r.DescribeTransactions(bob, &txnv1.DescribeTransactionsRequest{TransactionalIds: []string{"tx"}})
	require.NoError(t, err)
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, desc.GetTransactions()[0].GetError().GetCode())
}

// A process without the role authorizes an idempotent InitProducerId
// before passing it on: the coordinator sees that process, not the client.
func TestKafkaElsewhereAuthorizesBeforeForwarding(t *testing.T) {
	h := authzHarness(t)
	m := kafka.NewMux()
	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	RegisterKafkaElsewhere(m, 2, h.r.deps.Metadata, pool, h.r.deps.Authz)
	handler, _, _, _ := m.Lookup(kmsg.InitProducerID.Int16())
	c := authztest.Ctx(context.Background(), "bob")
	rep, err := handler(c, &kafka.Request{Key: 22, Version: 4, Msg: initReq(4, nil)})
	require.NoError(t, err)
	require.NotNil(t, rep.Msg, "answered at once, nothing forwarded")
	require.Equal(t, kcode(errs.ClusterAuthorizationFailed), rep.Msg.(*kmsg.InitProducerIDResponse).ErrorCode)
}
