package client

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Values from Kafka's own UtilsTest.testMurmur2, so keyed records land in
// the same partitions as with Kafka's clients.
func TestMurmur2MatchesKafka(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	} {
		require.Equal(t, want, murmur2([]byte(in)), in)
	}
	require.Equal(t, int32(479470107), murmur2([]byte{'a', 'b', 'c'}))
}

func TestStickyPartitionerMovesWhenSealed(t *testing.T) {
	var d DefaultPartitioner
	p := d.Partition(nil, 8)
	for range 10 {
		require.Equal(t, p, d.Partition(nil, 8), "sticks while the batch is open")
	}
	moved := false
	for range 20 {
		d.BatchSealed(p)
		if d.Partition(nil, 8) != p {
			moved = true
			break
		}
	}
	require.True(t, moved)
	require.Equal(t, d.Partition([]byte("k"), 8), d.Partition([]byte("k"), 8), "keys always hash the same")
}
