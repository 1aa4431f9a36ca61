package naming_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/naming"
)

func TestValidateTopic(t *testing.T) {
	for _, ok := range []string{"a", "orders", "Orders.v2_x-1", strings.Repeat("x", 249), "__consumer_offsets"} {
		require.NoError(t, naming.ValidateTopic(ok), ok)
	}
	for name, want := range map[string]string{
		"":                       "empty",
		".":                      `cannot be "."`,
		"..":                     `cannot be ".."`,
		strings.Repeat("x", 250): "250 characters long; the maximum is 249",
		"a b":                    `illegal character ' ' at position 1`,
		"ü":                      "illegal character",
		"a/b":                    `illegal character '/'`,
	} {
		require.ErrorContains(t, naming.ValidateTopic(name), want, name)
	}
}

func TestCollisionAndInternal(t *testing.T) {
	require.Equal(t, naming.TopicCollisionKey("a.b"), naming.TopicCollisionKey("a_b"))
	require.NotEqual(t, naming.TopicCollisionKey("a.b"), naming.TopicCollisionKey("a-b"))
	require.True(t, naming.IsInternalTopic("__consumer_offsets"))
	require.False(t, naming.IsInternalTopic("_x"))
}
