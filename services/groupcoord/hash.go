package groupcoord

import (
	"unicode/utf16"

	"github.com/sluice-io/sluice/libs/metadata"
)

// OffsetsTopic is the internal topic that holds committed offsets and group
// metadata, named as Kafka names it so Kafka tools recognise it.
const OffsetsTopic = metadata.OffsetsTopic

// PartitionFor maps a group id onto one of n partitions of the offsets topic
// exactly as Kafka does (Utils.abs(groupId.hashCode()) % n), so a Kafka
// client, tool or broker reading the same topic agrees on where a group
// lives. Java's String.hashCode runs over UTF-16 code units with 32-bit
// wrap-around, and Kafka's Utils.abs maps math.MinInt32 to 0.
func PartitionFor(groupID string, n int32) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(groupID)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % n
}
