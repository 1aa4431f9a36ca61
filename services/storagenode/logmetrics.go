package storagenode

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-io/sluice/libs/replica"
)

// registerLogMetrics publishes what the logs of this node found wrong with
// their own data: batches compaction could not decode and kept as they are
// (see storage.Log.UnreadableBatches). Such a batch never takes a partition
// offline, so this gauge and the ERROR log are how an operator learns of it.
func registerLogMetrics(meter metric.Meter, replicas *replica.Manager) error {
	unreadable, err := meter.Int64ObservableGauge("sluice.log.unreadable_batches",
		metric.WithDescription("Times compaction met a batch it cannot decode and kept it unchanged, summed over this node's logs since they were opened."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var n int64
		for _, p := range replicas.Partitions() {
			if l := p.Log(); l != nil {
				n += l.UnreadableBatches()
			}
		}
		o.ObserveInt64(unreadable, n)
		return nil
	}, unreadable)
	return err
}
