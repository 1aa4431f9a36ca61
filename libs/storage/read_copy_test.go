package storage

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// CopyTo reads a chunk's bytes from the segment file at the chunk's place,
// and falls back to the map when the read fails or the log was closed
// while the chunk was held.
func TestChunkCopyToReadsTheFileAndFallsBackToTheMap(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 1)
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "4096"}), Options{FS: fs})
	var end int64
	for i := range 200 {
		res, err := l.AppendAsLeader(simpleBatch(t, 3+i%5, int64(1000+i)), 1, record.FromClient)
		require.NoError(t, err)
		end = res.LastOffset + 1
	}
	require.Greater(t, l.NumSegments(), 3)

	// Reads from the middle of segments, across several of them: every
	// chunk starts past its file's first byte, so a wrong position shows.
	copies := 0
	for from := int64(1); from < end; from += 7 {
		res, err := l.Read(from, end, 3000)
		require.NoError(t, err)
		for _, c := range res.Chunks {
			reads := fs.Count(vfs.OpRead)
			dst := make([]byte, len(c.Data)+5) // longer than needed is fine
			c.CopyTo(dst)
			require.Equal(t, c.Data, dst[:len(c.Data)], "chunk at offset %d", from)
			require.Equal(t, reads+1, fs.Count(vfs.OpRead), "CopyTo reads the file")
			copies++
		}
		res.Release()
	}
	require.Greater(t, copies, 10)

	// A failing read copies from the map.
	res, err := l.Read(5, end, 3000)
	require.NoError(t, err)
	remove := fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO})
	dst := make([]byte, len(res.Chunks[0].Data))
	res.Chunks[0].CopyTo(dst)
	require.Equal(t, res.Chunks[0].Data, dst)
	remove()

	// So does a chunk still held after its log (and file) closed.
	want := append([]byte(nil), res.Chunks[0].Data...)
	require.NoError(t, l.Close())
	clear(dst)
	res.Chunks[0].CopyTo(dst)
	require.Equal(t, want, dst)
	res.Release()
}

// Read walks batch headers with positional reads of the segment file, not
// through its map, and walks them through the map when those reads fail.
func TestReadWalksHeadersWithReadsAndFallsBackToTheMap(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 1)
	l := openLog(t, t.TempDir(), testConfig(t, map[string]string{"segment.bytes": "4096"}), Options{FS: fs})
	defer l.Close()
	var end int64
	for i := range 200 {
		res, err := l.AppendAsLeader(simpleBatch(t, 3+i%5, int64(1000+i)), 1, record.FromClient)
		require.NoError(t, err)
		end = res.LastOffset + 1
	}
	read := func() (chunks [][]byte, next int64) {
		res, err := l.Read(end/2, end, 3000)
		require.NoError(t, err)
		defer res.Release()
		for _, c := range res.Chunks {
			chunks = append(chunks, append([]byte(nil), c.Data...))
		}
		return chunks, res.NextOffset
	}
	reads := fs.Count(vfs.OpRead)
	want, wantNext := read()
	require.NotEmpty(t, want)
	require.Greater(t, fs.Count(vfs.OpRead), reads, "headers read from the file")

	remove := fs.Inject(vfs.Fault{Op: vfs.OpRead, PathSuffix: ".log", Err: vfs.EIO})
	defer remove()
	got, next := read()
	require.Equal(t, want, got)
	require.Equal(t, wantNext, next)
	offs, _ := readAll(t, l, 0, end)
	require.Len(t, offs, int(end), "every record readable through the map alone")
}
