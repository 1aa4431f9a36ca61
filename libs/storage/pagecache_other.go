//go:build !linux

package storage

// AutoPageCacheBudget returns no budget where free page reporting cannot be
// detected.
func AutoPageCacheBudget() (int64, string) {
	return 0, "not Linux: the kernel manages the page cache"
}
