package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"syscall"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Transient reports whether the error that took a log offline may go away by
// itself or by an operator's hand without the data being damaged: a full
// disk or quota (ENOSPC, EDQUOT), an I/O error (EIO), a file system
// remounted read-only (EROFS), or running out of file descriptors. Such a
// log is worth reopening (Reopen) once the cause is gone. Damage found in
// the log's own bytes is not transient.
func Transient(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EROFS, syscall.EMFILE, syscall.ENFILE:
		return true
	}
	return false
}

// Reopen brings an offline log back online without a restart, through the
// same recovery as Open after a crash. It returns nil at once for a healthy
// log, and an error, leaving the log offline, when the disk still fails.
//
// It never appends to a file handle that saw the failure: after a failed
// fsync, Linux may have marked the dirty pages clean without writing them,
// so a later fsync on any handle succeeds without making them durable
// ("fsyncgate", PostgreSQL 2018). Reopen therefore first writes every byte
// after the last successful fsync again, in place and unchanged, through a
// new handle: the pages are dirty again, and the recovery that follows
// fsyncs them. Writing in place needs no new space, and a write that fails
// halfway leaves the same bytes behind. Recovery then runs from the last
// recovery checkpoint exactly as after a crash: it verifies every CRC after
// the checkpoint, cuts a torn tail (an append the full disk cut short, or a
// page the kernel dropped and read back from disk), rebuilds the indexes it
// scanned, and fsyncs everything before it claims it durable. Acknowledged
// records are below the last successful fsync (or in the page cache behind
// a complete CRC) and stay.
//
// Recovery here cuts only a torn append past the bytes the log had
// published: readers may still hold those mapped, and a page cut from under
// a map faults when touched. Damage below that end keeps the log offline
// until a restart. If recovery ends below the log end the replica had
// before it failed, offsets that readers and followers may already have
// seen would be appended again with other records in the same leader
// epoch. Reopen then refuses, and the log stays offline until a restart,
// which fences the node and truncates by leader epoch (KIP-101) instead.
func (l *Log) Reopen() error {
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	cause := l.failed.Load()
	if cause == nil {
		return nil
	}
	if l.isClosed() {
		return errClosed
	}
	l.mu.RLock()
	oldLEO := l.leo
	segs := slices.Clone(l.segs)
	published := make(map[int64]int64, len(segs))
	for _, s := range segs {
		published[s.base] = s.size
	}
	l.mu.RUnlock()

	rewritten, err := l.rewriteUnsynced(segs)
	if err != nil {
		return storageErr("rewriting unsynced log tail", err)
	}
	fresh, err := openDir(l.dir, *l.conf(), l.opts, published)
	if err != nil {
		return err
	}
	fresh.fl.stop() // the log keeps its own flusher
	if fresh.leo < oldLEO {
		fresh.closeSegments()
		e := errs.New(errs.StorageError, "log of %s recovered to offset %d, below the %d it held before it went offline (%v); "+
			"it stays offline so those offsets are not reused in the same leader epoch: restart the node", l.dir, fresh.leo, oldLEO, cause)
		l.failed.Store(e)
		l.log.Error("offline log lost records while offline; restart the node", slog.Int64("recovered_log_end", fresh.leo),
			slog.Int64("log_end", oldLEO), slog.Any("err", cause))
		return e
	}

	l.mu.Lock()
	old := l.segs
	l.segs = fresh.segs
	l.logStart, l.leo = fresh.logStart, fresh.leo
	l.epochs = fresh.epochs
	l.producers = fresh.producers
	l.needSync, l.dirDirty = fresh.needSync, fresh.dirDirty
	l.unflushed, l.oldestDirt = fresh.unflushed, fresh.oldestDirt
	l.cleanedTo, l.logStartDirty, l.horizonDue = fresh.cleanedTo, fresh.logStartDirty, fresh.horizonDue
	l.durable.Store(fresh.durable.Load())
	l.durablePos = fresh.durablePos
	l.ckpt, l.ckptValid, l.ckptAt, l.ckptBytes = fresh.ckpt, fresh.ckptValid, fresh.ckptAt, fresh.ckptBytes
	l.recoveryScanned = fresh.recoveryScanned
	l.failed.Store(nil)
	l.mu.Unlock()
	l.fl.resume()
	for _, s := range old {
		// Readers holding chunks keep their maps; the old handles must
		// never write again.
		_ = s.close() // the new handles are in use; nothing of the old ones matters
	}
	l.log.Info("log back online after recovery", slog.Any("cause", cause), slog.Int64("log_end_offset", l.leo),
		slog.Int64("rewritten_bytes", rewritten), slog.Int64("scanned_bytes", fresh.recoveryScanned))
	return nil
}

// rewriteUnsynced writes the bytes of segs after the last successful fsync
// again, unchanged, through new handles, and returns how many it wrote.
// syncMu and appendMu must be held.
func (l *Log) rewriteUnsynced(segs []*segment) (int64, error) {
	from := l.durablePos
	var total int64
	buf := make([]byte, 1<<20)
	for _, s := range segs {
		if s.base < from.Segment {
			continue
		}
		start := int64(0)
		if s.base == from.Segment {
			start = from.Position
		}
		f, err := l.fs.OpenFile(s.path(logSuffix), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed while offline: recovery sees it gone
		}
		if err != nil {
			return total, err
		}
		size, err := f.Size()
		for pos := start; err == nil && pos < size; {
			n := int(min(int64(len(buf)), size-pos))
			var got int
			got, err = f.ReadAt(buf[:n], pos)
			if got > 0 {
				var wn int
				wn, err = f.WriteAt(buf[:got], pos)
				pos += int64(wn)
				total += int64(wn)
			}
			if errors.Is(err, io.EOF) {
				err = nil
				break
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return total, fmt.Errorf("rewriting %s: %w", s.path(logSuffix), err)
		}
	}
	return total, nil
}
