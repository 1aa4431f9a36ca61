package coordinator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The hash values are String.hashCode worked by hand from its definition
// (s[0]*31^(n-1) + ... over UTF-16 units); "polygenelubricants" is the
// well-known string whose hash is Integer.MIN_VALUE, which Kafka's Utils.abs
// maps to 0.
func TestPartitionForMatchesKafka(t *testing.T) {
	for _, c := range []struct {
		key  string
		want int32
	}{
		{"", 0},
		{"a", 97 % 50},
		{"my-group", javaAbsMod(javaHash("my-group"), 50)},
		{"polygenelubricants", 0},
		{"grüße-😀", javaAbsMod(javaHash("grüße-😀"), 50)},
	} {
		require.Equal(t, c.want, PartitionFor(c.key, 50), "key %q", c.key)
	}
	// String.hashCode of these strings.
	require.Equal(t, int32(-1<<31), javaHash("polygenelubricants"))
	require.Equal(t, int32(99162322), javaHash("hello"))
	require.Equal(t, int32(2099062), javaHash("Char"))
	// A supplementary character counts as two UTF-16 units: "😀".hashCode() == 1772899.
	require.Equal(t, int32(1772899), javaHash("😀"))
}

// javaHash restates String.hashCode on UTF-16 units independently of
// PartitionFor, for the table above.
func javaHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

func javaAbsMod(h, n int32) int32 {
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % n
}
