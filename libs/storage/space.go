package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// SpaceGuard keeps a reserve of free space on the file system of a node's
// data directory. Appends that would leave less than the reserve free are
// refused with a retriable KAFKA_STORAGE_ERROR instead of being written, so
// the data logs never run the disk dry: what stays free is for the metadata
// quorum's WAL when it shares the disk, for checkpoints, index files and
// DeleteRecords, which must still work to free space. Without it a full disk
// fails a write halfway and takes the replica offline (Kafka then needs a
// restart; Sluice reopens it once space is back, see Log.Reopen).
//
// One guard is shared by every log of a node. It reads the free space with
// statfs at most every RefreshInterval and in between subtracts what the
// logs appended, so the append path pays for a system call only rarely, and
// reads it again at once when its estimate falls below the reserve.
type SpaceGuard struct {
	dir     string
	reserve int64
	free    func(string) (int64, error)
	refresh time.Duration

	mu       sync.Mutex
	measured int64 // free bytes at the last statfs
	at       time.Time
	since    int64 // bytes appended since then
	err      error // the last statfs error
}

// SpaceGuardOptions configure a SpaceGuard.
type SpaceGuardOptions struct {
	// Dir is a directory on the file system to watch.
	Dir string
	// ReserveBytes is the free space appends never eat into; 0 or less
	// disables the guard.
	ReserveBytes int64
	// FreeBytes reports the free bytes of Dir's file system; nil means
	// vfs.FreeBytes. Tests inject a fake disk through it.
	FreeBytes func(dir string) (int64, error)
	// RefreshInterval bounds how stale the measured free space may get;
	// zero means 100 ms.
	RefreshInterval time.Duration
}

// NewSpaceGuard returns a guard, or nil (which admits everything) when the
// reserve is not positive.
func NewSpaceGuard(o SpaceGuardOptions) *SpaceGuard {
	if o.ReserveBytes <= 0 {
		return nil
	}
	if o.FreeBytes == nil {
		o.FreeBytes = vfs.FreeBytes
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 100 * time.Millisecond
	}
	return &SpaceGuard{dir: o.Dir, reserve: o.ReserveBytes, free: o.FreeBytes, refresh: o.RefreshInterval}
}

// Reserve returns the reserve in bytes (0 for a nil guard).
func (g *SpaceGuard) Reserve() int64 {
	if g == nil {
		return 0
	}
	return g.reserve
}

// FreeBytes returns the free space as last measured (again, if that was
// more than the refresh interval ago), less what was appended since, or the
// error of the last measurement.
func (g *SpaceGuard) FreeBytes() (int64, error) {
	if g == nil {
		return 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Sub(g.at) >= g.refresh {
		g.measureLocked(now)
	}
	return g.measured - g.since, g.err
}

// measureLocked reads the free space. g.mu must be held.
func (g *SpaceGuard) measureLocked(now time.Time) {
	free, err := g.free(g.dir)
	g.at, g.err = now, err
	if err == nil {
		g.measured, g.since = free, 0
	}
}

// Admit accounts for an append of n bytes, or refuses it with a retriable
// StorageError when it would leave less than the reserve free. A nil guard
// admits everything.
func (g *SpaceGuard) Admit(n int64) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.at.IsZero() || now.Sub(g.at) >= g.refresh || g.measured-g.since-n < g.reserve {
		g.measureLocked(now)
	}
	if g.err != nil {
		// Not knowing the free space is no reason to stop writing: the
		// write itself reports a full disk.
		g.since += n
		return nil
	}
	if free := g.measured - g.since; free-n < g.reserve {
		return errs.New(errs.StorageError,
			"not appending %d bytes: the file system of %s has %s free, below the reserve of %s (storage.disk-reserve-bytes); "+
				"appends resume by themselves once space is freed (delete records, lower retention, or grow the disk)",
			n, g.dir, fmtBytes(free), fmtBytes(g.reserve))
	}
	g.since += n
	return nil
}

// fmtBytes renders a byte count for people.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
