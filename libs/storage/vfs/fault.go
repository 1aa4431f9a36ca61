package vfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Op names a file system operation, for fault injection.
type Op int

// The operations a Fault can target.
const (
	OpOpen Op = iota
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpMap
	OpRename
	OpRemove
	OpSyncDir
	OpMkdir
)

var opNames = [...]string{"open", "read", "write", "sync", "truncate", "map", "rename", "remove", "syncdir", "mkdir"}

// String returns the operation's name.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Fault makes matching operations fail.
type Fault struct {
	// Op is the operation to fail.
	Op Op
	// PathSuffix restricts the fault to paths ending with it ("" matches
	// every path), such as ".log" or "leader-epoch-checkpoint".
	PathSuffix string
	// PathContains restricts the fault to paths containing it ("" matches
	// every path), such as a replica's directory name.
	PathContains string
	// Err is the error returned, such as syscall.EIO or syscall.ENOSPC;
	// nil makes a fault that only adds Latency.
	Err error
	// Latency delays each matching operation (before it fails with Err,
	// or runs), as a slow or overloaded device does.
	Latency time.Duration
	// After lets this many matching operations succeed first.
	After int
	// Times is how many operations fail; 0 means every one from then on.
	Times int
	// Partial makes a failing write store the first half of its bytes
	// before failing, as a write that runs out of space does.
	Partial bool
}

// ErrCrashed is returned by every handle opened before a simulated crash.
var ErrCrashed = errors.New("vfs: file handle from before a simulated crash")

// CrashOptions says what a simulated crash does to bytes written but not
// fsynced.
type CrashOptions struct {
	// KeepSomeUnsynced keeps a random prefix of each file's unsynced bytes
	// instead of dropping them all, as a torn write does.
	KeepSomeUnsynced bool
	// GarbleKept overwrites the unsynced bytes that are kept with random
	// bytes, as a device that loses power mid-write may leave them.
	GarbleKept bool
}

// FaultFS wraps an FS (normally OS on a temporary directory), tracks which
// bytes of each file are durable, and injects faults. Its model: data
// written with WriteAt is durable only after Sync of that file (bytes
// written over durable ones read as zeros after a crash until then, which
// is exactly right for blocks pre-written with zeros); size
// reductions (Truncate), renames, creations and removals are durable at
// once. A crash (Crash) cuts every file back to its durable size (or a
// random point beyond it) and kills every open handle, so the code under
// test must reopen everything, as after a reboot. A failed Sync models
// Linux after a writeback error: the bytes it should have made durable stay
// readable but are never written by a later Sync, so a crash turns them to
// zeros unless they were written again in between.
//
// Files that exist before FaultFS first sees them count as durable.
type FaultFS struct {
	inner FS

	mu     sync.Mutex
	files  map[string]*fileState
	faults []*activeFault
	gen    int
	rng    *rand.Rand
	counts map[Op]int
}

type fileState struct {
	path   string
	synced int64
	// lost are byte ranges a failed fsync dropped: as Linux does, the
	// pages stay readable and count as clean, so a later successful fsync
	// does not write them, and a crash loses them unless they were written
	// again since ("fsyncgate").
	lost []span
	// over are ranges written over durable bytes since the last sync
	// began, oldest first: a crash turns them to zeros (or, with
	// KeepSomeUnsynced, keeps some).
	over []span
}

// span is a byte range [from, to).
type span struct{ from, to int64 }

// cut removes [from, to) from the lost ranges. f.mu must be held.
func (st *fileState) cut(from, to int64) {
	out := st.lost[:0]
	for _, r := range st.lost {
		if r.to <= from || r.from >= to {
			out = append(out, r)
			continue
		}
		if r.from < from {
			out = append(out, span{r.from, from})
		}
		if r.to > to {
			out = append(out, span{to, r.to})
		}
	}
	st.lost = out
}

type activeFault struct {
	Fault
	seen, failed int
}

// NewFaultFS returns a FaultFS over inner whose random choices (which
// unsynced prefix survives a crash, garbage bytes) come from seed.
func NewFaultFS(inner FS, seed uint64) *FaultFS {
	return &FaultFS{
		inner:  inner,
		files:  make(map[string]*fileState),
		rng:    rand.New(rand.NewPCG(seed, seed^0x5eed)),
		counts: make(map[Op]int),
	}
}

// Inject adds a fault and returns a function that removes it.
func (f *FaultFS) Inject(fault Fault) (remove func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	af := &activeFault{Fault: fault}
	f.faults = append(f.faults, af)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.faults {
			if x == af {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
				return
			}
		}
	}
}

// ClearFaults removes every injected fault.
func (f *FaultFS) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Count returns how many operations of a kind were attempted.
func (f *FaultFS) Count(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

// check counts an operation and returns the injected fault, if any.
// f.mu must be held.
func (f *FaultFS) check(op Op, path string) *activeFault {
	f.counts[op]++
	for _, af := range f.faults {
		if af.Op != op || !strings.HasSuffix(path, af.PathSuffix) || !strings.Contains(path, af.PathContains) {
			continue
		}
		af.seen++
		if af.seen <= af.After {
			continue
		}
		if af.Times > 0 && af.failed >= af.Times {
			continue
		}
		af.failed++
		return af
	}
	return nil
}

func (f *FaultFS) fail(op Op, path string) error {
	f.mu.Lock()
	af := f.check(op, path)
	f.mu.Unlock()
	return af.apply(op, path)
}

// apply waits the fault's latency (outside f.mu) and returns its error, if
// it has one. A nil fault does nothing.
func (af *activeFault) apply(op Op, path string) error {
	if af == nil {
		return nil
	}
	if af.Latency > 0 {
		time.Sleep(af.Latency)
	}
	if af.Err == nil {
		return nil
	}
	return &os.PathError{Op: op.String(), Path: path, Err: af.Err}
}

// state returns the tracked state of path, starting to track it with its
// current size as durable. f.mu must be held.
func (f *FaultFS) state(path string) *fileState {
	path = filepath.Clean(path)
	st, ok := f.files[path]
	if !ok {
		st = &fileState{path: path}
		if fi, err := f.inner.Stat(path); err == nil {
			st.synced = fi.Size()
		}
		f.files[path] = st
	}
	return st
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.fail(OpOpen, name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, statErr := f.inner.Stat(name)
	existed := statErr == nil
	inner, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	st := f.state(name)
	if !existed {
		st.synced = 0
	}
	if flag&os.O_TRUNC != 0 {
		st.synced = 0
	}
	return &faultFile{fs: f, inner: inner, st: st, gen: f.gen}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.fail(OpRemove, name); err != nil {
		return err
	}
	if err := f.inner.Remove(name); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.files, filepath.Clean(name))
	f.mu.Unlock()
	return nil
}

// Rename implements FS.
func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.fail(OpRename, newpath); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.state(oldpath)
	if err := f.inner.Rename(oldpath, newpath); err != nil {
		return err
	}
	delete(f.files, st.path)
	st.path = filepath.Clean(newpath)
	f.files[st.path] = st
	return nil
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.fail(OpMkdir, dir); err != nil {
		return err
	}
	return f.inner.MkdirAll(dir, perm)
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(dir string) ([]string, error) {
	if err := f.fail(OpRead, dir); err != nil {
		return nil, err
	}
	return f.inner.ReadDir(dir)
}

// Stat implements FS.
func (f *FaultFS) Stat(name string) (os.FileInfo, error) { return f.inner.Stat(name) }

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	if err := f.fail(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

// Crash simulates a power loss: every file is cut back to its durable size
// (or, with KeepSomeUnsynced, to a random point of its unsynced tail), and
// every handle opened so far fails from now on with ErrCrashed. Memory maps
// stay valid to unmap but must not be read: their pages past the new end of
// a file fault.
func (f *FaultFS) Crash(opts CrashOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	var errs []error
	for path, st := range f.files {
		fi, err := f.inner.Stat(path)
		if err != nil {
			delete(f.files, path)
			continue
		}
		size := fi.Size()
		if err := f.dropLost(st, min(size, st.synced)); err != nil {
			errs = append(errs, err)
		}
		if err := f.dropOverwritten(st, min(size, st.synced), opts.KeepSomeUnsynced); err != nil {
			errs = append(errs, err)
		}
		if size <= st.synced {
			st.synced = size
			continue
		}
		keep := st.synced
		if opts.KeepSomeUnsynced {
			keep += f.rng.Int64N(size - st.synced + 1)
		}
		h, err := f.inner.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if opts.GarbleKept && keep > st.synced {
			junk := make([]byte, keep-st.synced)
			for i := range junk {
				junk[i] = byte(f.rng.Uint32())
			}
			if _, err := h.WriteAt(junk, st.synced); err != nil {
				errs = append(errs, err)
			}
		}
		if err := h.Truncate(keep); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, h.Close())
		st.synced = keep
	}
	return errors.Join(errs...)
}

// dropLost overwrites, below end, the ranges a failed fsync dropped with
// zeros, as what the disk holds there was never written. f.mu must be held.
func (f *FaultFS) dropLost(st *fileState, end int64) error {
	lost := st.lost
	st.lost = nil
	return f.zero(st.path, lost, end)
}

// dropOverwritten zeros, below end, the ranges written over durable bytes
// and not synced since, keeping each with even odds when keepSome. f.mu
// must be held.
func (f *FaultFS) dropOverwritten(st *fileState, end int64, keepSome bool) error {
	var drop []span
	for _, r := range st.over {
		if !keepSome || f.rng.IntN(2) == 0 {
			drop = append(drop, r)
		}
	}
	st.over = nil
	return f.zero(st.path, drop, end)
}

// zero overwrites the parts of spans below end with zeros.
func (f *FaultFS) zero(path string, spans []span, end int64) error {
	if len(spans) == 0 {
		return nil
	}
	h, err := f.inner.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range spans {
		if to := min(r.to, end); to > r.from {
			_, err := h.WriteAt(make([]byte, to-r.from), r.from)
			errs = append(errs, err)
		}
	}
	errs = append(errs, h.Close())
	return errors.Join(errs...)
}

// FlipBit flips one bit of a file in place, as bit rot does. The change
// counts as durable.
func (f *FaultFS) FlipBit(name string, offset int64, bit uint) error {
	h, err := f.inner.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer h.Close()
	var b [1]byte
	if _, err := h.ReadAt(b[:], offset); err != nil {
		return err
	}
	b[0] ^= 1 << (bit % 8)
	if _, err := h.WriteAt(b[:], offset); err != nil {
		return err
	}
	return h.Sync()
}

// TruncateFile cuts a file to size, as a lost tail does. The change counts
// as durable.
func (f *FaultFS) TruncateFile(name string, size int64) error {
	h, err := f.inner.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.Truncate(size); err != nil {
		return err
	}
	f.mu.Lock()
	st := f.state(name)
	st.synced = min(st.synced, size)
	f.mu.Unlock()
	return h.Sync()
}

// DurableSize returns how many bytes of a file would survive a crash now.
func (f *FaultFS) DurableSize(name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state(name).synced
}

type faultFile struct {
	fs    *FaultFS
	inner File
	st    *fileState
	gen   int
}

// begin checks that the handle is from the current boot and applies faults.
func (h *faultFile) begin(op Op) (*activeFault, error) {
	h.fs.mu.Lock()
	if h.gen != h.fs.gen {
		h.fs.mu.Unlock()
		return nil, &os.PathError{Op: op.String(), Path: h.st.path, Err: ErrCrashed}
	}
	af := h.fs.check(op, h.st.path)
	path := h.st.path
	h.fs.mu.Unlock()
	if err := af.apply(op, path); err != nil {
		return af, err
	}
	return nil, nil
}

func (h *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if _, err := h.begin(OpRead); err != nil {
		return 0, err
	}
	return h.inner.ReadAt(p, off)
}

func (h *faultFile) WriteAt(p []byte, off int64) (int, error) {
	af, err := h.begin(OpWrite)
	if err != nil {
		if af != nil && af.Partial && len(p) > 1 {
			n, _ := h.inner.WriteAt(p[:len(p)/2], off) // the injected error is the one to report
			h.rewritten(off, n)
			return n, err
		}
		return 0, err
	}
	n, err := h.inner.WriteAt(p, off)
	h.rewritten(off, n)
	return n, err
}

// rewritten notes that n bytes at off are dirty again.
func (h *faultFile) rewritten(off int64, n int) {
	if n <= 0 {
		return
	}
	h.fs.mu.Lock()
	if h.gen == h.fs.gen {
		if len(h.st.lost) > 0 {
			h.st.cut(off, off+int64(n))
		}
		if off < h.st.synced {
			h.st.over = append(h.st.over, span{off, min(off+int64(n), h.st.synced)})
		}
	}
	h.fs.mu.Unlock()
}

func (h *faultFile) Sync() error {
	if _, err := h.begin(OpSync); err != nil {
		// The dirty pages are dropped: they stay readable, but no later
		// fsync writes them.
		if size, serr := h.inner.Size(); serr == nil {
			h.fs.mu.Lock()
			if h.gen == h.fs.gen && size > h.st.synced {
				h.st.lost = append(h.st.lost, span{h.st.synced, size})
			}
			if h.gen == h.fs.gen {
				h.st.lost = append(h.st.lost, h.st.over...)
				h.st.over = nil
			}
			h.fs.mu.Unlock()
		}
		return err
	}
	// Only bytes written before the sync started are covered by it.
	size, err := h.inner.Size()
	if err != nil {
		return err
	}
	h.fs.mu.Lock()
	covered := len(h.st.over)
	h.fs.mu.Unlock()
	if err := h.inner.Sync(); err != nil {
		return err
	}
	h.fs.mu.Lock()
	if h.gen == h.fs.gen {
		if cur, err := h.inner.Size(); err == nil {
			size = min(size, cur)
		}
		h.st.synced = max(h.st.synced, size)
		h.st.over = h.st.over[min(covered, len(h.st.over)):]
	}
	h.fs.mu.Unlock()
	return nil
}

func (h *faultFile) Truncate(size int64) error {
	if _, err := h.begin(OpTruncate); err != nil {
		return err
	}
	if err := h.inner.Truncate(size); err != nil {
		return err
	}
	h.fs.mu.Lock()
	h.st.synced = min(h.st.synced, size)
	h.st.cut(size, 1<<62)
	for i := range h.st.over {
		h.st.over[i].to = min(h.st.over[i].to, size) // emptied ranges are skipped
	}
	h.fs.mu.Unlock()
	return nil
}

func (h *faultFile) Size() (int64, error) {
	if _, err := h.begin(OpRead); err != nil {
		return 0, err
	}
	return h.inner.Size()
}

func (h *faultFile) Name() string { return h.inner.Name() }

func (h *faultFile) Map(length int) (Mapping, error) {
	if _, err := h.begin(OpMap); err != nil {
		return nil, err
	}
	return h.inner.Map(length)
}

// Close always closes the underlying file, even after a crash, so tests do
// not leak descriptors.
func (h *faultFile) Close() error { return h.inner.Close() }

// Errors commonly injected.
var (
	EIO    error = syscall.EIO
	ENOSPC error = syscall.ENOSPC
)
