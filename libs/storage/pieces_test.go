package storage

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// split cuts b into pieces of random sizes from 1 to max bytes.
func split(rng *rand.Rand, b []byte, max int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(max))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// readBytes returns the log's batches from offset 0 as stored.
func readBytes(t *testing.T, l *Log) []byte {
	t.Helper()
	var out []byte
	for from := l.LogStartOffset(); from < l.LogEndOffset(); {
		res, err := l.Read(from, l.LogEndOffset(), 1<<20)
		require.NoError(t, err)
		n := len(out)
		out = res.AppendTo(out)
		from = res.NextOffset
		res.Release()
		if len(out) == n {
			break
		}
	}
	return out
}

// A follower appending chunks in pieces (as they arrive in HTTP/2 frames,
// batches cut anywhere, headers included) ends with the same log, offsets,
// epochs and producer state as one appending whole chunks.
func TestAppendAsFollowerPiecesMatchesWholeAppends(t *testing.T) {
	cfg := testConfig(t, map[string]string{"segment.bytes": "65536"})
	leader := openLog(t, t.TempDir(), cfg, Options{})
	defer leader.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	randomProducerTraffic(t, leader, rng, 300)
	whole := openLog(t, t.TempDir(), cfg, Options{})
	defer whole.Close()
	copyToFollower(t, leader, whole)
	pieced := openLog(t, t.TempDir(), cfg, Options{})
	defer pieced.Close()
	for from := int64(0); from < leader.LogEndOffset(); {
		res, err := leader.Read(from, leader.LogEndOffset(), 1+rng.IntN(8192))
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		from = res.NextOffset
		res.Release()
		got, err := pieced.AppendAsFollowerPieces(split(rng, buf, 1+rng.IntN(600)))
		require.NoError(t, err)
		require.Equal(t, from, got.LastOffset+1)
		require.Equal(t, len(buf), got.Bytes)
	}
	require.Equal(t, whole.LogEndOffset(), pieced.LogEndOffset())
	require.True(t, bytes.Equal(readBytes(t, whole), readBytes(t, pieced)), "the logs differ")
	require.Equal(t, whole.Producers(), pieced.Producers())
	require.NotEmpty(t, whole.AbortedTransactions(0, whole.LogEndOffset()))
	require.Equal(t, whole.AbortedTransactions(0, whole.LogEndOffset()), pieced.AbortedTransactions(0, pieced.LogEndOffset()))
	wf, wo := whole.FirstUnstableOffset()
	pf, po := pieced.FirstUnstableOffset()
	require.Equal(t, wo, po)
	require.Equal(t, wf, pf)
	for e := int32(0); e < 3; e++ {
		we, wend := whole.EndOffsetForEpoch(e)
		pe, pend := pieced.EndOffsetForEpoch(e)
		require.Equal(t, [2]int64{int64(we), wend}, [2]int64{int64(pe), pend})
	}
}

// A chunk in pieces with a flipped byte, a cut tail or a header torn across
// pieces is refused whole, as the same bytes in one buffer are.
func TestAppendAsFollowerPiecesRefusesBadChunks(t *testing.T) {
	cfg := testConfig(t, nil)
	leader := openLog(t, t.TempDir(), cfg, Options{})
	defer leader.Close()
	for range 4 {
		_, err := leader.AppendAsLeader(simpleBatch(t, 20, 1000), 2, 0)
		require.NoError(t, err)
	}
	chunk := readBytes(t, leader)
	follower := openLog(t, t.TempDir(), cfg, Options{})
	defer follower.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	first := len(chunk) / 4 // about one batch
	for name, bad := range map[string][]byte{
		"flipped payload byte": func() []byte { b := bytes.Clone(chunk); b[len(b)-5] ^= 1; return b }(),
		"flipped header byte":  func() []byte { b := bytes.Clone(chunk); b[first+30] ^= 0x40; return b }(),
		"cut tail":             chunk[:len(chunk)-3],
		"cut header":           chunk[:len(chunk)-len(chunk)/4+20],
		"bad magic":            func() []byte { b := bytes.Clone(chunk); b[first+16] = 7; return b }(),
	} {
		_, wholeErr := follower.AppendAsFollower(bad)
		require.Error(t, wholeErr, name)
		for _, max := range []int{7, 61, 100, 1000} {
			_, err := follower.AppendAsFollowerPieces(split(rng, bad, max))
			requireCode(t, err, errs.From(wholeErr).Code)
			require.Equal(t, int64(0), follower.LogEndOffset(), name)
		}
	}
	_, err := follower.AppendAsFollowerPieces(split(rng, chunk, 50))
	require.NoError(t, err)
	require.True(t, bytes.Equal(chunk, readBytes(t, follower)), "the log differs from the chunk")
	_, err = follower.AppendAsFollowerPieces(nil)
	requireCode(t, err, errs.InvalidRecord)
}
