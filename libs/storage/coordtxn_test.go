package storage

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// The group coordinator writes offsets committed in a transaction as
// transactional batches of the producer with no sequence (as Kafka's does):
// each is accepted, however many, opens the producer's transaction on the
// partition until a marker ends it, and only an older epoch is refused.
// A client's transactional batch without a sequence is not let through.
func TestCoordinatorTransactionalBatchesWithoutSequence(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	app := func(b []byte) (AppendResult, error) { return l.AppendAsLeader(b, 0, record.FromCoordinator) }
	first, err := app(idemBatch(t, 9, 1, -1, 2, true))
	require.NoError(t, err)
	_, err = app(idemBatch(t, 9, 1, -1, 1, true))
	require.NoError(t, err, "a second batch of the same transaction")
	off, open := l.FirstUnstableOffset()
	require.True(t, open)
	require.Equal(t, first.FirstOffset, off)

	_, err = app(idemBatch(t, 9, 0, -1, 1, true))
	requireCode(t, err, errs.InvalidProducerEpoch)

	_, err = app(record.AppendEndTxnMarker(nil, 9, 1, record.ControlCommit, 0, 0))
	require.NoError(t, err)
	_, open = l.FirstUnstableOffset()
	require.False(t, open)
	_, err = app(idemBatch(t, 9, 2, -1, 1, true))
	require.NoError(t, err, "the producer's next transaction, at the bumped epoch")

	_, err = l.AppendAsLeader(idemBatch(t, 10, 0, -1, 1, true), 0, record.FromClient)
	require.Error(t, err, "a client's transactional batch is still checked")
}
