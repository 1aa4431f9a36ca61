package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// Options are the process-level settings of a log; topic-level settings are
// in Config.
type Options struct {
	// FS is the file system; nil means vfs.OS.
	FS vfs.FS
	// Clock is the time source; nil means SystemClock.
	Clock Clock
	// Logger receives recovery and failure reports; nil discards them.
	Logger *slog.Logger
	// CheckpointInterval is how often, at most, the background flusher
	// persists the recovery point after a flush. Recovery after a crash
	// scans what was appended since the last recovery point, so this bounds
	// recovery time together with the write rate. Zero means 10 seconds.
	CheckpointInterval time.Duration
	// CheckpointBytes persists the recovery point whenever this many bytes
	// were flushed since the last one, whatever the interval. Zero means
	// 256 MiB.
	CheckpointBytes int64
	// DecompressLimit caps the decompressed size of one batch when
	// compaction or a timestamp lookup decodes records; 0 means
	// record.DefaultDecompressLimit.
	DecompressLimit int
	// CompactionMaxKeys bounds the memory of one compaction pass: the pass
	// covers as many whole segments as fit this many distinct keys. Zero
	// means 4 million (about 200 MiB).
	CompactionMaxKeys int
	// Space, shared by every log of a node, refuses appends that would eat
	// into the free-space reserve of the data directory's file system; nil
	// admits every append.
	Space *SpaceGuard
	// PageCache, shared by every log of a node, bounds how much of their
	// data stays in the kernel's page cache; nil leaves it to the kernel.
	PageCache *PageCache
	// Copies, shared by every log of a node, makes reads copy batches out
	// of the page cache with positional reads into pooled buffers instead
	// of handing out slices of the segments' maps; nil reads through the
	// maps.
	Copies *ReadCopies
	// WriteBehindBytes, for a log that does not fsync before acknowledging,
	// starts the writeback of every this many appended bytes at once
	// (sync_file_range) and waits for the range before it, so the log
	// keeps about twice this much dirty data instead of gigabytes. That
	// dirt is what another log's fsync waits for on ext4 (see
	// vfs.Writebacker): a transaction coordinator's state write stalled for
	// up to 1.6 s behind a busy partition. The writeback runs in the log's
	// flusher, never in an append. 0 leaves writeback to the kernel.
	WriteBehindBytes int64
	// OnOffline, if set, is called once each time the log goes offline,
	// with the error that took it there, after the failure is logged.
	OnOffline func(cause error)
	// ProducerIDExpiration is producer.id.expiration.ms: how long a
	// producer id with no open transaction is remembered after its latest
	// batch. Zero means DefaultProducerIDExpiration.
	ProducerIDExpiration time.Duration
}

func (o *Options) withDefaults() Options {
	out := *o
	if out.FS == nil {
		out.FS = vfs.OS
	}
	if out.Clock == nil {
		out.Clock = SystemClock
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if out.CheckpointInterval <= 0 {
		out.CheckpointInterval = 10 * time.Second
	}
	if out.CheckpointBytes <= 0 {
		out.CheckpointBytes = 256 << 20
	}
	if out.CompactionMaxKeys <= 0 {
		out.CompactionMaxKeys = 4 << 20
	}
	return out
}

// Log is the on-disk log of one partition replica: a directory of segments
// with their indexes, a leader-epoch cache, and checkpoints of the recovery
// point and log start offset.
//
// Lock order (acquire left to right, never the reverse):
//
//	syncMu -> appendMu -> mu -> segment.mapMu
//	flusher.mu is a leaf, taken without holding any other lock.
//
// syncMu serialises fsync rounds, checkpoints and structural changes
// (truncation, retention, compaction swaps, close), so a segment's files are
// never closed under a running fsync. appendMu serialises appends, which
// write the file outside mu so readers are only blocked while an append
// publishes its new end. mu guards the segment list and every offset.
// Appends never take syncMu, so they never wait for an fsync.
type Log struct {
	dir   string
	fs    vfs.FS
	clock Clock
	log   *slog.Logger
	opts  Options

	syncMu   sync.Mutex
	appendMu sync.Mutex
	mu       sync.RWMutex

	// Guarded by mu (and written under appendMu too where appends change
	// them).
	cfgp       atomic.Pointer[Config]
	segs       []*segment // by base offset; the last is active
	logStart   int64
	leo        int64
	epochs     epochCache
	needSync   []*segment // sealed since the last flush
	dirDirty   bool       // segment files created or removed since the last flush
	unflushed  int64      // offsets appended since the last flush
	oldestDirt time.Time  // when the oldest unflushed append happened
	closed     bool
	cleanedTo  int64 // compaction has cleaned every offset below this
	// logStartDirty says the log start advanced with deleted segments and is
	// not yet persisted (DeleteRecordsBefore persists at once).
	logStartDirty bool
	horizonDue    int64 // earliest tombstone delete horizon seen, or maxInt64
	// producers is the producer state (idempotence, open and aborted
	// transactions); changed under appendMu and mu.
	producers *producerState
	// verified holds, per producer id, the check of its transaction on this
	// partition with the coordinator (KIP-890): started by BeginTxnCheck,
	// confirmed by VerifiedTxn, withdrawn by a marker for the producer;
	// leader only, guarded by appendMu.
	verified map[int64]*TxnCheck

	// durable is the offset below which every batch is on stable storage.
	durable atomic.Int64
	// failed is set once, when the log goes offline after an I/O error.
	failed atomic.Pointer[errs.Error]

	fl flusher

	// Recovery-point bookkeeping, guarded by syncMu.
	ckpt      recoveryPoint // the persisted recovery point
	ckptValid bool          // whether ckpt was read or written
	ckptAt    time.Time
	ckptBytes int64 // log bytes below ckpt when it was written

	// cacheSeg and cachePos are the page-cache drop point
	// (Options.PageCache): the bytes before position cachePos of segment
	// cacheSeg, and of the segments before it, were given back to the
	// kernel. Written under syncMu and mu (PageCache.Trim moves it forward,
	// truncation back), read under either.
	cacheSeg, cachePos int64

	compactMu sync.Mutex // one compaction at a time
	// unreadableCount counts the batches compaction met and could not decode
	// (kept as they are); see UnreadableBatches.
	unreadableCount atomic.Int64

	// recoveryScanned is how many bytes Open verified after an unclean
	// shutdown (0 after a clean one).
	recoveryScanned int64

	// durablePos is where the last successful fsync of the active segment
	// ended (guarded by syncMu): Reopen rewrites the bytes after it.
	durablePos recoveryPoint
	// published is set only in the scratch log Reopen opens: each
	// segment's size in the log being reopened, bytes readers may hold
	// mapped, which recovery must not cut (see checkCut). That log's
	// failures are Reopen's result, not a new outage to report.
	published map[int64]int64
}

// reopening reports whether this is the scratch log of Reopen.
func (l *Log) reopening() bool { return l.published != nil }

// RecoveryScannedBytes returns how many bytes of log Open had to verify
// because the previous shutdown was not clean: the tail after the recovery
// point, not the whole log.
func (l *Log) RecoveryScannedBytes() int64 { return l.recoveryScanned }

// Open opens or creates the log in dir. After a crash it recovers: it scans
// the batches written since the last recovery point, verifies every CRC,
// truncates a torn or corrupt tail, and rebuilds the indexes of what it
// scanned; after a clean shutdown it skips the scan.
func Open(dir string, cfg Config, opts Options) (*Log, error) {
	return openDir(dir, cfg, opts, nil)
}

// openDir is Open; for the scratch log of Reopen, published is the size of
// each segment of the log being reopened (nil for Open).
func openDir(dir string, cfg Config, opts Options, published map[int64]int64) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, errs.New(errs.InvalidConfig, "%v", err)
	}
	o := opts.withDefaults()
	l := &Log{dir: dir, fs: o.FS, clock: o.Clock, log: o.Logger.With("dir", dir), opts: o, horizonDue: maxInt64, published: published}
	l.cfgp.Store(&cfg)
	if err := l.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, storageErr("creating log directory", err)
	}
	err := l.load()
	if err == nil {
		l.producers, err = l.loadProducers()
	}
	if err != nil {
		l.closeSegments()
		var se *errs.Error
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, storageErr("opening log "+dir, err)
	}
	active := l.activeSegment()
	l.durablePos = recoveryPoint{Offset: l.leo, Segment: active.base, Position: active.size}
	l.fl.start(l)
	if !l.reopening() {
		l.opts.PageCache.register(l)
	}
	return l, nil
}

const maxInt64 = 1<<63 - 1

// storageErr wraps an I/O error as KAFKA_STORAGE_ERROR.
func storageErr(what string, err error) *errs.Error {
	return errs.New(errs.StorageError, "%s: %w", what, err)
}

// fail takes the log offline: every later call fails with StorageError.
// Retrying after a failed fsync is unsafe: Linux may have dropped the dirty
// pages and cleared the error, so a retry that succeeds proves nothing (the
// 2018 "fsyncgate" lesson from PostgreSQL). Only Reopen brings the log back,
// through new handles and crash recovery.
func (l *Log) fail(what string, err error) *errs.Error {
	e := storageErr(what, err)
	if l.failed.CompareAndSwap(nil, e) && !l.reopening() {
		path := l.dir
		var pe *os.PathError
		if errors.As(err, &pe) {
			path = pe.Path
		}
		l.log.Error("log offline after I/O error", slog.String("op", what), slog.String("path", path), slog.Any("err", err))
		if l.opts.OnOffline != nil {
			l.opts.OnOffline(e)
		}
	}
	return l.failed.Load()
}

// Err returns the error that took the log offline, or nil while it is
// healthy.
func (l *Log) Err() error {
	if e := l.failed.Load(); e != nil {
		return e
	}
	return nil
}

// check returns an error if the log is offline or closed.
func (l *Log) check() error {
	if e := l.failed.Load(); e != nil {
		return e
	}
	return nil
}

var errClosed = errs.New(errs.StorageError, "log is closed")

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Config returns the log's current configuration.
func (l *Log) Config() Config { return *l.cfgp.Load() }

// conf returns the current configuration without copying it.
func (l *Log) conf() *Config { return l.cfgp.Load() }

// SetConfig changes the configuration (a topic config update). New values
// apply to the next append, roll, flush or cleaning.
func (l *Log) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return errs.New(errs.InvalidConfig, "%v", err)
	}
	l.cfgp.Store(&cfg)
	l.fl.kick() // flush.ms may have changed
	return nil
}

// LogStartOffset returns the first offset the log holds (or would hold).
func (l *Log) LogStartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.logStart
}

// LogEndOffset returns the offset the next appended record gets.
func (l *Log) LogEndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.leo
}

// DurableOffset returns the offset below which every record is on stable
// storage.
func (l *Log) DurableOffset() int64 { return l.durable.Load() }

// Size returns the total size of the segments in bytes.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// NumSegments returns the number of segments.
func (l *Log) NumSegments() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}

// LatestEpoch returns the newest leader epoch in the epoch cache.
func (l *Log) LatestEpoch() (int32, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, ok := l.epochs.latest()
	return e.Epoch, ok
}

// Epochs returns a copy of the leader-epoch cache.
func (l *Log) Epochs() []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return append([]EpochEntry(nil), l.epochs.entries...)
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch (KIP-101, KIP-279): the
// largest epoch at most epoch that this log has, and the offset where it
// ends here (the next epoch's start, or the log end offset for the latest).
// A follower truncates to the smaller of the leader's answer and its own log
// end, then fetches from there. Unknown epochs answer (UndefinedEpoch,
// UndefinedOffset).
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.epochs.endOffsetFor(epoch, l.leo)
}

// Close flushes everything, persists the recovery point and the epoch cache,
// and leaves a clean-shutdown marker so the next Open skips recovery. Chunks
// still held by readers stay valid until released. Close on an offline log
// closes its files without the marker.
func (l *Log) Close() error {
	// Before syncMu: the budget's loop may be flushing this log, and
	// unregistering the last log waits for the loop to end.
	l.opts.PageCache.unregister(l)
	l.fl.stop()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.appendMu.Lock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.appendMu.Unlock()
		return nil
	}
	// From here appends and reads fail; the flush below covers everything
	// appended before.
	l.closed = true
	l.mu.Unlock()
	l.appendMu.Unlock()

	var err error
	if l.check() == nil {
		err = l.cleanShutdown()
	}
	if err == nil {
		err = l.check()
	}
	// Waiters of a round the stopped flusher never ran are covered by the
	// final flush (or learn why it failed).
	l.fl.finish(l.fl.take(), err)
	l.fl.failWaiters(errClosed)
	l.closeSegments()
	return err
}

// cleanShutdown runs under syncMu, once the log is marked closed.
func (l *Log) cleanShutdown() error {
	l.appendMu.Lock()
	// The next Open starts from this snapshot and replays nothing.
	l.snapshotProducers()
	active := l.segs[len(l.segs)-1]
	l.mu.Lock()
	active.addTimeEntry()
	l.mu.Unlock()
	err := active.offIdx.persist()
	if err == nil {
		err = active.timeIdx.persist()
	}
	l.appendMu.Unlock()
	if err != nil {
		return l.fail("writing index", err)
	}
	if _, err := l.flushLocked(); err != nil {
		return err
	}
	if err := l.writeRecoveryCheckpointLocked(l.leo, active.base, active.size); err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, cleanShutdownFile), nil); err != nil {
		return l.fail("writing clean shutdown marker", err)
	}
	return nil
}

func (l *Log) closeSegments() {
	for _, s := range l.segs {
		_ = s.close() // closing after the data is flushed (or the log failed): nothing to report
	}
	l.segs = nil
}

// activeSegment returns the last segment. mu or appendMu must be held.
func (l *Log) activeSegment() *segment { return l.segs[len(l.segs)-1] }

// segmentFor returns the index of the segment that holds offset (the last
// whose base is at most offset), or -1. mu must be held.
func (l *Log) segmentFor(offset int64) int {
	lo, hi := 0, len(l.segs)
	for lo < hi {
		mid := (lo + hi) / 2
		if l.segs[mid].base <= offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}

// mapHint is the length to map an active segment with: segment.bytes,
// rounded to the page size.
func (l *Log) mapHint() int {
	n := l.conf().SegmentBytes + int64(l.conf().MaxMessageBytes)
	const page = 4096
	n = (n + page - 1) / page * page
	if n > 1<<31 {
		n = 1 << 31
	}
	return int(n)
}

// writeLogStart persists the log start offset.
func (l *Log) writeLogStart(offset int64) error {
	data := []byte("0\n" + strconv.FormatInt(offset, 10) + "\n")
	return vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, logStartCheckpointFile), data)
}

func (l *Log) writeCleanerCheckpoint(offset int64) error {
	data := []byte("0\n" + strconv.FormatInt(offset, 10) + "\n")
	return vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, cleanerCheckpointFile), data)
}

// readOffsetFile reads a "0\n<offset>\n" checkpoint; ok is false if it is
// missing or unreadable.
func readOffsetFile(fs vfs.FS, path string) (int64, bool) {
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		return 0, false
	}
	lines := strings.Fields(string(data))
	if len(lines) != 2 || lines[0] != "0" {
		return 0, false
	}
	v, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// recoveryPoint is the content of the recovery checkpoint: every batch
// below Offset, which ends at byte Position of segment Segment, is durable,
// along with that segment's index entries for positions before Position and
// every earlier segment with its indexes.
type recoveryPoint struct {
	Offset, Segment, Position int64
}

func (p recoveryPoint) encode() []byte {
	return []byte(fmt.Sprintf("1\n%d %d %d\n", p.Offset, p.Segment, p.Position))
}

func decodeRecoveryPoint(data []byte) (recoveryPoint, bool) {
	f := strings.Fields(string(data))
	if len(f) != 4 || f[0] != "1" {
		return recoveryPoint{}, false
	}
	var p recoveryPoint
	var err [3]error
	p.Offset, err[0] = strconv.ParseInt(f[1], 10, 64)
	p.Segment, err[1] = strconv.ParseInt(f[2], 10, 64)
	p.Position, err[2] = strconv.ParseInt(f[3], 10, 64)
	if errors.Join(err[:]...) != nil || p.Offset < p.Segment || p.Segment < 0 || p.Position < 0 {
		return recoveryPoint{}, false
	}
	return p, true
}

// removeIfExists removes a file, ignoring its absence.
func removeIfExists(fs vfs.FS, path string) error {
	if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// validateOpts are the checks for batches from the log's own files.
var replicaChecks = record.ValidateOptions{MaxBatchBytes: 1<<31 - 1, Origin: record.FromReplica}
