package client

import (
	"slices"
	"time"

	"github.com/sluice-io/sluice/libs/client/record"
)

// Splitting a batch the leader refused as too large.
//
// A batch can pass the topic's max.message.bytes although each of its
// records fits: it grew towards MaxBatchBytes while its partition could not
// send, or BatchBytes is above the limit. The leader refuses it with
// MESSAGE_TOO_LARGE and appends nothing. Rather than fail every record, the
// producer (as Kafka's does) cuts the batch into pieces of at most
// BatchBytes (halves once it is no larger), sends them in place of the
// batch, before the rest of the partition's queue, and splits again a piece
// that is refused too. A single record that is refused fails with the
// leader's error. The partition then seals its batches at the pieces' size
// (splitBytes), so growth does not make the next batches too large again.
//
// With idempotence the refused batch keeps its place: its sequence range,
// unused at the leader, is divided among the pieces, which become resends
// in the partition's outstanding batches (producer_idem.go). Batches sent
// after it are refused as out of order while a piece is outstanding and go
// again after the pieces, so nothing is written twice or out of order. A
// batch of an identity given up meanwhile loses its sequence and its pieces
// are sequenced again under the new one, as a refused batch is.

// splitTooLargeLocked cuts a batch the leader refused as too large into
// smaller ones queued in its place, and returns false, changing nothing,
// when it holds one record or cannot be split (the caller fails it).
func (p *Producer) splitTooLargeLocked(pp *prodPartition, b *prodBatch) bool {
	if len(b.recs) < 2 || p.closed || time.Since(b.created) >= p.cfg.DeliveryTimeout {
		return false
	}
	target := min(p.cfg.BatchBytes, len(b.data)/2)
	var decoded []record.Record
	var it record.Iterator
	it.Reset(b.data)
	for it.Next() {
		r := *it.Record()
		// The iterator reuses its buffers: keep copies.
		r.Key, r.Value = slices.Clone(r.Key), slices.Clone(r.Value)
		r.Headers = slices.Clone(r.Headers)
		decoded = append(decoded, r)
	}
	if it.Err() != nil || len(decoded) != len(b.recs) {
		return false // cannot happen: the producer built the batch
	}
	st := &pp.idem
	keepSeq := p.idem && b.seq >= 0 && b.idGen == st.gen && !st.reset
	var pieces []*prodBatch
	bytesLeft := b.bytes
	for start := 0; start < len(decoded); {
		bld := p.builders.Get().(*record.Builder)
		bld.SetMaxBytes(target)
		end := start
		for end < len(decoded) && bld.Append(&decoded[end]) == nil {
			end++
		}
		bld.SetMaxBytes(0)
		bld.SetTransactional(p.txn != nil)
		piece := &prodBatch{tp: b.tp, recs: b.recs[start:end:end], traced: b.traced, created: b.created, builder: bld,
			order: b.order + uint64(start), seq: -1, attempts: b.attempts, lastErr: b.lastErr}
		build := bld.Build
		switch {
		case keepSeq:
			piece.seq = addSeq(b.seq, start)
			piece.idGen, piece.seqIdx = b.idGen, b.seqIdx
			bld.SetProducer(st.pid, st.epoch, piece.seq)
			piece.stampGen, piece.stampSeq = st.gen, piece.seq
		case p.idem:
			build = bld.BuildUnsealed // sequenced and stamped when sent
		}
		data, err := build()
		if err != nil {
			// Cannot happen (the records made a batch before); put back
			// what was taken and let the caller fail the batch.
			for _, q := range append(pieces, piece) {
				q.builder.Reset()
				p.builders.Put(q.builder)
			}
			return false
		}
		piece.data = data
		for _, r := range decoded[start:end] {
			piece.bytes += len(r.Key) + len(r.Value) + 32
		}
		bytesLeft -= piece.bytes
		pieces = append(pieces, piece)
		start = end
	}
	// The buffer accounting stays as it was: the pieces hold the batch's
	// bytes between them.
	pieces[len(pieces)-1].bytes += bytesLeft
	if pp.splitBytes == 0 || target < pp.splitBytes {
		pp.splitBytes = target
	}
	b.builder.Reset()
	p.builders.Put(b.builder)
	b.builder, b.data = nil, nil
	if p.idem && b.seq >= 0 {
		i := slices.Index(st.outstanding, b)
		switch {
		case keepSeq && i >= 0:
			st.outstanding = slices.Replace(st.outstanding, i, i+1, pieces...)
			// seqIdx counts batches for the leader's window of five; the
			// pieces share the batch's, and the count moves on so that
			// later batches are never thought nearer than they are.
			st.sequenced += uint64(len(pieces) - 1)
		case i >= 0:
			st.outstanding = slices.Delete(st.outstanding, i, i+1)
		}
	}
	if p.idem {
		for _, piece := range pieces {
			p.idemRequeueLocked(pp, piece)
		}
	} else {
		pp.ready = append(pieces, pp.ready...)
	}
	return true
}
