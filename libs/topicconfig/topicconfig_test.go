package topicconfig_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

func TestValidate(t *testing.T) {
	require.NoError(t, topicconfig.Validate(map[string]string{
		"retention.ms": "-1", "cleanup.policy": "compact,delete", "min.insync.replicas": "2",
		"min.cleanable.dirty.ratio": "0.1", "unclean.leader.election.enable": "true", "compression.type": "zstd",
	}))
	err := topicconfig.Validate(map[string]string{
		"retention.ms": "soon", "cleanup.policy": "archive", "min.insync.replicas": "0", "retention.mss": "1",
		"segment.bytes": "100",
	})
	require.Equal(t, errs.InvalidConfig, errs.CodeOf(err))
	for _, want := range []string{
		`retention.ms: "soon" is not an integer`,
		`cleanup.policy: "archive" is not one of delete, compact`,
		"min.insync.replicas: 0 is outside [1, 2147483647]",
		"retention.mss: unknown topic config",
		"segment.bytes: 100 is outside [16384, 2147483647]",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestResolveOrder(t *testing.T) {
	topic := map[string]string{"retention.ms": "1000"}
	cluster := map[string]string{"log.retention.ms": "2000", "log.retention.bytes": "5"}
	v, src := topicconfig.Resolve("retention.ms", topic, cluster)
	require.Equal(t, "1000", v)
	require.Equal(t, topicconfig.FromTopic, src)
	v, src = topicconfig.Resolve("retention.bytes", topic, cluster)
	require.Equal(t, "5", v)
	require.Equal(t, topicconfig.FromClusterDefault, src)
	v, src = topicconfig.Resolve("segment.ms", topic, cluster)
	require.Equal(t, "604800000", v)
	require.Equal(t, topicconfig.FromBuiltin, src)
	eff := topicconfig.Effective(topic, cluster)
	require.Equal(t, "1000", eff["retention.ms"])
	require.Equal(t, "delete", eff["cleanup.policy"])
	d, ok := topicconfig.LookupBroker("log.retention.ms")
	require.True(t, ok)
	require.Equal(t, "retention.ms", d.Name)
}

func TestCheckMinInsyncReplicas(t *testing.T) {
	require.NoError(t, topicconfig.CheckMinInsyncReplicas("t", map[string]string{"min.insync.replicas": "3"}, nil, 3))
	require.NoError(t, topicconfig.CheckMinInsyncReplicas("t", nil, nil, 1), "the built-in default 1 fits every topic")
	require.NoError(t, topicconfig.CheckMinInsyncReplicas("t", map[string]string{"min.insync.replicas": "1"},
		map[string]string{"min.insync.replicas": "3"}, 1), "the topic's override wins over the cluster default")

	err := topicconfig.CheckMinInsyncReplicas("orders", map[string]string{"min.insync.replicas": "3"}, nil, 2)
	require.Equal(t, errs.InvalidConfig, errs.CodeOf(err))
	require.ErrorContains(t, err, `topic "orders": min.insync.replicas 3 is larger than the replication factor 2`)
	require.ErrorContains(t, err, "set it to at most 2")

	err = topicconfig.CheckMinInsyncReplicas("orders", nil, map[string]string{"min.insync.replicas": "2"}, 1)
	require.Equal(t, errs.InvalidConfig, errs.CodeOf(err))
	require.ErrorContains(t, err, `topic "orders": the cluster-wide default min.insync.replicas 2 is larger than the topic's replication factor 1`)
}
