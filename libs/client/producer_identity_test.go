package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
)

// ProducerIdentity reports nothing before InitTransactions and then the
// producer id and epoch the coordinator gave.
func TestProducerIdentityAfterInit(t *testing.T) {
	n := &fakeTxnNode{id: 1,
		find: func(string) *groupv1.Coordinator { return &groupv1.Coordinator{NodeId: 1, Address: fakeAddr(1)} },
		init: func(int32, *txnv1.InitProducerIdRequest) (*txnv1.InitProducerIdResponse, error) {
			return &txnv1.InitProducerIdResponse{ProducerId: 42, ProducerEpoch: 3}, nil
		}}
	c := startTxnNodes(t, n)
	p := c.NewProducer(ProducerConfig{TransactionalID: "who"})
	defer func() { _ = p.Close(context.Background()) }()
	pid, epoch, ok := p.ProducerIdentity()
	require.False(t, ok)
	require.Equal(t, int64(-1), pid)
	require.Equal(t, int16(-1), epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.InitTransactions(ctx))
	pid, epoch, ok = p.ProducerIdentity()
	require.True(t, ok)
	require.Equal(t, int64(42), pid)
	require.Equal(t, int16(3), epoch)
}
