package client

// committedOffset is a position to commit: the next offset to read and the
// leader epoch of the record before it (-1 if unknown).
type committedOffset struct {
	offset int64
	epoch  int32
}

// offsetBook keeps, for each owned partition, the position after the
// records Poll returned and the position last committed, so automatic
// commits send what the application was handed (Kafka's semantics: a Poll
// commits what the previous Polls returned) and skip partitions that did
// not move.
type offsetBook struct {
	// tracked are the owned partitions that have a starting position.
	tracked map[TopicPartition]bool
	// pos is the position after the last record returned, or the
	// committed offset reading started from.
	pos map[TopicPartition]committedOffset
	// done is the last position committed.
	done map[TopicPartition]committedOffset
}

func newOffsetBook() offsetBook {
	return offsetBook{tracked: map[TopicPartition]bool{}, pos: map[TopicPartition]committedOffset{}, done: map[TopicPartition]committedOffset{}}
}

// start tracks partitions that begin reading, at their committed offsets
// where the group has one (otherwise the reset policy decides, and the
// consumer's position says where).
func (b *offsetBook) start(tps []TopicPartition, committed map[TopicPartition]committedOffset) {
	for _, tp := range tps {
		b.tracked[tp] = true
		delete(b.pos, tp)
		delete(b.done, tp)
		if c, ok := committed[tp]; ok {
			b.pos[tp], b.done[tp] = c, c
		}
	}
}

// returned advances positions past records handed to the application.
func (b *offsetBook) returned(recs []*ConsumedRecord) {
	// Records come in runs of one partition, in offset order: one lookup
	// and one update per run, not per record (this is the catch-up path).
	for i := 0; i < len(recs); {
		r := recs[i]
		j := i + 1
		for j < len(recs) && recs[j].Partition == r.Partition && recs[j].Topic == r.Topic {
			j++
		}
		tp := TopicPartition{r.Topic, r.Partition}
		if b.tracked[tp] {
			last := recs[i]
			for _, x := range recs[i+1 : j] {
				if x.Offset > last.Offset {
					last = x
				}
			}
			if cur, ok := b.pos[tp]; !ok || last.Offset+1 > cur.offset {
				b.pos[tp] = committedOffset{offset: last.Offset + 1, epoch: last.LeaderEpoch}
			}
		}
		i = j
	}
}

// due returns the positions to commit: with all, every known position;
// otherwise only those that differ from the last commit. A partition that
// returned nothing yet commits where the consumer's reset put it
// (position gives it, -1 while unresolved), as Kafka commits the positions
// of all owned partitions.
func (b *offsetBook) due(all bool, position func(TopicPartition) int64) map[TopicPartition]committedOffset {
	out := map[TopicPartition]committedOffset{}
	for tp := range b.tracked {
		p, ok := b.pos[tp]
		if !ok {
			off := position(tp)
			if off < 0 {
				continue
			}
			p = committedOffset{offset: off, epoch: -1}
		}
		if d, ok := b.done[tp]; all || !ok || d.offset != p.offset {
			out[tp] = p
		}
	}
	return out
}

// committed records a successful commit of partitions still owned.
func (b *offsetBook) committed(offsets map[TopicPartition]committedOffset) {
	for tp, o := range offsets {
		if b.tracked[tp] {
			b.done[tp] = o
		}
	}
}

// drop forgets partitions the member gave up.
func (b *offsetBook) drop(tps []TopicPartition) {
	for _, tp := range tps {
		delete(b.tracked, tp)
		delete(b.pos, tp)
		delete(b.done, tp)
	}
}
