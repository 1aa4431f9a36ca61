package cmd

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client"
)

// An owned partition that printed nothing is committed where reading
// started: uncommitted, the next run without --from-beginning starts it at
// the end and skips what was written to it in between.
func TestPrintedOffsetsCommitEveryOwnedPartition(t *testing.T) {
	p := &printedOffsets{pos: map[client.TopicPartition]int64{}, committed: map[client.TopicPartition]int64{}}
	t0, t1, t2, t3 := client.TopicPartition{Topic: "t", Partition: 0}, client.TopicPartition{Topic: "t", Partition: 1},
		client.TopicPartition{Topic: "t", Partition: 2}, client.TopicPartition{Topic: "t", Partition: 3}
	positions := map[client.TopicPartition]int64{t0: 10, t1: 0, t2: -1, t3: 7}
	position := func(tp client.TopicPartition) int64 { return positions[tp] }
	owned := []client.TopicPartition{t0, t1, t2, t3}

	p.add(&client.ConsumedRecord{Topic: "t", Partition: 0, Offset: 4})
	// Partition 3 returned records from offset 5 that --max-messages cut
	// off: it resumes at 5, not at the consumer's position past them.
	p.cut(&client.ConsumedRecord{Topic: "t", Partition: 3, Offset: 5})
	p.cut(&client.ConsumedRecord{Topic: "t", Partition: 3, Offset: 6})
	offs := p.pending(owned, position)
	require.Equal(t, map[client.TopicPartition]int64{t0: 5, t1: 0, t3: 5}, offs, "partition 2's start is not known yet")

	p.done(offs)
	require.Empty(t, p.pending(owned, position), "nothing moved since the commit")
	positions[t2] = 3
	require.Equal(t, map[client.TopicPartition]int64{t2: 3}, p.pending(owned, position))
	// What was printed counts, not the consumer's position.
	p.add(&client.ConsumedRecord{Topic: "t", Partition: 0, Offset: 8})
	require.Equal(t, map[client.TopicPartition]int64{t0: 9}, p.pending([]client.TopicPartition{t0}, func(client.TopicPartition) int64 { return 99 }))
}
