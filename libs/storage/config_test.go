package storage

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

func TestConfigDefaultsAndParsing(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	require.EqualValues(t, 1<<30, c.SegmentBytes)
	require.EqualValues(t, 604800000, c.SegmentMs)
	require.EqualValues(t, 604800000, c.RetentionMs)
	require.EqualValues(t, -1, c.RetentionBytes)
	require.Equal(t, CleanupDelete, c.CleanupPolicy)
	require.Equal(t, record.DefaultMaxBatchBytes, c.MaxMessageBytes)
	require.True(t, c.FsyncBeforeAck)
	require.Equal(t, record.CreateTime, c.MessageTimestampType)

	c, err := ParseConfig(map[string]string{
		"cleanup.policy": "compact,delete", "retention.ms": "-1", "message.timestamp.type": "LogAppendTime",
		"sluice.fsync.before.ack": "false", "min.cleanable.dirty.ratio": "0.25",
		"min.insync.replicas": "2", // not the log's: ignored
	})
	require.NoError(t, err)
	require.True(t, c.CleanupPolicy.Compact() && c.CleanupPolicy.Delete())
	require.EqualValues(t, -1, c.RetentionMs)
	require.Equal(t, record.LogAppendTime, c.MessageTimestampType)
	require.False(t, c.FsyncBeforeAck)
	require.Equal(t, 0.25, c.MinCleanableDirtyRatio)

	// Values round-trips through ApplyConfig.
	again, err := ParseConfig(c.Values())
	require.NoError(t, err)
	require.Equal(t, c, again)

	for k, v := range map[string]string{
		"segment.bytes": "10", "retention.ms": "-2", "cleanup.policy": "forever", "flush.messages": "0",
		"min.cleanable.dirty.ratio": "1.5", "message.timestamp.type": "Now", "sluice.fsync.before.ack": "maybe",
		"max.message.bytes": "abc",
	} {
		_, err := ParseConfig(map[string]string{k: v})
		require.Error(t, err, "%s=%s", k, v)
	}
}

func TestConfigTable(t *testing.T) {
	require.True(t, sort.SliceIsSorted(ConfigDefs, func(i, j int) bool { return ConfigDefs[i].Name < ConfigDefs[j].Name }),
		"LookupConfig binary-searches the table")
	for _, d := range ConfigDefs {
		got, ok := LookupConfig(d.Name)
		require.True(t, ok)
		require.Equal(t, d.Name, got.Name)
		// Every key the log applies is a topic config, whose default the
		// log accepts.
		td, ok := topicconfig.Lookup(d.Name)
		require.True(t, ok, "%s is a log config but not a topic config", d.Name)
		require.NotEmpty(t, td.Doc)
		require.NoError(t, d.Validate(d.Default()), d.Name)
	}
	_, ok := LookupConfig("no.such.config")
	require.False(t, ok)
}

func TestEpochCache(t *testing.T) {
	var c epochCache
	require.True(t, c.assign(1, 0))
	require.False(t, c.assign(1, 5), "same epoch keeps its start")
	require.False(t, c.assign(0, 10), "older epochs are ignored")
	require.True(t, c.assign(3, 10))
	require.True(t, c.assign(4, 20))
	// An unclean change: epoch 5 starts at 15, contradicting epoch 4.
	require.True(t, c.assign(5, 15))
	require.Equal(t, []EpochEntry{{1, 0}, {3, 10}, {5, 15}}, c.entries)

	data := c.encode()
	entries, err := decodeEpochs(data)
	require.NoError(t, err)
	require.Equal(t, c.entries, entries)
	for _, bad := range []string{"", "1\n0\n", "0\n2\n1 0\n", "0\n2\n3 10\n1 0\n", "0\n1\nx y\n"} {
		_, err := decodeEpochs([]byte(bad))
		require.Error(t, err, "%q", bad)
	}

	c.truncateFromStart(12)
	require.Equal(t, []EpochEntry{{3, 12}, {5, 15}}, c.entries)
	c.truncateFromEnd(15)
	require.Equal(t, []EpochEntry{{3, 12}}, c.entries)
	c.clear()
	e, o := c.endOffsetFor(3, 100)
	require.Equal(t, UndefinedEpoch, e)
	require.Equal(t, UndefinedOffset, o)
}
