package txncoord

import (
	"testing"

	"github.com/stretchr/testify/require"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// A transaction coordinator whose controller session may have expired (cut
// off, paused) answers nothing from the memory of its shards, which another
// process may have taken over; nor does a coordinator of its own from a
// shard it loaded in an earlier broker epoch.
func TestShardServesOnlyWithinTheBrokerSession(t *testing.T) {
	h := newHarness(t)
	resp, err := h.init("a", -1, -1)
	require.NoError(t, err)
	require.Nil(t, resp.GetError())
	epoch, live := int64(4), true
	h.r.session = func() (int64, bool) { return epoch, live }
	h.s.brokerEpoch = 4

	describe := func() *txnv1.TransactionDescription {
		t.Helper()
		out, err := h.r.DescribeTransactions(ctx(t), &txnv1.DescribeTransactionsRequest{TransactionalIds: []string{"a"}})
		require.NoError(t, err)
		require.Len(t, out.GetTransactions(), 1)
		return out.GetTransactions()[0]
	}
	d := describe()
	require.Nil(t, d.GetError())
	require.Equal(t, resp.GetProducerId(), d.GetProducerId())

	live = false
	d = describe()
	require.Equal(t, errs.NotCoordinator, errs.Code(d.GetError().GetCode()), "a node whose session may have expired answered %v", d)
	resp, err = h.init("a", -1, -1)
	require.NoError(t, err)
	require.Equal(t, errs.NotCoordinator, errs.Code(resp.GetError().GetCode()))

	epoch, live = 5, true
	d = describe()
	require.Equal(t, errs.NotCoordinator, errs.Code(d.GetError().GetCode()), "a shard of an earlier broker epoch answered %v", d)

	h.s.brokerEpoch = 5
	d = describe()
	require.Nil(t, d.GetError())
}
