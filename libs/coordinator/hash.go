package coordinator

import "unicode/utf16"

// PartitionFor maps a key (a group id, a transactional id) onto one of n
// partitions of its internal topic exactly as Kafka does
// (Utils.abs(key.hashCode()) % n), so a Kafka client, tool or broker reading
// the same topic agrees on where a key lives. Java's String.hashCode runs
// over UTF-16 code units with 32-bit wrap-around, and Kafka's Utils.abs maps
// math.MinInt32 to 0.
func PartitionFor(key string, n int32) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(key)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % n
}

// MaxTransactionalIDBytes bounds a transactional id: it is written into
// keys of __transaction_state and logged. Kafka bounds it only by the
// request size; 1 KiB is far above any id seen in practice.
const MaxTransactionalIDBytes = 1024
