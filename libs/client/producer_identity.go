package client

// ProducerIdentity returns the producer id and epoch the producer sends
// with now: for a transactional producer, the ones InitTransactions or the
// last EndTxn gave (KIP-890 bumps the epoch per transaction); for an
// idempotent one, the ones it got before its first send. ok is false
// before the producer has an identity (and always for a plain producer).
// Tools that record what a producer did (a history checker matching
// transactions to InitProducerId answers) read it; sending needs none of it.
func (p *Producer) ProducerIdentity() (producerID int64, epoch int16, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id.gen == 0 {
		return -1, -1, false
	}
	return p.id.pid, p.id.epoch, true
}
