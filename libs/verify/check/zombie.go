package check

import (
	"cmp"
	"fmt"
	"slices"
)

// checkZombies finds transactions acknowledged as committed although their
// EndTxn was sent after another InitProducerId of the same transactional id
// had returned a higher epoch: the coordinator should have fenced them.
func (c *checker) checkZombies() {
	type init struct {
		end   int64
		epoch int16
		idx   int
	}
	inits := map[string][]init{}
	for i, in := range c.h.Inits {
		if in.Outcome == OK && in.End != 0 && in.Epoch >= 0 {
			inits[in.TransactionalID] = append(inits[in.TransactionalID], init{in.End, in.Epoch, i})
		}
	}
	for _, is := range inits {
		slices.SortStableFunc(is, func(a, b init) int { return cmp.Compare(a.end, b.end) })
		// Running maximum of the epoch, so one search finds the highest epoch
		// returned before a time.
		for j := 1; j < len(is); j++ {
			if is[j].epoch < is[j-1].epoch {
				is[j].epoch, is[j].idx = is[j-1].epoch, is[j-1].idx
			}
		}
	}
	for i, t := range c.h.Txns {
		if c.status[i] != committed || t.TransactionalID == "" || t.CommitStart == 0 || !epochKnown(t) {
			continue
		}
		is := inits[t.TransactionalID]
		n, _ := slices.BinarySearchFunc(is, t.CommitStart, func(in init, at int64) int { return cmp.Compare(in.end, at) })
		if n == 0 || is[n-1].epoch <= t.Epoch {
			continue
		}
		in := c.h.Inits[is[n-1].idx]
		c.add(Anomaly{Kind: ZombieAck, Topic: firstTopic(t), Partition: firstPartition(t), Offset: NoOffset, Txn: i,
			Poll: -1, Processes: []int{t.Process, in.Process},
			Msg: fmt.Sprintf("txn %d (process %d, transactional id %s, producer %d epoch %d) sent EndTxn at %d and was "+
				"acknowledged as committed, but init %d (process %d) had returned producer %d epoch %d at %d: a fenced "+
				"producer committed; the coordinator must refuse EndTxn from an older epoch", i, t.Process,
				t.TransactionalID, t.ProducerID, t.Epoch, t.CommitStart, is[n-1].idx, in.Process, in.ProducerID,
				in.Epoch, in.End)})
	}
}

// epochKnown says the transaction recorded its producer epoch: Epoch -1
// means unknown, and ProducerID and Epoch both 0 is taken for unset fields.
func epochKnown(t Txn) bool { return t.Epoch >= 0 && !(t.ProducerID == 0 && t.Epoch == 0) }

func firstTopic(t Txn) string {
	if len(t.Sends) == 0 {
		return ""
	}
	return t.Sends[0].Topic
}

func firstPartition(t Txn) int32 {
	if len(t.Sends) == 0 {
		return 0
	}
	return t.Sends[0].Partition
}
