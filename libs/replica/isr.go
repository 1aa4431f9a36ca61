package replica

import (
	"context"
	"log/slog"
	"slices"
	"time"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
)

// proposeISRLocked asks the controller to change the ISR. One proposal is in
// flight per partition; until it is answered the leader counts the maximal
// ISR (see maximalISRLocked).
func (p *Partition) proposeISRLocked(next []int32, why string) {
	if slices.Equal(next, p.isr) {
		return
	}
	p.pendingISR = slices.Clone(next)
	change := &controllerv1.PartitionChange{
		Topic: p.tp.Topic, Partition: p.tp.Partition,
		LeaderEpoch: p.leaderEpoch, PartitionEpoch: p.partitionEpoch, NewIsr: slices.Clone(next),
	}
	p.m.logger.Info("proposing ISR change", log.TopicPartition(p.tp.Topic, p.tp.Partition), slog.Any("isr", p.isr),
		slog.Any("new_isr", next), slog.String("why", why))
	go p.sendAlter(change)
}

// sendAlter sends one AlterPartition and applies the answer: the controller
// returns the partition's state whether or not it applied the change.
func (p *Partition) sendAlter(change *controllerv1.PartitionChange) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.m.alterPartition(ctx, change)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pendingISR = nil
	if err != nil {
		p.m.logger.Warn("ISR change not applied", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Err(err))
		p.wakeLocked()
		return
	}
	st := res.GetState()
	if e := errs.FromProto(res.GetError()); e != nil {
		p.m.logger.Info("ISR change refused", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Err(e))
	}
	if st != nil && p.isLeader && st.GetLeaderEpoch() == p.leaderEpoch && st.GetPartitionEpoch() >= p.partitionEpoch {
		p.isr, p.partitionEpoch = st.GetIsr(), st.GetPartitionEpoch()
		p.tryAdvanceHWLocked()
	}
	p.wakeLocked()
}

// alterPartition sends a change to the active controller, following
// NOT_CONTROLLER hints.
func (m *Manager) alterPartition(ctx context.Context, change *controllerv1.PartitionChange) (*controllerv1.AlterPartitionResult, error) {
	req := &controllerv1.AlterPartitionRequest{BrokerId: m.nodeID, BrokerEpoch: m.brokerEpoch(), Changes: []*controllerv1.PartitionChange{change}}
	addr := m.cache.Load().ControllerAddress()
	for attempt := 0; ; attempt++ {
		if addr == "" {
			return nil, errs.New(errs.NotController, "no active controller is known")
		}
		conn, err := m.pool.Get(addr)
		if err != nil {
			return nil, err
		}
		resp, err := controllerv1.NewControllerServiceClient(conn).AlterPartition(ctx, req)
		if err == nil {
			return resp.GetResults()[0], nil
		}
		e := errs.From(err)
		if e.Code == errs.NotController && e.Controller.GetAddress() != "" && e.Controller.GetAddress() != addr && attempt < 3 {
			addr = e.Controller.GetAddress()
			continue
		}
		return nil, err
	}
}
