package metadata

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// Serve streams the cache to one watcher: a snapshot (or, when the watcher
// resumes from a revision the cache still covers, the deltas it missed),
// then every delta as it is applied, until ctx ends or send fails. A watcher
// that falls behind the cache's delta ring gets a new snapshot.
func Serve(ctx context.Context, cache *Cache, fromRevision int64, send func(*controllerv1.WatchMetadataResponse) error) error {
	if _, err := cache.WaitFor(ctx, func(*Image) bool { return cache.Loaded() }); err != nil {
		return err
	}
	rev := fromRevision
	first := true
	for {
		changed := cache.Changed()
		deltas, img, ok := cache.Since(rev)
		if first && rev == 0 {
			ok = false
		}
		first = false
		if !ok {
			if err := send(&controllerv1.WatchMetadataResponse{Update: &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: img.Snapshot()}}); err != nil {
				return err
			}
			rev = img.Revision
		}
		for _, d := range deltas {
			if !ok {
				break
			}
			if err := send(&controllerv1.WatchMetadataResponse{Update: &controllerv1.WatchMetadataResponse_Delta{Delta: d}}); err != nil {
				return err
			}
			rev = d.GetRevision()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}
