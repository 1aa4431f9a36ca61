//go:build !linux

package vfs

// DropCache does nothing where the platform has no fadvise.
func (f osFile) DropCache(off, n int64) error { return nil }

// DropCache does nothing where the platform has no madvise.
func (m osMapping) DropCache(off, n int64) error { return nil }
