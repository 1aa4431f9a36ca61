package controller

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
)

// registerMetrics publishes the controller's view: whether it is active,
// the controller epoch, nodes by state, and partitions without a leader.
func (c *Controller) registerMetrics(mp metric.MeterProvider) error {
	meter := mp.Meter("github.com/sluice-io/sluice/services/controller")
	active, err := meter.Int64ObservableGauge("sluice.controller.active", metric.WithDescription("1 on the active controller, 0 on standbys."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	epoch, err := meter.Int64ObservableGauge("sluice.controller.epoch", metric.WithDescription("Controller epoch: increments with every new active controller."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	nodes, err := meter.Int64ObservableGauge("sluice.controller.nodes", metric.WithDescription("Registered nodes, by state."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	offline, err := meter.Int64ObservableGauge("sluice.controller.offline_partitions",
		metric.WithDescription("Partitions without a leader: no in-sync or eligible replica is alive."))
	if err != nil {
		return fmt.Errorf("creating metric: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if c.st == nil {
			return nil
		}
		var a int64
		if c.term != nil {
			a = 1
		}
		o.ObserveInt64(active, a)
		o.ObserveInt64(epoch, c.st.epoch)
		byState := map[commonv1.BrokerState]int64{}
		for _, b := range c.st.brokers {
			byState[b.val.GetBroker().GetState()]++
		}
		for _, s := range []commonv1.BrokerState{commonv1.BrokerState_BROKER_STATE_ALIVE, commonv1.BrokerState_BROKER_STATE_FENCED,
			commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN} {
			o.ObserveInt64(nodes, byState[s], metric.WithAttributes(attribute.String("state", s.String())))
		}
		var off int64
		c.st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
			if r.val.GetState().GetLeaderId() < 0 {
				off++
			}
		})
		o.ObserveInt64(offline, off)
		return nil
	}, active, epoch, nodes, offline)
	return err
}
