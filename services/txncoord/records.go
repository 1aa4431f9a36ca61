package txncoord

import (
	"fmt"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
)

// Records in __transaction_state use Kafka's TransactionLog layouts: the key
// is TxnMetadataKey (version 0, the transactional id) and the value
// TxnMetadataValue (version 1, flexible, with the tagged fields of
// KIP-890: previous and next producer id, next epoch). Every state change
// writes the whole state of the id, so compaction keeps only the last one;
// a nil value is a tombstone (an expired id).
const (
	txnKeyVersion   = 0
	txnValueVersion = 1
	// fencedTag is a tagged field Kafka does not use: set (one byte, 1)
	// when the transaction was ended by fencing its producer (a timeout, an
	// InitProducerId of a new producer, an operator's abort), not by the
	// producer's EndTxn, so a late EndTxn of the fenced producer gets
	// PRODUCER_FENCED. Kafka readers keep unknown tags and ignore them.
	fencedTag = 1000
)

func txnKey(tid string) []byte {
	k := kmsg.TxnMetadataKey{Version: txnKeyVersion, TransactionalID: tid}
	return k.AppendTo(nil)
}

// decodeTxnKey returns the transactional id of a key.
func decodeTxnKey(b []byte) (string, error) {
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(b); err != nil {
		return "", fmt.Errorf("decoding a transaction key: %w", err)
	}
	if k.Version != txnKeyVersion {
		return "", fmt.Errorf("transaction key version %d is not %d", k.Version, txnKeyVersion)
	}
	return k.TransactionalID, nil
}

// maxEpoch is the highest epoch handed out; a transaction ending at it
// gets a new producer id with epoch 0 (Kafka keeps Short.MAX_VALUE for
// fencing, so an epoch never reaches it).
const maxEpoch = math.MaxInt16 - 1

// encodeTxn lays a transaction's state out as TxnMetadataValue, with the
// fields' Kafka meanings: while a transaction ends (Prepare*), ProducerID
// and ProducerEpoch are the ending transaction's and NextProducerID /
// NextProducerEpoch what the producer uses next (KIP-890); otherwise
// ProducerID and ProducerEpoch are the current ones and PreviousProducerID
// the producer id of the transaction that ended last. Partitions are grouped
// by topic, topics and partitions sorted, so equal states encode equally.
func encodeTxn(m *txnMeta) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.Version = txnValueVersion
	v.ProducerID, v.ProducerEpoch = m.producerID, m.epoch
	v.PreviousProducerID, v.NextProducerID, v.NextProducerEpoch = -1, -1, -1
	if m.preparing() {
		v.ProducerID, v.ProducerEpoch = m.lastProducerID, m.lastEpoch
		v.NextProducerEpoch = m.epoch
		if m.producerID != m.lastProducerID {
			v.NextProducerID = m.producerID
		}
	} else {
		v.PreviousProducerID = m.lastProducerID
	}
	v.TimeoutMillis = m.timeoutMs
	v.State = m.state
	v.LastUpdateTimestamp = m.lastUpdateMs
	v.StartTimestamp = m.startMs
	v.ClientTransactionVersion = 2
	if m.fenced {
		v.UnknownTags.Set(fencedTag, []byte{1})
	}
	byTopic := map[string][]int32{}
	for tp := range m.partitions {
		byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
	}
	topics := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		ps := byTopic[t]
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: t, Partitions: ps})
	}
	return v.AppendTo(nil)
}

// decodeTxn reads a TxnMetadataValue written by encodeTxn.
func decodeTxn(tid string, b []byte) (*txnMeta, error) {
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("decoding the state of transactional id %q: %w", tid, err)
	}
	if v.Version != txnValueVersion {
		return nil, fmt.Errorf("transactional id %q: value version %d is not %d", tid, v.Version, txnValueVersion)
	}
	m := &txnMeta{
		tid: tid, producerID: v.ProducerID, epoch: v.ProducerEpoch, timeoutMs: v.TimeoutMillis, state: v.State,
		lastUpdateMs: v.LastUpdateTimestamp, startMs: v.StartTimestamp, lastProducerID: -1, lastEpoch: -1,
		partitions: map[topicPartition]bool{},
	}
	switch {
	case m.preparing():
		m.lastProducerID, m.lastEpoch = v.ProducerID, v.ProducerEpoch
		m.epoch = v.NextProducerEpoch
		if v.NextProducerID >= 0 {
			m.producerID = v.NextProducerID
		}
	case v.PreviousProducerID >= 0:
		// The ended transaction's epoch is implied: one below the
		// current, or the last epoch of a producer id that rotated.
		m.lastProducerID, m.lastEpoch = v.PreviousProducerID, m.epoch-1
		if v.PreviousProducerID != m.producerID {
			m.lastEpoch = maxEpoch
		}
	}
	v.UnknownTags.Each(func(tag uint32, b []byte) {
		if tag == fencedTag && len(b) == 1 && b[0] == 1 {
			m.fenced = true
		}
	})
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			m.partitions[topicPartition{t.Topic, p}] = true
		}
	}
	return m, nil
}

// topicPartition is a partition in a transaction.
type topicPartition struct {
	topic     string
	partition int32
}

func (tp topicPartition) proto() *commonv1.TopicPartition {
	return &commonv1.TopicPartition{Topic: tp.topic, Partition: tp.partition}
}
