package replica

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegisterMetrics publishes the replicas' state as gauges an operator
// alerts on: partitions led and followed, under-replicated partitions (an
// ISR smaller than the replica set), partitions below min.insync.replicas,
// and offline logs.
func (m *Manager) RegisterMetrics(mp metric.MeterProvider) error {
	meter := mp.Meter("github.com/sluice-io/sluice/libs/replica")
	parts, err := meter.Int64ObservableGauge("sluice.replicas", metric.WithDescription("Partition replicas on this node, by role."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	under, err := meter.Int64ObservableGauge("sluice.replicas.under_replicated",
		metric.WithDescription("Partitions this node leads whose ISR is smaller than their replica set."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	belowMin, err := meter.Int64ObservableGauge("sluice.replicas.under_min_isr",
		metric.WithDescription("Partitions this node leads whose ISR is below min.insync.replicas: acks=all produce fails."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	offline, err := meter.Int64ObservableGauge("sluice.replicas.offline", metric.WithDescription("Replicas whose log went offline after an I/O error."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var leaders, followers, u, b, off int64
		for _, p := range m.Partitions() {
			p.mu.Lock()
			if p.isLeader {
				leaders++
				if len(p.isr) < len(p.replicas) {
					u++
				}
				if len(p.isr) < p.minISR {
					b++
				}
			} else {
				followers++
			}
			p.mu.Unlock()
			if p.log.Err() != nil {
				off++
			}
		}
		o.ObserveInt64(parts, leaders, metric.WithAttributes(attribute.String("role", "leader")))
		o.ObserveInt64(parts, followers, metric.WithAttributes(attribute.String("role", "follower")))
		o.ObserveInt64(under, u)
		o.ObserveInt64(belowMin, b)
		o.ObserveInt64(offline, off)
		return nil
	}, parts, under, belowMin, offline)
	return err
}
