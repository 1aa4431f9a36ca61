package replica

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-io/sluice/libs/storage"
)

// RegisterMetrics publishes the replicas' state as gauges an operator
// alerts on: partitions led and followed, under-replicated partitions (an
// ISR smaller than the replica set), partitions below min.insync.replicas,
// offline logs, how often logs went offline and came back, the free space
// of the data directory against its reserve, the page-cache budget, and the
// read copies held and the reads that could not copy.
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
	if m.off.wentOffline, err = meter.Int64Counter("sluice.replicas.offline.events",
		metric.WithDescription("Times a replica's log went offline after an I/O error (a full disk, a failed write or fsync).")); err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	if m.off.cameBack, err = meter.Int64Counter("sluice.replicas.recovered.events",
		metric.WithDescription("Times an offline replica was reopened without a restart once its disk was writable again.")); err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	if m.throttledBytes, err = meter.Int64Counter("sluice.replication.throttled.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes this node's leaders sent to replicas being added by a reassignment while leader.replication.throttled.rate was set.")); err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	if m.throttledWaits, err = meter.Int64Counter("sluice.replication.throttled.waits",
		metric.WithDescription("Times a chunk for a replica being added waited for the node's reassignment throttle.")); err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	instruments := []metric.Observable{parts, under, belowMin, offline}
	var free, reserve metric.Int64ObservableGauge
	if g := m.cfg.Storage.Space; g != nil {
		if free, err = meter.Int64ObservableGauge("sluice.storage.disk.free", metric.WithUnit("By"),
			metric.WithDescription("Free bytes on the file system of the replicas' data directory, as last measured.")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		if reserve, err = meter.Int64ObservableGauge("sluice.storage.disk.reserve", metric.WithUnit("By"),
			metric.WithDescription("Free space appends never use (storage.disk-reserve-bytes): below it they fail with KAFKA_STORAGE_ERROR.")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		instruments = append(instruments, free, reserve)
	}
	var cacheBudget metric.Int64ObservableGauge
	var cacheDropped metric.Int64ObservableCounter
	if pc := m.cfg.Storage.PageCache; pc != nil {
		if cacheBudget, err = meter.Int64ObservableGauge("sluice.storage.page_cache.budget", metric.WithUnit("By"),
			metric.WithDescription("Bytes of log data this node leaves in the kernel's page cache (storage.page-cache-budget-bytes).")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		if cacheDropped, err = meter.Int64ObservableCounter("sluice.storage.page_cache.dropped", metric.WithUnit("By"),
			metric.WithDescription("Bytes of durable log data dropped from the page cache to keep within the budget.")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		instruments = append(instruments, cacheBudget, cacheDropped)
	}
	var copyBudget, copyInUse metric.Int64ObservableGauge
	var copyFallbacks metric.Int64ObservableCounter
	if rc := m.cfg.Storage.Copies; rc != nil {
		if copyBudget, err = meter.Int64ObservableGauge("sluice.storage.read_copies.budget", metric.WithUnit("By"),
			metric.WithDescription("Most bytes of fetched data copied out of the page cache and held at once (storage.read-copy-budget-bytes).")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		if copyInUse, err = meter.Int64ObservableGauge("sluice.storage.read_copies.in_use", metric.WithUnit("By"),
			metric.WithDescription("Bytes of fetched data copied out of the page cache and not yet written to a client or follower.")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		if copyFallbacks, err = meter.Int64ObservableCounter("sluice.storage.read_copies.fallbacks",
			metric.WithDescription("Segment reads served from the segment's memory map instead of a copy, by reason: "+
				"budget (the copies held reached the budget, as when slow readers hold fetched data) or read_failed.")); err != nil {
			return fmt.Errorf("creating metric: %w", err)
		}
		instruments = append(instruments, copyBudget, copyInUse, copyFallbacks)
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
		if g := m.cfg.Storage.Space; g != nil {
			if n, err := g.FreeBytes(); err == nil { // no figure before the data directory exists
				o.ObserveInt64(free, n)
			}
			o.ObserveInt64(reserve, g.Reserve())
		}
		if pc := m.cfg.Storage.PageCache; pc != nil {
			o.ObserveInt64(cacheBudget, pc.Budget())
			o.ObserveInt64(cacheDropped, pc.DroppedBytes())
		}
		if rc := m.cfg.Storage.Copies; rc != nil {
			o.ObserveInt64(copyBudget, rc.Limit())
			o.ObserveInt64(copyInUse, rc.InFlight())
			for _, r := range []storage.FallbackReason{storage.FallbackBudget, storage.FallbackReadFailed} {
				o.ObserveInt64(copyFallbacks, rc.Fallbacks(r), metric.WithAttributes(attribute.String("reason", r.String())))
			}
		}
		return nil
	}, instruments...)
	return err
}
