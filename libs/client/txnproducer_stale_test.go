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

// lateAddNode is a coordinator whose AddPartitionsToTxn answers only when
// the test releases it, judged against the epoch current by then (as a real
// coordinator judges a request that arrives after EndTxn bumped the epoch).
type lateAddNode struct {
	fakeTxnNode
	epoch    atomic.Int32
	adds     atomic.Int32
	addBegun chan struct{}
	release  chan struct{}
}

func (f *lateAddNode) GetMetadata(ctx context.Context, req *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	resp, _ := f.fakeTxnNode.GetMetadata(ctx, req)
	resp.Topics = []*metadatav1.TopicInfo{{Name: "t", Partitions: []*commonv1.PartitionState{{Partition: 0, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}}}
	return resp, nil
}

func (f *lateAddNode) AddPartitionsToTxn(_ context.Context, req *txnv1.AddPartitionsToTxnRequest) (*txnv1.AddPartitionsToTxnResponse, error) {
	if f.adds.Add(1) == 1 {
		close(f.addBegun)
		<-f.release
	}
	if req.GetProducerEpoch() < f.epoch.Load() {
		return &txnv1.AddPartitionsToTxnResponse{Error: errs.New(errs.ProducerFenced, "producer epoch %d is fenced by epoch %d",
			req.GetProducerEpoch(), f.epoch.Load()).Proto()}, nil
	}
	return &txnv1.AddPartitionsToTxnResponse{}, nil
}

func (f *lateAddNode) AddOffsetsToTxn(context.Context, *txnv1.AddOffsetsToTxnRequest) (*txnv1.AddOffsetsToTxnResponse, error) {
	return &txnv1.AddOffsetsToTxnResponse{}, nil
}

func (f *lateAddNode) TxnOffsetCommit(_ context.Context, req *groupv1.TxnOffsetCommitRequest) (*groupv1.TxnOffsetCommitResponse, error) {
	return &groupv1.TxnOffsetCommitResponse{}, nil
}

func (f *lateAddNode) EndTxn(context.Context, *txnv1.EndTxnRequest) (*txnv1.EndTxnResponse, error) {
	return &txnv1.EndTxnResponse{ProducerId: 7, ProducerEpoch: f.epoch.Add(1)}, nil
}

// An AddPartitionsToTxn still out when the transaction is aborted is
// answered against the epoch the abort's EndTxn bumped: PRODUCER_FENCED by
// the producer's own new epoch. That answer is about a transaction that no
// longer exists and must not fence the producer (found by sluice verify:
// transactional producers that abort one transaction in five were fenced a
// few times a minute on a one-process cluster).
func TestTransactionalProducerIgnoresAnAddAnsweredAfterItsTransactionEnded(t *testing.T) {
	n := &lateAddNode{fakeTxnNode: fakeTxnNode{id: 1,
		find: func(string) *groupv1.Coordinator { return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)} },
		init: func(int32, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
			return &txnv1.InitProducerIdResponse{ProducerId: 7}, nil
		}}, addBegun: make(chan struct{}), release: make(chan struct{})}
	c := startTxnNodes(t, n)
	p := c.NewProducer(ProducerConfig{TransactionalID: "late"})
	defer func() { _ = p.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, p.InitTransactions(ctx))

	require.NoError(t, p.BeginTransaction())
	// The group's offsets start the transaction at the coordinator, so the
	// abort sends EndTxn.
	meta := ConsumerGroupMetadata{GroupID: "g", GenerationID: -1}
	require.NoError(t, p.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{{Topic: "in", Partition: 0}: 1}, meta))
	require.NoError(t, p.Produce(ctx, &Record{Topic: "t", Partition: 0, Value: []byte("v")}, nil))
	<-n.addBegun
	require.NoError(t, p.AbortTransaction(ctx))
	_, epoch, _ := p.ProducerIdentity()
	require.Equal(t, int16(1), epoch)
	close(n.release)
	// The answer is handled, under the producer's lock, when the partition
	// leaves the set being added.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.txn.adding) == 0
	}, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, p.BeginTransaction(), "the late answer fenced the producer")
	require.NoError(t, p.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{{Topic: "in", Partition: 0}: 2}, meta))
	require.NoError(t, p.CommitTransaction(ctx))
}
