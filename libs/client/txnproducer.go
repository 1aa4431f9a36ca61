package client

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// The transactional producer (KIP-98 with KIP-890's hardening).
//
// A producer with a TransactionalID writes records in transactions:
// InitTransactions once (it fences any earlier producer with the same id and
// aborts its open transaction), then BeginTransaction, Produce,
// SendOffsetsToTransaction (read-process-write), and CommitTransaction or
// AbortTransaction, over and over. Records of a transaction become visible
// to read_committed consumers all at once on commit, and never if it aborts.
//
// Before a partition's first batch of a transaction goes out, the producer
// adds the partition to the transaction at the coordinator
// (AddPartitionsToTxn); the leader checks that with the coordinator before
// it appends. Every transaction ends with a new producer epoch returned by
// EndTxn, so nothing late from one transaction can land in the next.
//
// Errors: a batch that fails for good makes the transaction abortable:
// Produce and CommitTransaction return that error until AbortTransaction.
// PRODUCER_FENCED or INVALID_PRODUCER_EPOCH (another producer took over the
// transactional id) is fatal: every call fails from then on; close the
// producer.

// txnPhase is where a transactional producer is.
type txnPhase int

const (
	txnUninitialized txnPhase = iota // InitTransactions not called yet
	txnReady                         // no transaction open
	txnInTransaction                 // between BeginTransaction and its end
	txnCompleting                    // CommitTransaction or AbortTransaction running
	txnFatal                         // fenced or otherwise unusable
)

// txnState is a transactional producer's state, guarded by Producer.mu.
type txnState struct {
	id      string
	timeout time.Duration
	phase   txnPhase
	// abortable is the error that forces the open transaction to abort;
	// fatal the one that ended the producer.
	abortable, fatal error
	// added are the partitions of the open transaction confirmed by the
	// coordinator; adding those being added.
	added, adding map[tpKey]bool
	addBackoff    time.Duration
	addRetryAt    time.Time
	// aborting: AbortTransaction runs; nothing more is sent.
	aborting bool
	// started: the coordinator knows of the open transaction (a partition
	// or a group's offsets were added). A transaction that never started
	// ends without EndTxn, as in Kafka.
	started bool
}

// defaultTransactionTimeout is Kafka's transaction.timeout.ms default.
const defaultTransactionTimeout = time.Minute

func newTxnState(cfg *ProducerConfig) *txnState {
	t := cfg.TransactionTimeout
	if t == 0 {
		t = defaultTransactionTimeout
	}
	return &txnState{id: cfg.TransactionalID, timeout: t, added: map[tpKey]bool{}, adding: map[tpKey]bool{}}
}

// errNotTransactional is returned by transaction calls of a producer
// without a transactional id.
var errNotTransactional = errs.New(errs.InvalidConfig, "the producer has no TransactionalID; transactions need one")

// txnUsable returns the error that keeps a transactional producer from
// producing now, or nil. p.mu must be held.
func (p *Producer) txnUsableLocked() error {
	t := p.txn
	switch {
	case t.fatal != nil:
		return t.fatal
	case t.abortable != nil:
		return fmt.Errorf("the transaction must be aborted: %w", t.abortable)
	case t.phase != txnInTransaction:
		return errs.New(errs.InvalidTxnState, "transactional producer %q has no open transaction: call BeginTransaction first", t.id)
	}
	return nil
}

// txnMaySendLocked says whether a partition's batch may be sent in the open
// transaction: the partition must be in it (it starts adding it if not), and
// after a failed batch nothing more goes until the transaction is aborted.
func (p *Producer) txnMaySendLocked(pp *prodPartition) bool {
	t := p.txn
	if t.fatal != nil || t.aborting || pp.idem.reset && p.id.gen <= pp.idem.gen {
		return false
	}
	if t.added[pp.tp] {
		return true
	}
	if !t.adding[pp.tp] && t.phase != txnUninitialized {
		t.adding[pp.tp] = true
		if len(t.adding) == 1 {
			p.bg.Go(p.addPartitions)
		}
	}
	return false
}

// addPartitions adds the partitions waiting in txn.adding to the open
// transaction, retrying while the coordinator is busy.
func (p *Producer) addPartitions() {
	for {
		p.mu.Lock()
		t := p.txn
		if t.aborting || t.fatal != nil {
			// Nothing more goes into this transaction.
			clear(t.adding)
		}
		if len(t.adding) == 0 || p.closed {
			p.mu.Unlock()
			return
		}
		if wait := time.Until(t.addRetryAt); wait > 0 {
			p.mu.Unlock()
			select {
			case <-time.After(wait):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		var tps []TopicPartition
		var keys []tpKey
		for tp := range t.adding {
			tps = append(tps, TopicPartition{Topic: tp.topic, Partition: tp.partition})
			keys = append(keys, tp)
		}
		id := p.id
		p.mu.Unlock()

		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RequestTimeout)
		err := p.c.AddPartitionsToTxn(ctx, t.id, id.pid, id.epoch, tps)
		cancel()

		p.mu.Lock()
		if p.id != id {
			// The transaction this request was for ended while it was
			// out (an abort does not wait for partitions being added),
			// and its EndTxn gave a new epoch: whatever the coordinator
			// answered, PRODUCER_FENCED by that very epoch included, is
			// about a transaction that is over. A batch of the next
			// transaction asks for its partition again.
			for _, k := range keys {
				delete(t.adding, k)
			}
			p.mu.Unlock()
			p.kick()
			continue
		}
		if err == nil {
			for _, k := range keys {
				t.added[k] = true
				delete(t.adding, k)
			}
			t.addBackoff, t.started = 0, true
		} else if txnRetriable(err) && p.ctx.Err() == nil {
			if t.addBackoff == 0 {
				if l := p.c.cfg.Logger; l != nil {
					l.Warn("transactional producer: adding partitions to the transaction failed; retrying",
						slog.String("transactional_id", t.id), slog.String("error", err.Error()))
				}
			}
			t.addBackoff = min(max(2*t.addBackoff, p.cfg.RetryBackoff), p.cfg.RetryBackoffMax)
			t.addRetryAt = time.Now().Add(t.addBackoff)
			// Batches that time out waiting name the cause.
			for _, k := range keys {
				if pp := p.parts[k]; pp != nil {
					for _, b := range pp.ready {
						b.lastErr = err
					}
				}
			}
		} else {
			// The batches of these partitions cannot go in this
			// transaction; they fail, and the transaction must abort.
			p.txnFailedLocked(fmt.Errorf("adding partitions to transaction %q: %w", t.id, err))
			for _, k := range keys {
				delete(t.adding, k)
				if pp := p.parts[k]; pp != nil {
					p.failUnsentLocked(pp, err)
				}
			}
		}
		p.mu.Unlock()
		p.kick()
	}
}

// txnFailedLocked records a failure in the open transaction: fencing is
// fatal, anything else makes the transaction abortable.
func (p *Producer) txnFailedLocked(err error) {
	t := p.txn
	switch errs.CodeOf(err) {
	case errs.ProducerFenced, errs.InvalidProducerEpoch:
		if t.fatal == nil {
			t.fatal = fmt.Errorf("transactional producer %q is fenced; close it: %w", t.id, err)
			t.phase = txnFatal
		}
	default:
		if t.abortable == nil {
			t.abortable = err
		}
	}
}

// failUnsentLocked fails every batch of a partition that has not been sent,
// and its open records.
func (p *Producer) failUnsentLocked(pp *prodPartition, err error) {
	p.sealLocked(pp)
	for len(pp.ready) > 0 {
		b := p.takeReadyLocked(pp, 0)
		if b.seq >= 0 {
			// Sent before and waiting to go again: its outcome is
			// unknown, but the transaction aborts, which settles it.
			b.seq = -1
		}
		p.finishLocked(b, -1, err)
	}
}

// InitTransactions registers the producer's transactional id with its
// coordinator and gets the producer id and epoch, fencing any earlier
// producer with the same id and aborting its open transaction. Call it
// once, before the first transaction; after an abortable error it may be
// called again to start over with a new epoch.
func (p *Producer) InitTransactions(ctx context.Context) error {
	if p.cfgErr != nil {
		return p.cfgErr
	}
	if p.txn == nil {
		return errNotTransactional
	}
	p.mu.Lock()
	t := p.txn
	if t.fatal != nil {
		p.mu.Unlock()
		return t.fatal
	}
	if t.phase == txnInTransaction || t.phase == txnCompleting {
		p.mu.Unlock()
		return errs.New(errs.InvalidTxnState, "transactional producer %q has a transaction open; commit or abort it first", t.id)
	}
	cur := p.id
	p.mu.Unlock()
	pid, epoch := int64(-1), int16(-1)
	if cur.gen > 0 {
		pid, epoch = cur.pid, cur.epoch
	}
	newPID, newEpoch, err := p.c.InitProducerID(ctx, t.id, t.timeout, pid, epoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if errs.CodeOf(err) == errs.ProducerFenced {
			p.txnFailedLocked(err)
		}
		return err
	}
	p.newIdentityLocked(newPID, newEpoch)
	t.phase, t.abortable = txnReady, nil
	return nil
}

// newIdentityLocked moves every partition to a new producer id and epoch,
// from sequence 0. Every batch of the old identity is settled.
func (p *Producer) newIdentityLocked(pid int64, epoch int16) {
	if p.id.gen > 0 && pid == p.id.pid && epoch == p.id.epoch {
		// A coordinator that does not bump the epoch per transaction
		// (before KIP-890): sequences go on.
		return
	}
	p.id = prodID{pid: pid, epoch: epoch, gen: p.id.gen + 1}
	for _, pp := range p.parts {
		pp.idem.reset = true
	}
	if l := p.c.cfg.Logger; l != nil {
		l.Debug("transactional producer: producer epoch", slog.String("transactional_id", p.txn.id), slog.Int64("producer_id", pid), slog.Int("producer_epoch", int(epoch)))
	}
}

// BeginTransaction opens a transaction: records produced from now on
// belong to it until CommitTransaction or AbortTransaction.
func (p *Producer) BeginTransaction() error {
	if p.txn == nil {
		return errNotTransactional
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.txn
	switch {
	case t.fatal != nil:
		return t.fatal
	case t.phase == txnUninitialized:
		return errs.New(errs.InvalidTxnState, "transactional producer %q: call InitTransactions first", t.id)
	case t.phase != txnReady:
		return errs.New(errs.InvalidTxnState, "transactional producer %q already has a transaction open", t.id)
	}
	t.phase, t.started = txnInTransaction, false
	clear(t.added)
	return nil
}

// CommitTransaction sends every record of the open transaction, waits for
// all of them, and commits the transaction. If any record failed, nothing
// is committed: it returns the failure and the transaction must be
// aborted. A CommitTransaction that fails for another reason (a timeout)
// may be called again; the coordinator answers a repeated commit of the
// same transaction with success.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, true)
}

// AbortTransaction aborts the open transaction: records not sent yet fail
// with an error saying so, records sent are dropped by read_committed
// readers.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, false)
}

var errTxnAborted = errs.New(errs.InvalidTxnState, "the transaction was aborted before this record was sent")

func (p *Producer) endTransaction(ctx context.Context, commit bool) error {
	if p.txn == nil {
		return errNotTransactional
	}
	p.mu.Lock()
	t := p.txn
	if t.fatal != nil {
		p.mu.Unlock()
		return t.fatal
	}
	if t.phase != txnInTransaction && t.phase != txnCompleting {
		p.mu.Unlock()
		return errs.New(errs.InvalidTxnState, "transactional producer %q has no open transaction", t.id)
	}
	if commit && t.abortable != nil {
		err := t.abortable
		p.mu.Unlock()
		return fmt.Errorf("the transaction cannot commit and must be aborted: %w", err)
	}
	t.phase, t.aborting = txnCompleting, !commit
	// Every record must have its outcome before the coordinator writes
	// markers: a batch still in flight could otherwise land after them.
	// Committing sends everything; aborting sends nothing more and waits
	// for the answers of what is in flight.
	for {
		for _, pp := range p.parts {
			if commit {
				p.sealLocked(pp)
			} else {
				p.failUnsentLocked(pp, errTxnAborted)
			}
		}
		p.kick()
		if !p.pendingLocked() && (len(t.adding) == 0 || !commit) || commit && t.abortable != nil {
			break
		}
		if ctx.Err() != nil {
			t.phase, t.aborting = txnInTransaction, false
			p.mu.Unlock()
			return ctx.Err()
		}
		p.waitCond(ctx, p.idle)
	}
	if commit && t.abortable != nil {
		err := t.abortable
		t.phase = txnInTransaction
		p.mu.Unlock()
		return fmt.Errorf("a record of the transaction failed; abort it: %w", err)
	}
	id, started := p.id, t.started
	p.mu.Unlock()
	if err := p.waitCallbacks(ctx); err != nil {
		p.mu.Lock()
		t.phase, t.aborting = txnInTransaction, false
		p.mu.Unlock()
		return err
	}
	if !started {
		// Nothing reached a partition or the coordinator: nothing to end.
		p.mu.Lock()
		t.phase, t.abortable, t.aborting = txnReady, nil, false
		p.mu.Unlock()
		return nil
	}

	newPID, newEpoch, err := p.c.EndTxn(ctx, t.id, id.pid, id.epoch, commit)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		switch errs.CodeOf(err) {
		case errs.ProducerFenced, errs.InvalidProducerEpoch:
			p.txnFailedLocked(err)
		}
		// The outcome is unknown (or refused): the same call may be made
		// again, and nothing new is sent meanwhile.
		return err
	}
	p.newIdentityLocked(newPID, newEpoch)
	t.phase, t.abortable, t.aborting, t.started = txnReady, nil, false, false
	clear(t.added)
	return nil
}

// ConsumerGroupMetadata identifies the consumer whose positions a
// transaction commits (KIP-447): the coordinator fences the commit if the
// member is no longer current.
type ConsumerGroupMetadata struct {
	GroupID         string
	GenerationID    int32 // generation (classic) or member epoch (consumer protocol); -1 unknown
	MemberID        string
	GroupInstanceID string
}

// GroupMetadata returns what a transaction needs to commit the member's
// positions (KIP-447): the group, the member, and its generation (classic)
// or member epoch (consumer protocol) now.
func (g *GroupConsumer) GroupMetadata() ConsumerGroupMetadata {
	memberID, instanceID, _ := g.member.fence()
	return ConsumerGroupMetadata{GroupID: g.cfg.GroupID, GenerationID: g.Generation(), MemberID: memberID, GroupInstanceID: instanceID}
}

// SendOffsetsToTransaction commits a consumer group's positions as part of
// the open transaction (read-process-write): they become the group's
// committed offsets when the transaction commits, and are dropped if it
// aborts. meta comes from the group consumer that read the records
// (GroupConsumer.GroupMetadata); the group coordinator refuses the commit
// if that member is no longer current (KIP-447), and the transaction must
// then abort.
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, offsets map[TopicPartition]int64, meta ConsumerGroupMetadata) error {
	if p.txn == nil {
		return errNotTransactional
	}
	if meta.GroupID == "" {
		return errs.Invalid(errs.InvalidRequest, "GroupID", "is required")
	}
	p.mu.Lock()
	t := p.txn
	if err := p.txnUsableLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	id := p.id
	p.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	if err := p.c.AddOffsetsToTxn(ctx, t.id, id.pid, id.epoch, meta.GroupID); err != nil {
		p.mu.Lock()
		p.txnFailedLocked(err)
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	t.started = true
	p.mu.Unlock()
	err := p.c.TxnOffsetCommit(ctx, TxnOffsetCommitRequest{TransactionalID: t.id, ProducerID: id.pid, ProducerEpoch: id.epoch,
		GroupID: meta.GroupID, GenerationID: meta.GenerationID, MemberID: meta.MemberID, GroupInstanceID: meta.GroupInstanceID, Offsets: offsets})
	if err != nil {
		p.mu.Lock()
		p.txnFailedLocked(err)
		p.mu.Unlock()
	}
	return err
}
