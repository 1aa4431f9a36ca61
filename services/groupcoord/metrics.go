package groupcoord

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-io/sluice/libs/replica"
)

// metrics are the role's instruments. Consumer lag per group and partition
// is observed from committed offsets and the local high watermark of each
// partition this process leads (the lag a coordinator can see without a
// network call; the CLI's group describe shows every partition).
type metrics struct {
	rebalances    metric.Int64Counter
	rebalanceTime metric.Float64Histogram
	loadTime      metric.Float64Histogram
}

func protocolAttr(p string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("group.protocol", p))
}

func newMetrics(m metric.Meter, r *GroupCoordinator) *metrics {
	out := &metrics{}
	out.rebalances, _ = m.Int64Counter("sluice.group.rebalances", metric.WithDescription("Completed rebalances (classic generations, consumer-protocol group epochs)."))
	out.rebalanceTime, _ = m.Float64Histogram("sluice.group.rebalance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a classic rebalance to the end of its join phase."))
	out.loadTime, _ = m.Float64Histogram("sluice.group.coordinator.load.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to replay an offsets-topic partition before serving it."))
	// Errors from instrument creation only come from invalid names, which
	// these are not.
	_, _ = m.Int64ObservableGauge("sluice.group.lag", metric.WithDescription("Records between a group's committed offset and the partition's high watermark, for partitions led by this process."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			r.observeLag(o)
			return nil
		}))
	_, _ = m.Int64ObservableGauge("sluice.group.members", metric.WithDescription("Members per group coordinated here."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, s := range r.loadedShards() {
				s.mu.Lock()
				for _, g := range s.groups {
					n := 0
					if g.classic != nil {
						n = len(g.classic.members)
					} else if g.consumer != nil {
						n = len(g.consumer.Describe().GetMembers())
					}
					o.Observe(int64(n), metric.WithAttributes(attribute.String("group.id", g.id)))
				}
				s.mu.Unlock()
			}
			return nil
		}))
	return out
}

// observeLag reports lag for committed partitions whose leader is local.
func (r *GroupCoordinator) observeLag(o metric.Int64Observer) {
	if r.deps.Replicas == nil {
		return
	}
	for _, s := range r.loadedShards() {
		s.mu.Lock()
		for _, g := range s.groups {
			for tp, c := range g.offsets {
				p, ok := r.deps.Replicas.Get(replicaTP(tp))
				if !ok {
					continue
				}
				v := p.View()
				if !v.IsLeader {
					continue
				}
				o.Observe(max(v.HighWatermark-c.offset, 0), metric.WithAttributes(attribute.String("group.id", g.id),
					attribute.String("topic", tp.topic), attribute.Int("partition", int(tp.partition))))
			}
		}
		s.mu.Unlock()
	}
}

func replicaTP(tp topicPartition) replica.TP {
	return replica.TP{Topic: tp.topic, Partition: tp.partition}
}
