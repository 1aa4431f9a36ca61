package topicconfig_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// The log's own config table and this one must agree on every entry they
// share, or a topic would behave differently from what DescribeConfigs
// says.
func TestAgreesWithStorage(t *testing.T) {
	for _, d := range storage.ConfigDefs {
		td, ok := topicconfig.Lookup(d.Name)
		require.True(t, ok, "%s is a log config but not a topic config", d.Name)
		require.Equal(t, td.Default, d.Default, "default of %s", d.Name)
	}
}
