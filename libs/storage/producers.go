package storage

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// producerWindow is how many of a producer's latest batches a partition
// remembers to answer retries: the most a producer may have in flight
// (Kafka's max.in.flight.requests.per.connection with idempotence).
const producerWindow = 5

// producerBatch is what a partition remembers of one of a producer's
// batches: enough to recognise a retry and answer it with the original
// offsets.
type producerBatch struct {
	FirstSeq, LastSeq       int32
	FirstOffset, LastOffset int64
}

// producerEntry is a partition's state of one producer id.
type producerEntry struct {
	Epoch int16
	// Batches are the latest batches of the current epoch, oldest first.
	Batches []producerBatch
	// LastTimestamp is the largest timestamp of the producer's latest
	// batch; producer.id.expiration.ms counts from it (as Kafka does), so
	// every replica expires the same producers.
	LastTimestamp int64
	// CoordinatorEpoch is the transaction coordinator epoch of the latest
	// marker.
	CoordinatorEpoch int32
	// TxnFirstOffset is the first offset of the producer's open transaction
	// on this partition, or -1.
	TxnFirstOffset int64
}

func (e *producerEntry) lastSeq() int32 {
	if len(e.Batches) == 0 {
		return -1
	}
	return e.Batches[len(e.Batches)-1].LastSeq
}

// AbortedTxn is an aborted transaction of a partition: its producer, its
// first offset and the offset of its ABORT marker. read_committed readers
// drop the producer's transactional batches in [FirstOffset, LastOffset].
type AbortedTxn struct {
	ProducerID, FirstOffset, LastOffset int64
}

// producerState is a partition's producer state (KIP-98): per producer id
// its epoch, latest batches and open transaction, and the aborted
// transactions the log still holds. It is a function of the log: every
// replica applies the same batches in the same order, so followers hold the
// leader's state, and a log rebuilds it from a snapshot plus the batches
// after it.
type producerState struct {
	producers map[int64]*producerEntry
	// ongoing maps the producers with an open transaction to its first
	// offset; the smallest bounds the last stable offset.
	ongoing map[int64]int64
	// aborted holds the aborted transactions by marker offset.
	aborted []AbortedTxn
	// end is the offset below which every batch has been applied.
	end int64
}

func newProducerState(end int64) *producerState {
	return &producerState{producers: map[int64]*producerEntry{}, ongoing: map[int64]int64{}, end: end}
}

// nextSeq is the sequence after s; sequences wrap at MaxInt32 to 0.
func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

// checkLeader decides whether a producer batch about to be appended by the
// leader is new, a retry of one of the producer's latest batches (dup is
// set: the caller answers with its offsets and appends nothing), or
// refused. It changes nothing.
func (ps *producerState) checkLeader(tp string, h *record.BatchHeader, batch []byte) (dup *producerBatch, err error) {
	if h.ProducerID < 0 {
		return nil, nil
	}
	e := ps.producers[h.ProducerID]
	if e == nil {
		// A producer this partition does not know (new, or expired) may
		// start at any sequence, as in Kafka.
		return nil, nil
	}
	switch {
	case h.Attributes.Control():
		// A marker carries no sequence; an old epoch means a deposed
		// coordinator's or a fenced producer's transaction.
		if h.ProducerEpoch < e.Epoch {
			return nil, errs.New(errs.InvalidProducerEpoch, "%s: transaction marker for producer %d has epoch %d, older than the partition's %d",
				tp, h.ProducerID, h.ProducerEpoch, e.Epoch)
		}
		if _, coordEpoch, ok := controlRecord(batch); ok && coordEpoch < e.CoordinatorEpoch {
			return nil, errs.New(errs.TransactionCoordinatorFenced, "%s: transaction marker for producer %d comes from coordinator epoch %d, older than the partition's %d",
				tp, h.ProducerID, coordEpoch, e.CoordinatorEpoch)
		}
		return nil, nil
	case h.ProducerEpoch < e.Epoch:
		return nil, errs.New(errs.InvalidProducerEpoch, "%s: producer %d epoch %d is older than the partition's current epoch %d for it: a newer producer with this id took over",
			tp, h.ProducerID, h.ProducerEpoch, e.Epoch)
	case h.ProducerEpoch > e.Epoch || len(e.Batches) == 0:
		if h.BaseSequence != 0 {
			return nil, errs.New(errs.OutOfOrderSequenceNumber, "%s: producer %d epoch %d must start at sequence 0, not %d",
				tp, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	last := h.LastSequence()
	for i := range e.Batches {
		if b := &e.Batches[i]; b.FirstSeq == h.BaseSequence && b.LastSeq == last {
			if plantedNoDedupWindow() {
				return nil, nil // planted bug: append the retry again
			}
			return b, nil
		}
	}
	if want := nextSeq(e.lastSeq()); h.BaseSequence != want {
		return nil, errs.New(errs.OutOfOrderSequenceNumber, "%s: producer %d epoch %d sent sequence %d, expected %d (a batch before it is missing)",
			tp, h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)
	}
	return nil, nil
}

// apply records a batch appended to the log, on the leader, a follower or
// during a replay. batch is the whole batch (read for control records).
func (ps *producerState) apply(h *record.BatchHeader, batch []byte) {
	ps.end = max(ps.end, h.NextOffset())
	if h.ProducerID < 0 {
		return
	}
	e := ps.producers[h.ProducerID]
	if e == nil {
		e = &producerEntry{Epoch: h.ProducerEpoch, TxnFirstOffset: -1}
		ps.producers[h.ProducerID] = e
	}
	if h.ProducerEpoch != e.Epoch {
		e.Epoch, e.Batches = h.ProducerEpoch, nil
	}
	e.LastTimestamp = max(e.LastTimestamp, h.MaxTimestamp)
	if h.Attributes.Control() {
		t, coordEpoch, ok := controlRecord(batch)
		if !ok {
			// Validation refuses such batches from writers; one in the
			// log decides nothing.
			return
		}
		e.CoordinatorEpoch = coordEpoch
		if e.TxnFirstOffset >= 0 {
			if t == record.ControlAbort {
				ps.aborted = append(ps.aborted, AbortedTxn{ProducerID: h.ProducerID, FirstOffset: e.TxnFirstOffset, LastOffset: h.BaseOffset})
			}
			e.TxnFirstOffset = -1
			delete(ps.ongoing, h.ProducerID)
		}
		return
	}
	if h.BaseSequence >= 0 {
		if len(e.Batches) == producerWindow {
			copy(e.Batches, e.Batches[1:])
			e.Batches = e.Batches[:producerWindow-1]
		}
		e.Batches = append(e.Batches, producerBatch{FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), FirstOffset: h.BaseOffset, LastOffset: h.LastOffset()})
	}
	if h.Attributes.Transactional() && e.TxnFirstOffset < 0 {
		e.TxnFirstOffset = h.BaseOffset
		ps.ongoing[h.ProducerID] = h.BaseOffset
	}
}

// controlRecord reads the type and coordinator epoch of a control batch's
// record.
func controlRecord(batch []byte) (record.ControlType, int32, bool) {
	var it record.Iterator
	it.Reset(batch)
	if !it.Next() {
		return 0, 0, false
	}
	r := it.Record()
	t, err := record.ParseControlKey(r.Key)
	if err != nil {
		return 0, 0, false
	}
	var coordEpoch int32
	if len(r.Value) >= 6 {
		coordEpoch = int32(binary.BigEndian.Uint32(r.Value[2:]))
	}
	return t, coordEpoch, true
}

// firstUnstable returns the first offset of the oldest open transaction, or
// false if none is open.
func (ps *producerState) firstUnstable() (int64, bool) {
	first, ok := int64(math.MaxInt64), false
	for _, off := range ps.ongoing {
		first, ok = min(first, off), true
	}
	return first, ok
}

// expire forgets producers silent since before cutoff (Unix ms) with no open
// transaction.
func (ps *producerState) expire(cutoff int64) int {
	n := 0
	for id, e := range ps.producers {
		if e.TxnFirstOffset < 0 && e.LastTimestamp < cutoff {
			delete(ps.producers, id)
			n++
		}
	}
	return n
}

// pruneAborted forgets aborted transactions whose marker is below the log
// start: no reader can meet their batches any more.
func (ps *producerState) pruneAborted(logStart int64) {
	i, _ := slices.BinarySearchFunc(ps.aborted, logStart, func(a AbortedTxn, off int64) int {
		switch {
		case a.LastOffset < off:
			return -1
		case a.LastOffset > off:
			return 1
		}
		return 0
	})
	if i > 0 {
		ps.aborted = slices.Delete(ps.aborted, 0, i)
	}
}

// abortedIn returns the aborted transactions that may have batches in
// [from, to): those whose range overlaps it.
func (ps *producerState) abortedIn(from, to int64) []AbortedTxn {
	var out []AbortedTxn
	// Markers are appended in offset order; a transaction overlapping the
	// range has its marker at or after from.
	i, _ := slices.BinarySearchFunc(ps.aborted, from, func(a AbortedTxn, off int64) int {
		if a.LastOffset < off {
			return -1
		}
		return 1
	})
	for ; i < len(ps.aborted); i++ {
		if a := ps.aborted[i]; a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// Snapshot file layout (big endian), named <end offset>.snapshot:
//
//	magic "SLPS", version uint16 (1), crc32c uint32 over everything after it,
//	end int64, producers uint32, then per producer:
//	  id int64, epoch int16, coordinator epoch int32, last timestamp int64,
//	  txn first offset int64, batches uint8, per batch:
//	    first seq int32, last seq int32, first offset int64, last offset int64
//	aborted uint32, per aborted transaction: producer id, first, last int64.
const (
	snapshotSuffix    = ".snapshot"
	snapshotMagic     = "SLPS"
	snapshotVersion   = 1
	snapshotHeader    = 4 + 2 + 4
	snapshotEntryBase = 8 + 2 + 4 + 8 + 8 + 1
	snapshotBatchSize = 4 + 4 + 8 + 8
	snapshotAbortSize = 8 + 8 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (ps *producerState) encode() []byte {
	n := snapshotHeader + 8 + 4 + 4 + len(ps.aborted)*snapshotAbortSize
	for _, e := range ps.producers {
		n += snapshotEntryBase + len(e.Batches)*snapshotBatchSize
	}
	b := make([]byte, 0, n)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint16(b, snapshotVersion)
	b = append(b, 0, 0, 0, 0) // CRC, below
	b = binary.BigEndian.AppendUint64(b, uint64(ps.end))
	ids := make([]int64, 0, len(ps.producers))
	for id := range ps.producers {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same state always encodes to the same bytes
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		e := ps.producers[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(e.Epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(e.CoordinatorEpoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.LastTimestamp))
		b = binary.BigEndian.AppendUint64(b, uint64(e.TxnFirstOffset))
		b = append(b, byte(len(e.Batches)))
		for _, x := range e.Batches {
			b = binary.BigEndian.AppendUint32(b, uint32(x.FirstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(x.LastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(x.FirstOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(x.LastOffset))
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(ps.aborted)))
	for _, a := range ps.aborted {
		b = binary.BigEndian.AppendUint64(b, uint64(a.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(a.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(a.LastOffset))
	}
	binary.BigEndian.PutUint32(b[6:], crc32.Checksum(b[snapshotHeader:], castagnoli))
	return b
}

var errSnapshot = errors.New("producer state snapshot is damaged")

// decodeProducerState reads a snapshot. Every count is checked against the
// bytes left before anything is allocated, so a damaged file cannot make it
// allocate more than its own size.
func decodeProducerState(b []byte) (*producerState, error) {
	if len(b) < snapshotHeader+8+4 || string(b[:4]) != snapshotMagic || binary.BigEndian.Uint16(b[4:]) != snapshotVersion ||
		binary.BigEndian.Uint32(b[6:]) != crc32.Checksum(b[snapshotHeader:], castagnoli) {
		return nil, errSnapshot
	}
	r := b[snapshotHeader:]
	u64 := func() int64 { v := int64(binary.BigEndian.Uint64(r)); r = r[8:]; return v }
	u32 := func() uint32 { v := binary.BigEndian.Uint32(r); r = r[4:]; return v }
	ps := newProducerState(u64())
	if ps.end < 0 {
		return nil, errSnapshot
	}
	n := u32()
	if uint64(n)*snapshotEntryBase > uint64(len(r)) {
		return nil, errSnapshot
	}
	prev := int64(-1)
	for range n {
		if len(r) < snapshotEntryBase {
			return nil, errSnapshot
		}
		id := u64()
		e := &producerEntry{Epoch: int16(binary.BigEndian.Uint16(r))}
		r = r[2:]
		e.CoordinatorEpoch = int32(u32())
		e.LastTimestamp = u64()
		e.TxnFirstOffset = u64()
		nb := int(r[0])
		r = r[1:]
		if id < 0 || nb > producerWindow || len(r) < nb*snapshotBatchSize || e.TxnFirstOffset < -1 {
			return nil, errSnapshot
		}
		if id <= prev {
			return nil, errSnapshot // ids are written in ascending order
		}
		prev = id
		for range nb {
			x := producerBatch{FirstSeq: int32(u32()), LastSeq: int32(u32())}
			x.FirstOffset, x.LastOffset = u64(), u64()
			e.Batches = append(e.Batches, x)
		}
		ps.producers[id] = e
		if e.TxnFirstOffset >= 0 {
			ps.ongoing[id] = e.TxnFirstOffset
		}
	}
	if len(r) < 4 {
		return nil, errSnapshot
	}
	na := u32()
	if uint64(na)*snapshotAbortSize != uint64(len(r)) {
		return nil, errSnapshot
	}
	if na > 0 {
		ps.aborted = make([]AbortedTxn, na)
	}
	for i := range ps.aborted {
		ps.aborted[i] = AbortedTxn{ProducerID: u64(), FirstOffset: u64(), LastOffset: u64()}
	}
	return ps, nil
}
