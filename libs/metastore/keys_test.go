package metastore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/metastore"
)

func TestPartitionKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		topic string
		p     int32
	}{{"orders", 0}, {"a.b_c-d", 1023}, {"x", 7}} {
		topic, p, ok := metastore.ParsePartitionKey(metastore.PartitionKey(tc.topic, tc.p))
		require.True(t, ok)
		require.Equal(t, tc.topic, topic)
		require.Equal(t, tc.p, p)
	}
	for _, bad := range []string{"topics/x", "partitions/x", "partitions//1", "partitions/x/-1", "partitions/x/y"} {
		_, _, ok := metastore.ParsePartitionKey(bad)
		require.False(t, ok, bad)
	}
}
