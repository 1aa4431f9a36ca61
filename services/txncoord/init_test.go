package txncoord

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
)

func testCoordinator(fetch fetchBlock) *TransactionCoordinator {
	r := &TransactionCoordinator{cfg: Config{MaxTimeout: time.Minute, IDExpiration: time.Hour}, logger: log.Discard()}
	r.pids = newPIDManager(fetch, r.logger)
	return r
}

// Without a transactional id every call gets a new producer id with epoch
// 0, also when the request names the producer's current id and epoch.
func TestInitProducerIDWithoutTransactionalID(t *testing.T) {
	fc := &fakeController{}
	r := testCoordinator(fc.fetch)
	defer r.pids.close()
	ctx := context.Background()
	seen := map[int64]bool{}
	req := &txnv1.InitProducerIdRequest{ProducerId: -1, ProducerEpoch: -1}
	for range 30 {
		resp, err := r.InitProducerId(ctx, req)
		require.NoError(t, err)
		require.Nil(t, resp.GetError())
		require.Zero(t, resp.GetProducerEpoch())
		require.False(t, seen[resp.GetProducerId()], "id %d handed out twice", resp.GetProducerId())
		seen[resp.GetProducerId()] = true
		req = &txnv1.InitProducerIdRequest{ProducerId: resp.GetProducerId(), ProducerEpoch: 4, TransactionTimeoutMs: 1000}
	}
}

// Bad requests get Kafka's codes and change nothing (no id is used up).
func TestInitProducerIDRejectsBadInput(t *testing.T) {
	fc := &fakeController{}
	r := testCoordinator(fc.fetch)
	defer r.pids.close()
	for _, c := range []struct {
		name string
		req  *txnv1.InitProducerIdRequest
		want errs.Code
	}{
		{"negative timeout", &txnv1.InitProducerIdRequest{TransactionalId: "t", TransactionTimeoutMs: -1, ProducerId: -1, ProducerEpoch: -1}, errs.InvalidTransactionTimeout},
		{"timeout above the maximum", &txnv1.InitProducerIdRequest{TransactionalId: "t", TransactionTimeoutMs: 60001, ProducerId: -1, ProducerEpoch: -1}, errs.InvalidTransactionTimeout},
		{"transactional without timeout", &txnv1.InitProducerIdRequest{TransactionalId: "t", ProducerId: -1, ProducerEpoch: -1}, errs.InvalidTransactionTimeout},
		{"oversized transactional id", &txnv1.InitProducerIdRequest{TransactionalId: strings.Repeat("x", 1025), TransactionTimeoutMs: 1000, ProducerId: -1, ProducerEpoch: -1}, errs.InvalidRequest},
		{"id without epoch", &txnv1.InitProducerIdRequest{ProducerId: 5, ProducerEpoch: -1}, errs.InvalidRequest},
		{"epoch out of range", &txnv1.InitProducerIdRequest{ProducerId: 5, ProducerEpoch: 40000}, errs.InvalidRequest},
		{"negative id", &txnv1.InitProducerIdRequest{ProducerId: -7, ProducerEpoch: -7}, errs.InvalidRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := r.InitProducerId(context.Background(), c.req)
			require.NoError(t, err)
			require.Equal(t, c.want, errs.FromProto(resp.GetError()).Code, "%v", resp.GetError())
			require.Equal(t, int64(-1), resp.GetProducerId())
		})
	}
	require.Zero(t, fc.calls.Load(), "no bad request used up producer ids")

	// An idempotent producer's timeout means nothing (librdkafka sends -1).
	resp, err := r.InitProducerId(context.Background(), &txnv1.InitProducerIdRequest{TransactionTimeoutMs: -1, ProducerId: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	require.Nil(t, resp.GetError())
	require.GreaterOrEqual(t, resp.GetProducerId(), int64(0))
}
