package client

import (
	"math/rand/v2"
)

// Partitioner chooses a partition for a record that does not name one.
type Partitioner interface {
	// Partition returns a partition in [0, n). sealed reports that the
	// batch the previous choice filled was sealed, for sticky choices.
	Partition(key []byte, n int32) int32
	// BatchSealed tells a sticky partitioner to move on.
	BatchSealed(partition int32)
}

// DefaultPartitioner hashes keys with murmur2 exactly as Kafka's default
// partitioner does, so keyed records land in the same partitions as with a
// Kafka client; records without a key stick to one partition until its
// batch is sealed, then move to another (KIP-480), which makes large batches
// without skewing load.
type DefaultPartitioner struct {
	sticky int32
	has    bool
}

// Partition implements Partitioner.
func (d *DefaultPartitioner) Partition(key []byte, n int32) int32 {
	if key != nil {
		return int32(toPositive(murmur2(key)) % uint32(n))
	}
	if !d.has || d.sticky >= n {
		d.sticky, d.has = rand.Int32N(n), true
	}
	return d.sticky
}

// BatchSealed implements Partitioner.
func (d *DefaultPartitioner) BatchSealed(p int32) {
	if d.has && p == d.sticky {
		d.has = false
	}
}

// RoundRobinPartitioner spreads records over partitions in turn, keyed or
// not.
type RoundRobinPartitioner struct{ next int32 }

// Partition implements Partitioner.
func (r *RoundRobinPartitioner) Partition(_ []byte, n int32) int32 {
	p := r.next % n
	r.next = (r.next + 1) % n
	return p
}

// BatchSealed implements Partitioner.
func (r *RoundRobinPartitioner) BatchSealed(int32) {}

// toPositive is Kafka's Utils.toPositive.
func toPositive(v int32) uint32 { return uint32(v) & 0x7fffffff }

// murmur2 is Kafka's Utils.murmur2 (seed 0x9747b28c), byte for byte.
func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n := length / 4
	for i := 0; i < n; i++ {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= uint32(data[(length & ^3)+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[(length & ^3)+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[length & ^3])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}
