package txncoord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
)

// fakeController hands out blocks of 10 ids, failing the first fails calls.
type fakeController struct {
	mu    sync.Mutex
	next  int64
	fails int
	calls atomic.Int32
}

func (f *fakeController) fetch(ctx context.Context) (pidBlock, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return pidBlock{}, errs.New(errs.NotController, "moving")
	}
	b := pidBlock{start: f.next, next: f.next, end: f.next + 10}
	f.next += 10
	return b, nil
}

// Ids are unique across blocks and concurrent callers, and the next block
// is fetched before the current one runs out.
func TestPIDManagerHandsOutEachIDOnce(t *testing.T) {
	fc := &fakeController{fails: 2}
	m := newPIDManager(fc.fetch, log.Discard())
	defer m.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := sync.Map{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				id, err := m.next(ctx)
				if !assertNoErr(t, err) {
					return
				}
				_, dup := seen.LoadOrStore(id, true)
				require.False(t, dup, "id %d handed out twice", id)
			}
		})
	}
	wg.Wait()
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	require.Equal(t, 100, n)

	// Down to the last id of a block, the next one is already there.
	before := fc.calls.Load()
	for range 9 {
		_, err := m.next(ctx)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return fc.calls.Load() > before }, 5*time.Second, 5*time.Millisecond,
		"no prefetch while the block ran low")
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// While the controller cannot hand out ids, next gives up when its context
// ends with the last error seen; once closed, it refuses.
func TestPIDManagerReportsTheControllerError(t *testing.T) {
	m := newPIDManager(func(context.Context) (pidBlock, error) {
		return pidBlock{}, errs.New(errs.UnknownServerError, "the producer id counter is corrupt")
	}, log.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := m.next(ctx)
	require.Equal(t, errs.UnknownServerError, errs.CodeOf(err), "got %v", err)
	m.close()
	_, err = m.next(context.Background())
	require.Equal(t, errs.NodeNotReady, errs.CodeOf(err))
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}

// A prefetched block is ready before the first call.
func TestPIDManagerPrefetches(t *testing.T) {
	fc := &fakeController{}
	m := newPIDManager(fc.fetch, log.Discard())
	defer m.close()
	m.warmUp()
	require.Eventually(t, func() bool { return fc.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	id, err := m.next(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(0), id)
	require.Equal(t, int32(1), fc.calls.Load())
}
