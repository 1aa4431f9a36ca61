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
		"a b":                    `illegal character ' ' (U+0020) at position 1`,
		"ü":                      "illegal character 'ü' (U+00FC) at position 0",
		"a/b":                    `illegal character '/'`,
		"ab\xffc":                "the byte 0xff, which is not UTF-8, at position 2",
		strings.Repeat("é", 130): "illegal character 'é' (U+00E9) at position 0",
	} {
		require.ErrorContains(t, naming.ValidateTopic(name), want, name)
	}
}

// A non-ASCII character is reported as the character at its character
// position, not as the first byte of its UTF-8 encoding ('Ã' at the byte
// offset).
func TestValidateTopicNamesTheCharacter(t *testing.T) {
	err := naming.ValidateTopic("töpic-ü")
	require.EqualError(t, err, `topic name "töpic-ü" has the illegal character 'ö' (U+00F6) at position 1 (counting characters from 0); `+
		`use only ASCII letters, digits, '.', '_' and '-'`)
}

func TestCollisionAndInternal(t *testing.T) {
	require.Equal(t, naming.TopicCollisionKey("a.b"), naming.TopicCollisionKey("a_b"))
	require.NotEqual(t, naming.TopicCollisionKey("a.b"), naming.TopicCollisionKey("a-b"))
	require.True(t, naming.IsInternalTopic("__consumer_offsets"))
	require.False(t, naming.IsInternalTopic("_x"))
}
