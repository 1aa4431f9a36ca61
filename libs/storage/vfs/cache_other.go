//go:build !linux

package vfs

// DropCache does nothing where the platform has no fadvise.
func (f osFile) DropCache(off, n int64) error { return nil }

// DropCache does nothing where the platform has no madvise.
func (m osMapping) DropCache(off, n int64) error { return nil }

// StartWriteback does nothing where the platform has no sync_file_range.
func (f osFile) StartWriteback(off, n int64) error { return nil }

// AwaitWriteback does nothing where the platform has no sync_file_range.
func (f osFile) AwaitWriteback(off, n int64) error { return nil }
