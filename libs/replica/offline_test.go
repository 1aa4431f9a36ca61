package replica

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/libs/testutil"
)

// recordedLogs is a slog handler that keeps what it is given, with the
// attributes of the logger it came through.
type recordedLogs struct {
	mu    *sync.Mutex
	recs  *[]map[string]string
	attrs []slog.Attr
}

func newRecordedLogs() *recordedLogs {
	return &recordedLogs{mu: &sync.Mutex{}, recs: &[]map[string]string{}}
}

func (r *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }

func (r *recordedLogs) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"level": rec.Level.String(), "msg": rec.Message}
	add := func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				m[a.Key+"."+g.Key] = g.Value.String()
			}
			return true
		}
		m[a.Key] = a.Value.String()
		return true
	}
	for _, a := range r.attrs {
		add(a)
	}
	rec.Attrs(add)
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.recs = append(*r.recs, m)
	return nil
}

func (r *recordedLogs) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordedLogs{mu: r.mu, recs: r.recs, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

func (r *recordedLogs) WithGroup(string) slog.Handler { return r }

// find returns the first record with level and msg.
func (r *recordedLogs) find(level, msg string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range *r.recs {
		if m["level"] == level && m["msg"] == msg {
			return m
		}
	}
	return nil
}

type offlineFixture struct {
	m      *Manager
	p      *Partition
	fs     *vfs.FaultFS
	logs   *recordedLogs
	reader *sdkmetric.ManualReader
}

// newOfflineFixture starts node self with replica t-0 (leader 1, replicas
// 1 and 2) on a fault-injecting file system, with a fast reopen backoff.
func newOfflineFixture(t *testing.T, self int32) *offlineFixture {
	t.Helper()
	return newFixtureWithCopies(t, self, nil)
}

// newFixtureWithCopies is newOfflineFixture with the logs reading through
// copies.
func newFixtureWithCopies(t *testing.T, self int32, copies *storage.ReadCopies) *offlineFixture {
	t.Helper()
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{
		Revision: 1, ControllerId: -1,
		Topics: []*controllerv1.TopicMetadata{{Name: "t", TopicId: "id",
			Configs:    map[string]string{"min.insync.replicas": "1", "sluice.fsync.before.ack": "true"},
			Partitions: []*commonv1.PartitionState{{Topic: "t", LeaderId: 1, LeaderEpoch: 3, Replicas: []int32{1, 2}, Isr: []int32{1}}}}},
	}))
	pool := wire.NewPool(wire.ClientOptions{})
	t.Cleanup(func() { _ = pool.Close() })
	f := &offlineFixture{fs: vfs.NewFaultFS(vfs.OS, uint64(self)), logs: newRecordedLogs(), reader: sdkmetric.NewManualReader()}
	f.m = NewManager(Config{Dir: t.TempDir(), LagTimeMax: time.Hour, Storage: storage.Options{FS: f.fs, Copies: copies},
		OfflineRetryMin: 10 * time.Millisecond, OfflineRetryMax: 50 * time.Millisecond}, self, cache, nil, pool, slog.New(f.logs))
	require.NoError(t, f.m.RegisterMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, f.m.Start(ctx))
	t.Cleanup(func() { _ = f.m.Stop(context.Background()) }) // a test may leave the log offline
	var ok bool
	f.p, ok = f.m.Get(TP{"t", 0})
	require.True(t, ok)
	return f
}

// metric returns the value of a gauge or counter (its first data point
// whose attributes include attrs).
func (f *offlineFixture) metric(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	has := func(set attribute.Set) bool {
		for _, kv := range attrs {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, f.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			var points []metricdata.DataPoint[int64]
			switch d := mt.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, dp := range points {
				if has(dp.Attributes) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// produce appends one acks=all record and returns its error.
func (f *offlineFixture) produce(t *testing.T, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.p.Produce(ctx, batchOf(t, n), AcksAll, nil, record.FromClient)
	return err
}

// requireOfflineReported checks the ERROR log and the metrics of a replica
// that went offline.
func (f *offlineFixture) requireOfflineReported(t *testing.T, path string) {
	t.Helper()
	e := f.logs.find("ERROR", "log offline after I/O error")
	require.NotNil(t, e, "an ERROR says the replica went offline")
	require.Equal(t, "t", e["tp.topic"])
	require.Equal(t, "0", e["tp.partition"])
	require.Contains(t, e["path"], path)
	require.Contains(t, e["err"], "no space left on device")
	require.EqualValues(t, 1, f.metric(t, "sluice.replicas.offline.events"))
}

func TestLeaderOfflineOnENOSPCComesBackByItself(t *testing.T) {
	for _, fault := range []vfs.Fault{
		{Op: vfs.OpWrite, Err: vfs.ENOSPC, Partial: true},
		{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.ENOSPC},
	} {
		t.Run(fault.Op.String(), func(t *testing.T) {
			f := newOfflineFixture(t, 1)
			require.NoError(t, f.produce(t, 3), "acknowledged before the disk fills")

			remove := f.fs.Inject(fault)
			err := f.produce(t, 2)
			require.Equal(t, errs.StorageError, errs.CodeOf(err), "%v", err)
			f.requireOfflineReported(t, ".log")
			require.EqualValues(t, 1, f.metric(t, "sluice.replicas.offline"))
			// While the disk stays full, reopening fails and is retried.
			testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error { return want(f.logs.find("WARN", "replica still offline") != nil, "no retry logged") })
			require.Equal(t, errs.StorageError, errs.CodeOf(f.produce(t, 1)))

			remove()
			testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
				return want(f.logs.find("INFO", "replica back online") != nil, "no recovery logged")
			})
			require.NoError(t, f.p.Log().Err())
			back := f.logs.find("INFO", "replica back online")
			require.NotNil(t, back)
			require.Equal(t, "leader", back["role"])
			require.EqualValues(t, 0, f.metric(t, "sluice.replicas.offline"))
			require.EqualValues(t, 1, f.metric(t, "sluice.replicas.recovered.events"))

			require.NoError(t, f.produce(t, 4), "appends work again without a restart")
			res, v, _, err := f.p.ReadForConsumer(0, 1<<20, nil, nil)
			require.NoError(t, err)
			defer res.Release()
			// 3 acknowledged before and 4 after. A write the full disk cut
			// short leaves nothing; a whole append whose fsync failed was
			// not acknowledged but stays, as after a crash that kept it.
			want := int64(7)
			if fault.Op == vfs.OpSync {
				want = 9
			}
			require.Equal(t, want, v.HighWatermark)
			sum, err := record.Validate(res.AppendTo(nil), record.ValidateOptions{Origin: record.FromReplica, MaxBatchBytes: 1 << 20})
			require.NoError(t, err)
			require.Equal(t, want, sum.Records)
		})
	}
}

func TestFollowerOfflineOnENOSPCAppendsAgainByItself(t *testing.T) {
	f := newOfflineFixture(t, 2)
	leader := storage.Options{}
	src, err := storage.Open(t.TempDir(), storage.DefaultConfig(), leader)
	require.NoError(t, err)
	defer src.Close()
	for range 3 {
		_, err := src.AppendAsLeader(batchOf(t, 2), 3, record.FromClient)
		require.NoError(t, err)
	}
	chunk := func(from, to int64) []byte {
		res, err := src.Read(from, to, 1<<20)
		require.NoError(t, err)
		defer res.Release()
		return res.AppendTo(nil)
	}
	ctx := context.Background()
	leo, err := f.p.AppendReplicated(ctx, chunk(0, 2), 2, 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, leo)

	remove := f.fs.Inject(vfs.Fault{Op: vfs.OpWrite, PathSuffix: ".log", Err: vfs.ENOSPC, Partial: true})
	_, err = f.p.AppendReplicated(ctx, chunk(2, 4), 4, 0)
	require.Equal(t, errs.StorageError, errs.CodeOf(err))
	f.requireOfflineReported(t, ".log")
	remove()

	// The log is back before the manager reports it; wait for the report.
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		return want(f.logs.find("INFO", "replica back online") != nil, "no recovery logged")
	})
	require.NoError(t, f.p.Log().Err())
	require.Equal(t, "follower", f.logs.find("INFO", "replica back online")["role"])
	// The fetcher resends from the follower's log end; nothing was lost.
	leo, err = f.p.AppendReplicated(ctx, chunk(f.p.Log().LogEndOffset(), 6), 6, 0)
	require.NoError(t, err)
	require.EqualValues(t, 6, leo)
	require.EqualValues(t, 6, f.p.View().HighWatermark)
}

// want turns a condition into an error for testutil.Eventually.
func want(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

// The read-copy metrics show the budget, the copies held and the reads
// that went through the map because the budget had no room.
func TestReadCopyMetrics(t *testing.T) {
	copies := storage.NewReadCopies(8<<10, &heapPool{})
	f := newFixtureWithCopies(t, 1, copies)
	require.EqualValues(t, 8<<10, f.metric(t, "sluice.storage.read_copies.budget"))
	for range 3 {
		require.NoError(t, f.produce(t, 1000)) // about 9 KB each
	}
	small, _, _, err := f.p.ReadForConsumer(0, 1, nil, nil) // the first batch, copied even past the budget (KIP-74)
	require.NoError(t, err)
	require.NotEmpty(t, small.Chunks)
	require.Positive(t, f.metric(t, "sluice.storage.read_copies.in_use"), "the chunk held is counted")
	big, _, _, err := f.p.ReadForConsumer(0, 1<<20, nil, nil) // 1 MiB and an index interval do not: the map serves it
	require.NoError(t, err)
	require.NotEmpty(t, big.Chunks)
	big.Release()
	small.Release()
	require.Zero(t, f.metric(t, "sluice.storage.read_copies.in_use"))
	require.EqualValues(t, 1, f.metric(t, "sluice.storage.read_copies.fallbacks", attribute.String("reason", "budget")))
	require.Zero(t, f.metric(t, "sluice.storage.read_copies.fallbacks", attribute.String("reason", "read_failed")))
}

// heapPool is a storage.BufferPool that allocates.
type heapPool struct{}

func (heapPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (heapPool) Put(*[]byte)       {}
