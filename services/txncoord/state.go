package txncoord

import (
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// txnMeta is the state of one transactional id, as persisted in
// __transaction_state (records.go).
//
// producerID and epoch are what the producer uses now (after an ending
// transaction, the bumped ones: KIP-890 bumps the epoch at the end of every
// transaction). lastProducerID and lastEpoch are the transaction that is
// ending (Prepare*: its markers carry them) or that ended last (Complete*:
// a retried EndTxn carrying them is answered with the outcome); -1 when
// there is none.
type txnMeta struct {
	tid            string
	producerID     int64
	epoch          int16
	lastProducerID int64
	lastEpoch      int16
	timeoutMs      int32
	state          kmsg.TransactionState
	partitions     map[topicPartition]bool
	startMs        int64 // when the open transaction started, or -1
	lastUpdateMs   int64
	// fenced says the last transaction was ended by fencing its producer,
	// not by its EndTxn (records.go fencedTag).
	fenced bool
}

func (m *txnMeta) clone() *txnMeta {
	c := *m
	c.partitions = maps.Clone(m.partitions)
	if c.partitions == nil {
		c.partitions = map[topicPartition]bool{}
	}
	return &c
}

// preparing reports whether the transaction's outcome is decided and its
// markers are being written.
func (m *txnMeta) preparing() bool {
	return m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStatePrepareAbort
}

// checkProducer checks that a request's producer id and epoch are the
// transactional id's current ones: an older epoch is a fenced producer (a
// newer one took over, or the transaction ended and bumped it).
func (m *txnMeta) checkProducer(pid int64, epoch int32) *errs.Error {
	switch {
	case pid != m.producerID:
		return errs.New(errs.InvalidProducerIDMapping, "transactional id %q has producer id %d, not %d", m.tid, m.producerID, pid)
	case epoch < int32(m.epoch):
		return errs.New(errs.ProducerFenced, "transactional id %q: producer epoch %d is fenced by epoch %d", m.tid, epoch, m.epoch)
	case epoch > int32(m.epoch):
		return errs.New(errs.InvalidProducerEpoch, "transactional id %q: producer epoch %d is newer than the current %d", m.tid, epoch, m.epoch)
	}
	return nil
}

// bump returns the producer id and epoch that follow pid/epoch: the next
// epoch, or, when the epoch is exhausted, newPID with epoch 0.
func bump(pid int64, epoch int16, newPID func() int64) (int64, int16) {
	if epoch < maxEpoch {
		return pid, epoch + 1
	}
	return newPID(), 0
}

// needsNewPID reports whether bumping epoch needs a new producer id.
func needsNewPID(epoch int16) bool { return epoch >= maxEpoch }

// end returns the state that ends m's open transaction: Prepare* with the
// ended transaction in lastProducerID/lastEpoch and the producer moved on
// to the bumped id/epoch, which fences anything still sent with the old
// epoch. Without bumpEpoch the producer keeps its id and epoch (the
// protocol before KIP-890 part 2, for clients that cannot learn a new
// epoch from EndTxn): then lastProducerID/lastEpoch equal the current ones.
func (m *txnMeta) end(commit, bumpEpoch bool, now time.Time, newPID func() int64) *txnMeta {
	n := m.clone()
	n.fenced = false
	n.lastProducerID, n.lastEpoch = m.producerID, m.epoch
	if bumpEpoch {
		n.producerID, n.epoch = bump(m.producerID, m.epoch, newPID)
	}
	if plantedNoEpochBump() {
		n.producerID, n.epoch = m.producerID, m.epoch
	}
	n.state = kmsg.TransactionStatePrepareAbort
	if commit {
		n.state = kmsg.TransactionStatePrepareCommit
	}
	n.lastUpdateMs = now.UnixMilli()
	return n
}

// fence returns the state that aborts m's open transaction to fence its
// producer: as end, and marked so the fenced producer's late EndTxn is
// answered PRODUCER_FENCED.
func (m *txnMeta) fence(now time.Time, newPID func() int64) *txnMeta {
	n := m.end(false, true, now, newPID)
	n.fenced = true
	return n
}

// complete returns the state after every marker of a Prepare* state is
// written.
func (m *txnMeta) complete(now time.Time) *txnMeta {
	n := m.clone()
	n.state = kmsg.TransactionStateCompleteAbort
	if m.state == kmsg.TransactionStatePrepareCommit {
		n.state = kmsg.TransactionStateCompleteCommit
	}
	n.partitions = map[topicPartition]bool{}
	n.startMs = -1
	n.lastUpdateMs = now.UnixMilli()
	return n
}

// stateProto maps Kafka's transaction state (kmsg, 0..7) onto the API's.
func stateProto(s kmsg.TransactionState) txnv1.TransactionState {
	if s < 0 || s > kmsg.TransactionStatePrepareEpochFence {
		return txnv1.TransactionState_TRANSACTION_STATE_UNSPECIFIED
	}
	return txnv1.TransactionState(s + 1)
}
