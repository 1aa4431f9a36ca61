package quota

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Follow keeps m's quota table equal to the quota set of the process's
// metadata cache until ctx ends: every process receives the cluster's
// quotas with its metadata watch (the controller puts the whole set in a
// delta whenever a quota changes), so a change reaches every process's
// enforcement one metadata-watch hop after the controller wrote it.
//
// Follow applies the cache's current set before it returns, then follows
// in a goroutine; the returned channel is closed when that goroutine ends.
func Follow(ctx context.Context, m *Manager, cache *metadata.Cache) <-chan struct{} {
	return metadata.Follow(ctx, cache,
		func(img *metadata.Image) *controllerv1.QuotaSet { return img.Quotas },
		func(img *metadata.Image) { m.SetTable(NewTable(FromProtoSet(img.Quotas)), img.Revision) })
}
