package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
)

// RegisterBroker registers a node with a new broker epoch. Every
// registration starts FENCED: if a previous incarnation of the node led
// partitions or sat in ISRs, that leadership and membership move away first
// (its unflushed records may be gone), and the node's next heartbeat
// unfences it. A registration with a new incarnation id replaces the old one
// at once: a restarted node need not wait for its old session to expire.
func (c *Controller) RegisterBroker(ctx context.Context, r *controllerv1.RegisterBrokerRequest) (*controllerv1.RegisterBrokerResponse, error) {
	if err := c.internal(ctx, "RegisterBroker", brokerCallers); err != nil {
		return nil, err
	}
	if err := checkNodeIdentity(ctx, "RegisterBroker", r.GetBrokerId()); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	var epoch int64
	var clusterID string
	_, err = c.update(ctx, t, func(st *state) (*txn, error) {
		clusterID = st.clusterID
		if r.GetClusterId() != "" && r.GetClusterId() != st.clusterID {
			return nil, errs.New(errs.InconsistentClusterID, "node %d belongs to cluster %q, but this is cluster %q; point it at its own controllers or wipe its data dir",
				r.GetBrokerId(), r.GetClusterId(), st.clusterID)
		}
		old, exists := st.brokers[r.GetBrokerId()]
		if exists && old.val.GetIncarnationId() == r.GetIncarnationId() && !old.val.GetSessionExpired() {
			epoch = old.val.GetBroker().GetBrokerEpoch() // a retried registration
			return nil, nil
		}
		cur, _ := strconv.ParseInt(st.brokerEpoch.val, 10, 64)
		epoch = cur + 1
		rec := &metastorev1.BrokerRecord{
			Broker: &commonv1.Broker{
				Id: r.GetBrokerId(), Rack: r.GetRack(), Endpoints: r.GetEndpoints(), Roles: r.GetRoles(),
				State: commonv1.BrokerState_BROKER_STATE_FENCED, BrokerEpoch: epoch,
			},
			IncarnationId:  r.GetIncarnationId(),
			RegisteredAtMs: time.Now().UnixMilli(),
		}
		x := &txn{}
		c.putRaw(x, metastore.KeyBrokerEpoch, st.brokerEpoch.modRev, strconv.FormatInt(epoch, 10))
		var modRev int64
		if exists {
			modRev = old.modRev
		}
		c.put(x, metastore.BrokerKey(r.GetBrokerId()), modRev, rec)
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	c.touch(t, r.GetBrokerId())
	c.logger.Info("node registered", log.NodeID(r.GetBrokerId()), log.BrokerEpoch(epoch), slog.Any("roles", r.GetRoles()))
	return &controllerv1.RegisterBrokerResponse{
		BrokerEpoch:         epoch,
		ClusterId:           clusterID,
		HeartbeatIntervalMs: int32(c.cfg.HeartbeatInterval / time.Millisecond),
		SessionTimeoutMs:    int32(c.cfg.SessionTimeout / time.Millisecond),
	}, nil
}

// touch records a heartbeat.
func (c *Controller) touch(t *term, id int32) {
	c.mu.Lock()
	t.lastHeartbeat[id] = time.Now()
	c.mu.Unlock()
}

// BrokerHeartbeat answers a node's heartbeats on one stream. The stream
// ends when this controller stops being active; the node then finds the new
// one.
func (c *Controller) BrokerHeartbeat(stream grpc.BidiStreamingServer[controllerv1.BrokerHeartbeatRequest, controllerv1.BrokerHeartbeatResponse]) error {
	if err := c.internal(stream.Context(), "BrokerHeartbeat", brokerCallers); err != nil {
		return err
	}
	type recv struct {
		req *controllerv1.BrokerHeartbeatRequest
		err error
	}
	in := make(chan recv, 1)
	go func() {
		for {
			req, err := stream.Recv()
			in <- recv{req, err}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r recv
		select {
		case r = <-in:
		case <-c.runCtx.Done():
			// A stopping controller ends the stream at once; the node
			// moves to the new active controller.
			return errs.New(errs.NodeNotReady, "controller %d is stopping", c.nodeID)
		}
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if err := checkNodeIdentity(stream.Context(), "BrokerHeartbeat", r.req.GetBrokerId()); err != nil {
			return err
		}
		resp, err := c.heartbeat(stream.Context(), r.req)
		if err != nil {
			// NOT_CONTROLLER and timeouts end the stream: the node retries
			// elsewhere.
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (c *Controller) heartbeat(ctx context.Context, req *controllerv1.BrokerHeartbeatRequest) (*controllerv1.BrokerHeartbeatResponse, error) {
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	id := req.GetBrokerId()
	c.mu.RLock()
	b, ok := c.st.brokers[id]
	var rec *metastorev1.BrokerRecord
	if ok {
		rec = b.val
	}
	c.mu.RUnlock()
	if !ok || rec.GetBroker().GetBrokerEpoch() != req.GetBrokerEpoch() || rec.GetSessionExpired() {
		return &controllerv1.BrokerHeartbeatResponse{
			Error: errs.New(errs.StaleBrokerEpoch, "node %d epoch %d is not current: register again", id, req.GetBrokerEpoch()).Proto(),
			State: commonv1.BrokerState_BROKER_STATE_FENCED,
		}, nil
	}
	c.touch(t, id)
	state := rec.GetBroker().GetState()
	want := state
	switch {
	case req.GetWantShutdown() && state != commonv1.BrokerState_BROKER_STATE_FENCED:
		want = commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN
	case state == commonv1.BrokerState_BROKER_STATE_FENCED && !c.pendingMoves(id):
		want = commonv1.BrokerState_BROKER_STATE_ALIVE
	}
	if want != state {
		if err := c.setBrokerState(ctx, t, id, req.GetBrokerEpoch(), want, false); err != nil && !errors.Is(err, errConflict) {
			return nil, err
		}
		state = want
	}
	return &controllerv1.BrokerHeartbeatResponse{
		State:          state,
		ShouldShutdown: state == commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN && c.leaderships(id) == 0,
	}, nil
}

// pendingMoves reports whether partitions still need to move away from a
// fenced node before it may be unfenced: it leads one, or sits in an ISR with
// a live peer that would take over.
func (c *Controller) pendingMoves(id int32) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	pending := false
	c.st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
		p := r.val.GetState()
		if p.GetLeaderId() == id {
			pending = true
			return
		}
		if slices.Contains(p.GetIsr(), id) && anyOther(p.GetIsr(), id, c.st.live) {
			pending = true
		}
	})
	return pending
}

// leaderships counts the partitions a node leads.
func (c *Controller) leaderships(id int32) int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n int32
	c.st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
		if r.val.GetState().GetLeaderId() == id {
			n++
		}
	})
	return n
}

// setBrokerState writes a node's state if its epoch is still epoch.
func (c *Controller) setBrokerState(ctx context.Context, t *term, id int32, epoch int64, s commonv1.BrokerState, expired bool) error {
	_, err := c.update(ctx, t, func(st *state) (*txn, error) {
		b, ok := st.brokers[id]
		if !ok || b.val.GetBroker().GetBrokerEpoch() != epoch {
			return nil, nil // re-registered meanwhile: nothing to do
		}
		if b.val.GetBroker().GetState() == s && b.val.GetSessionExpired() == expired {
			return nil, nil
		}
		rec := proto.Clone(b.val).(*metastorev1.BrokerRecord)
		rec.Broker.State = s
		rec.SessionExpired = expired
		x := &txn{}
		c.put(x, metastore.BrokerKey(id), b.modRev, rec)
		return x, nil
	})
	if err == nil {
		c.logger.Info("node state changed", log.NodeID(id), log.BrokerEpoch(epoch), slog.String("state", s.String()), slog.Bool("session_expired", expired))
	}
	return err
}

// ControlledShutdown moves leadership away from a node that is about to
// stop; the node calls it until no leadership remains.
func (c *Controller) ControlledShutdown(ctx context.Context, r *controllerv1.ControlledShutdownRequest) (*controllerv1.ControlledShutdownResponse, error) {
	if err := c.internal(ctx, "ControlledShutdown", brokerCallers); err != nil {
		return nil, err
	}
	if err := checkNodeIdentity(ctx, "ControlledShutdown", r.GetBrokerId()); err != nil {
		return nil, err
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	b, ok := c.st.brokers[r.GetBrokerId()]
	c.mu.RUnlock()
	if !ok || b.val.GetBroker().GetBrokerEpoch() != r.GetBrokerEpoch() {
		return &controllerv1.ControlledShutdownResponse{
			Error: errs.New(errs.StaleBrokerEpoch, "node %d epoch %d is not current", r.GetBrokerId(), r.GetBrokerEpoch()).Proto(),
		}, nil
	}
	c.touch(t, r.GetBrokerId())
	if b.val.GetBroker().GetState() == commonv1.BrokerState_BROKER_STATE_ALIVE {
		if err := c.setBrokerState(ctx, t, r.GetBrokerId(), r.GetBrokerEpoch(), commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN, false); err != nil {
			return nil, err
		}
	}
	// Give the reconciler a moment to move leadership, then report what is
	// left that can move: a partition with no other live in-sync replica
	// keeps its leader until the node stops, and must not hold the
	// shutdown.
	deadline := time.Now().Add(2 * time.Second)
	for c.movableLeaderships(r.GetBrokerId()) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return &controllerv1.ControlledShutdownResponse{RemainingLeaderships: c.movableLeaderships(r.GetBrokerId())}, nil
}

// movableLeaderships counts the partitions a node leads that another live
// in-sync replica could take over.
func (c *Controller) movableLeaderships(id int32) int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n int32
	c.st.eachPartition(func(_ string, _ int32, r *versioned[*metastorev1.PartitionRecord]) {
		p := r.val.GetState()
		if p.GetLeaderId() == id && anyOther(p.GetIsr(), id, c.st.live) {
			n++
		}
	})
	return n
}

// expireSessions fences nodes whose last heartbeat is older than the session
// timeout.
func (c *Controller) expireSessions(t *term) {
	now := time.Now()
	type exp struct {
		id    int32
		epoch int64
	}
	var expired []exp
	c.mu.RLock()
	for id, b := range c.st.brokers {
		last, seen := t.lastHeartbeat[id]
		if !seen {
			// Registered after this term began (or by a previous one): give
			// it a full session from now.
			continue
		}
		if b.val.GetSessionExpired() {
			continue
		}
		if now.Sub(last) > c.cfg.SessionTimeout {
			expired = append(expired, exp{id, b.val.GetBroker().GetBrokerEpoch()})
		}
	}
	var unseen []int32
	for id := range c.st.brokers {
		if _, seen := t.lastHeartbeat[id]; !seen {
			unseen = append(unseen, id)
		}
	}
	c.mu.RUnlock()
	for _, id := range unseen {
		c.touch(t, id)
	}
	for _, e := range expired {
		c.logger.Warn("node session expired; fencing it", log.NodeID(e.id), log.BrokerEpoch(e.epoch), slog.Duration("session_timeout", c.cfg.SessionTimeout))
		if err := c.setBrokerState(t.ctx, t, e.id, e.epoch, commonv1.BrokerState_BROKER_STATE_FENCED, true); err != nil && t.ctx.Err() == nil {
			c.logger.Warn("cannot fence node", log.NodeID(e.id), log.Err(err))
		}
	}
}
