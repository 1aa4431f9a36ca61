package storage

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// testConfig is a small-segment configuration for tests.
func testConfig(t testing.TB, overrides map[string]string) Config {
	t.Helper()
	m := map[string]string{"segment.bytes": "16384", "index.interval.bytes": "1024", "max.message.bytes": "8192"}
	for k, v := range overrides {
		m[k] = v
	}
	cfg, err := ParseConfig(m)
	require.NoError(t, err)
	return cfg
}

// makeBatch builds a batch of n records whose values name their index.
func makeBatch(t testing.TB, c record.Codec, ts int64, keys []string, tag string) []byte {
	t.Helper()
	b := record.NewBuilder(c)
	for i, k := range keys {
		var key []byte
		if k != "" {
			key = []byte(k)
		}
		require.NoError(t, b.AppendKV(ts+int64(i), key, []byte(fmt.Sprintf("%s-%d-%s", tag, i, k))))
	}
	out, err := b.Build()
	require.NoError(t, err)
	return bytes.Clone(out)
}

func simpleBatch(t testing.TB, n int, ts int64) []byte {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return makeBatch(t, record.CodecNone, ts, keys, "v")
}

func openLog(t testing.TB, dir string, cfg Config, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, cfg, opts)
	require.NoError(t, err)
	return l
}

// readAll reads every record in [from, bound) and returns their offsets and
// values.
func readAll(t testing.TB, l *Log, from, bound int64) (offsets []int64, values []string) {
	t.Helper()
	var it record.Iterator
	for from < bound {
		res, err := l.Read(from, bound, 64<<10)
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		next := res.NextOffset
		res.Release()
		if len(buf) == 0 {
			break
		}
		it.Reset(buf)
		for it.Next() {
			r := it.Record()
			if r.Offset < from {
				continue
			}
			offsets = append(offsets, r.Offset)
			values = append(values, string(r.Value))
		}
		require.NoError(t, it.Err())
		require.Greater(t, next, from)
		from = next
	}
	return offsets, values
}

func requireCode(t testing.TB, err error, code errs.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, errs.Name(code), errs.Name(errs.From(err).Code), "error: %v", err)
}

func TestAppendReadReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, map[string]string{"segment.bytes": "4096"})
	l := openLog(t, dir, cfg, Options{})
	var want int64
	for i := 0; i < 200; i++ {
		res, err := l.AppendAsLeader(simpleBatch(t, 5+i%11, int64(1000+i)), 3, record.FromClient)
		require.NoError(t, err)
		require.Equal(t, want, res.FirstOffset)
		want = res.LastOffset + 1
	}
	require.Equal(t, want, l.LogEndOffset())
	require.Greater(t, l.NumSegments(), 3, "segments rolled")
	offs, _ := readAll(t, l, 0, want)
	require.Len(t, offs, int(want))
	for i, o := range offs {
		require.EqualValues(t, i, o)
	}
	// Reads from the middle start at the batch holding the offset.
	res, err := l.Read(want/2, want, 1)
	require.NoError(t, err)
	require.Len(t, res.Chunks, 1)
	h, _ := record.ParseBatchHeader(res.Chunks[0].Data)
	require.LessOrEqual(t, h.BaseOffset, want/2)
	require.GreaterOrEqual(t, h.LastOffset(), want/2)
	res.Release()
	// Bounds.
	_, err = l.Read(want+1, want+1, 100)
	requireCode(t, err, errs.OffsetOutOfRange)
	res, err = l.Read(want, want, 100)
	require.NoError(t, err)
	require.Empty(t, res.Chunks)
	res.Release()
	require.NoError(t, l.Close())

	l = openLog(t, dir, cfg, Options{})
	require.Equal(t, want, l.LogEndOffset())
	offs2, _ := readAll(t, l, 0, want)
	require.Equal(t, offs, offs2)
	e, ok := l.LatestEpoch()
	require.True(t, ok)
	require.EqualValues(t, 3, e)
	res2, err := l.AppendAsLeader(simpleBatch(t, 2, 5000), 4, record.FromClient)
	require.NoError(t, err)
	require.Equal(t, want, res2.FirstOffset)
	require.NoError(t, l.Close())
}

func TestAppendSyncGroupCommit(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.OS, 1)
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{FS: fs})
	defer l.Close()
	syncsBefore := fs.Count(vfs.OpSync)
	const writers, each = 8, 20
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < each; i++ {
				res, err := l.AppendSync(context.Background(), simpleBatch(t, 2, 1), 0, record.FromClient)
				if err != nil {
					errc <- err
					return
				}
				if l.DurableOffset() <= res.LastOffset {
					errc <- fmt.Errorf("acknowledged offset %d is not durable (durable %d)", res.LastOffset, l.DurableOffset())
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		require.NoError(t, <-errc)
	}
	syncs := fs.Count(vfs.OpSync) - syncsBefore
	t.Logf("%d appends, %d fsyncs", writers*each, syncs)
	require.Less(t, syncs, writers*each*3, "group commit shares fsyncs")
}

func TestLeaderValidation(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	b := simpleBatch(t, 3, 1)
	b[len(b)-1] ^= 1
	_, err := l.AppendAsLeader(b, 0, record.FromClient)
	requireCode(t, err, errs.CorruptMessage)
	_, err = l.AppendAsLeader(simpleBatch(t, 3, 1), 5, record.FromClient)
	require.NoError(t, err)
	_, err = l.AppendAsLeader(simpleBatch(t, 3, 1), 4, record.FromClient)
	requireCode(t, err, errs.FencedLeaderEpoch)
	big := makeBatch(t, record.CodecNone, 1, []string{string(make([]byte, 9000))}, "x")
	_, err = l.AppendAsLeader(big, 5, record.FromClient)
	requireCode(t, err, errs.MessageTooLarge)
	require.EqualValues(t, 3, l.LogEndOffset(), "nothing partial appended")
}

func TestWaitDurableTimeout(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig(t, nil), Options{})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	res, err := l.AppendAsLeader(simpleBatch(t, 1, 1), 0, record.FromClient)
	require.NoError(t, err)
	err = l.WaitDurable(ctx, res.LastOffset+1)
	if err != nil {
		requireCode(t, err, errs.RequestTimedOut)
	}
	require.NoError(t, l.WaitDurable(context.Background(), res.LastOffset+1))
}

// The append path allocates nothing once warm: validation, offset
// assignment, the write and the index update reuse what exists. (Rolls and
// the heap index's amortised growth allocate; group-commit rounds allocate
// one handle per fsync, shared by every waiter.)
func TestAppendSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	cfg := testConfig(t, map[string]string{"segment.bytes": "1073741824", "sluice.fsync.before.ack": "false"})
	l := openLog(t, t.TempDir(), cfg, Options{})
	defer l.Close()
	batch := simpleBatch(t, 20, 1)
	var leaderErr, followerErr error
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := l.AppendAsLeader(batch, 1, record.FromClient); err != nil {
			leaderErr = err
		}
	})
	require.NoError(t, leaderErr)
	require.Zero(t, allocs, "leader append")

	f := openLog(t, t.TempDir(), cfg, Options{})
	defer f.Close()
	allocs = testing.AllocsPerRun(200, func() {
		record.AssignOffsets(batch, f.LogEndOffset(), 1)
		if _, err := f.AppendAsFollower(batch); err != nil {
			followerErr = err
		}
	})
	require.NoError(t, followerErr)
	require.Zero(t, allocs, "follower append")

	r, err := l.Read(0, l.LogEndOffset(), 1<<20)
	require.NoError(t, err)
	r.Release()
	allocs = testing.AllocsPerRun(200, func() {
		r, err := l.Read(100, l.LogEndOffset(), 64<<10)
		if err != nil {
			leaderErr = err
			return
		}
		r.Release()
	})
	require.NoError(t, leaderErr)
	require.Zero(t, allocs, "read")
}

// testutilEventually polls cond until it holds or 10 seconds pass.
func testutilEventually(t testing.TB, cond func() error) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, cond)
}
