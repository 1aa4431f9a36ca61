package storagenode

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/storage"
)

// The copier copies chunks into pooled buffers while its budget lasts,
// gives the budget back when the transport frees the frame, and sends
// chunks by reference beyond the budget and below the smallest copy.
func TestChunkCopierCopiesWithinItsBudget(t *testing.T) {
	big := func(b byte) []byte { return bytes.Repeat([]byte{b}, 64<<10) }
	chunks := func() *storage.ReadResult {
		return &storage.ReadResult{Chunks: []storage.Chunk{{Data: big(1)}, {Data: big(2)}, {Data: []byte("tiny")}, {Data: big(3)}}}
	}
	aliases := func(a, b []byte) bool { return &a[0] == &b[0] }

	cc := &chunkCopier{budget: 2 * 64 << 10} // two of the three large chunks
	data := chunks()
	orig := make([][]byte, len(data.Chunks))
	for i, c := range data.Chunks {
		orig[i] = c.Data
	}
	f := cc.frameOf([]byte("head"), data)
	require.Len(t, f.Body, 4)
	for i, b := range f.Body {
		require.Equal(t, orig[i], b, "chunk %d", i)
	}
	require.False(t, aliases(f.Body[0], orig[0]), "first chunk copied")
	require.False(t, aliases(f.Body[1], orig[1]), "second chunk copied")
	require.True(t, aliases(f.Body[2], orig[2]), "a chunk below the smallest copy goes by reference")
	require.True(t, aliases(f.Body[3], orig[3]), "a chunk beyond the budget goes by reference")
	require.EqualValues(t, 2*64<<10, cc.inFlight.Load())

	// While those copies are in flight, a second frame gets none.
	data2 := chunks()
	first := data2.Chunks[0].Data
	f2 := cc.frameOf(nil, data2)
	require.True(t, aliases(f2.Body[0], first), "over budget: by reference")
	require.EqualValues(t, 2*64<<10, cc.inFlight.Load())
	f2.Free()

	f.Free() // the transport wrote the frame
	require.Zero(t, cc.inFlight.Load(), "written copies give their budget back")
	f3 := cc.frameOf(nil, chunks())
	require.EqualValues(t, 2*64<<10, cc.inFlight.Load(), "the budget serves the next frame")
	f3.Free()

	// No copier, or a zero budget: every chunk by reference.
	for _, cc := range []*chunkCopier{nil, {}} {
		data := chunks()
		first := data.Chunks[0].Data
		f := cc.frameOf(nil, data)
		require.True(t, aliases(f.Body[0], first))
		f.Free()
	}
}
