package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// busyTxnNode is a coordinator that keeps answering AddPartitionsToTxn
// with CONCURRENT_TRANSACTIONS, on a node that leads topic "t".
type busyTxnNode struct {
	fakeTxnNode
	adds atomic.Int32
}

func (f *busyTxnNode) GetMetadata(ctx context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp, _ := f.fakeTxnNode.GetMetadata(ctx, req)
	resp.Topics = []*metadatav1.TopicInfo{{Name: "t", Partitions: []*commonv1.PartitionState{{Partition: 0, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}}}
	return resp, nil
}

func (f *busyTxnNode) AddPartitionsToTxn(context.Context, *txnv1.AddPartitionsToTxnRequest) (*txnv1.AddPartitionsToTxnResponse, error) {
	f.adds.Add(1)
	return &txnv1.AddPartitionsToTxnResponse{Error: errs.New(errs.ConcurrentTransactions, "the previous transaction is still completing").Proto()}, nil
}

// A coordinator that stays busy does not leave a transactional producer's
// records waiting in silence: the producer retries with backoff, and the
// records fail at their delivery timeout naming the coordinator's answer,
// not just the timeout.
func TestTransactionalProducerNamesWhyPartitionsWereNotAdded(t *testing.T) {
	n := &busyTxnNode{fakeTxnNode: fakeTxnNode{id: 1,
		find: func(string) *groupv1.Coordinator { return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)} },
		init: func(int32, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
			return &txnv1.InitProducerIdResponse{ProducerId: 7}, nil
		}}}
	c := startTxnNodes(t, n)
	p := c.NewProducer(ProducerConfig{TransactionalID: "busy", DeliveryTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		RetryBackoffMax: 50 * time.Millisecond, RequestTimeout: 200 * time.Millisecond})
	defer func() { _ = p.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, p.InitTransactions(ctx))
	require.NoError(t, p.BeginTransaction())
	res, err := p.ProduceSync(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")})
	require.Error(t, err)
	require.True(t, errs.Is(res[0].Err, errs.RequestTimedOut), "%v", res[0].Err)
	require.Contains(t, res[0].Err.Error(), "CONCURRENT_TRANSACTIONS", "the timeout names the coordinator's answer")
	require.Greater(t, n.adds.Load(), int32(2), "the producer kept asking")
}
