package kafka

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/metadata"
)

func TestTopicIDs(t *testing.T) {
	const s = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0ff"
	id, ok := TopicID(s)
	require.True(t, ok)
	require.Equal(t, byte(0x0f), id[0])
	require.Equal(t, s, TopicIDString(id))
	for _, bad := range []string{"", "zz", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0fz"} {
		_, ok := TopicID(bad)
		require.False(t, ok, bad)
	}

	img := metadata.Empty()
	img.Topics["a"] = &metadata.Topic{Name: "a", ID: s}
	img.Topics["b"] = &metadata.Topic{Name: "b"} // no id
	ix := Topics(img)
	require.Same(t, ix, Topics(img), "one index per image")
	name, ok := ix.Name(id)
	require.True(t, ok)
	require.Equal(t, "a", name)
	got, ok := ix.ID("a")
	require.True(t, ok)
	require.Equal(t, id, got)
	_, ok = ix.ID("b")
	require.False(t, ok)
	_, ok = ix.Name([16]byte{})
	require.False(t, ok)
}
