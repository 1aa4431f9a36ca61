// Package controller is the controller role: cluster metadata in etcd,
// exactly one active controller chosen by an etcd lease-backed election,
// node registration and liveness, topics, configs and partition leadership.
//
// Every controller process hosts an etcd member (or a client of an external
// etcd). All controllers answer reads from etcd; only the active one writes,
// and each of its writes is an etcd transaction guarded by its election key,
// so a deposed controller's writes fail even if it does not yet know it was
// deposed.
package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/service"
)

// Controller is the controller role.
type Controller struct {
	controllerv1.UnimplementedControllerServiceServer

	cfg    Config
	deps   service.Deps
	nodeID int32
	logger *slog.Logger

	store  *metastore.Store
	cache  *metadata.Cache
	runCtx context.Context // ends when the controller stops
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards st (applyEvents writes it; decisions read it) and term.
	mu   sync.RWMutex
	st   *state
	term *term // set while this controller is active

	quorum quorumView
}

// term is one period of this controller being active.
type term struct {
	election *concurrency.Election
	// electionKey and electionRev are the election's key and revision, read
	// once when the term starts: Resign rewrites the election's fields
	// while the term's loops may still run.
	electionKey string
	electionRev int64
	epoch       int64
	ctx         context.Context
	// lastHeartbeat is when each node last heartbeated this controller.
	// On activation every registered node gets a full session from now.
	lastHeartbeat map[int32]time.Time
}

// New builds the controller role and registers its gRPC services on
// deps.Server. Nothing runs until Start.
func New(cfg Config, deps service.Deps) *Controller {
	c := &Controller{
		cfg:    cfg,
		deps:   deps,
		nodeID: int32(deps.Node.ID),
		logger: deps.Logger.With(log.Role("controller")),
		cache:  deps.Metadata,
		runCtx: context.Background(),
	}
	if c.cache == nil {
		c.cache = metadata.NewCache()
	}
	controllerv1.RegisterControllerServiceServer(deps.Server.GRPC, c)
	registerValidators(deps.Server.Validators)
	if deps.Telemetry != nil {
		if err := c.registerMetrics(deps.Telemetry.Meter); err != nil {
			c.logger.Warn("cannot register controller metrics", log.Err(err))
		}
	}
	return c
}

// Name implements service.Service.
func (c *Controller) Name() string { return "controller" }

// HealthServices implements service.HealthReporter.
func (c *Controller) HealthServices() []string {
	return []string{controllerv1.ControllerService_ServiceDesc.ServiceName}
}

// Start opens the metadata store (waiting for the etcd quorum), makes sure
// the cluster has an id, and starts campaigning to be the active controller.
func (c *Controller) Start(ctx context.Context) error {
	st, err := metastore.Open(ctx, c.cfg.Etcd, fmt.Sprintf("controller-%d", c.nodeID), c.deps.Node.DataDir, c.logger)
	if err != nil {
		return err
	}
	c.store = st
	id, err := c.ensureClusterID(ctx)
	if err != nil {
		_ = st.Close() // the cluster id error is the one to report
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.runCtx, c.cancel = runCtx, cancel
	c.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { c.follow(runCtx) })
	// Reads are answered from the followed state: wait for the first load.
	if _, err := c.cache.WaitFor(ctx, func(*metadata.Image) bool { return c.cache.Loaded() }); err != nil {
		cancel()
		wg.Wait()
		_ = st.Close() // reporting the load error
		return fmt.Errorf("loading metadata: %w", err)
	}
	wg.Go(func() { c.campaignLoop(runCtx) })
	go func() {
		wg.Wait()
		close(c.done)
	}()
	c.logger.Info("controller started", slog.String("cluster_id", id))
	return nil
}

// Failed implements service.Failer.
func (c *Controller) Failed() <-chan error { return c.store.Failed() }

// Stop resigns leadership (so a standby takes over at once instead of after
// the lease expires), withdraws this controller's presence and closes the
// store.
func (c *Controller) Stop(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
		select {
		case <-c.done:
		case <-ctx.Done():
		}
	}
	if c.store != nil {
		return c.store.Close()
	}
	return nil
}

// ensureClusterID creates the cluster id if no controller did yet, and
// returns it.
func (c *Controller) ensureClusterID(ctx context.Context) (string, error) {
	// Right after a quorum forms, raft leadership may be moving (the active
	// controller moves it off its own member), and a proposal caught by the
	// move waits for etcd's whole request timeout (7 s) before it fails. One
	// such failure must not fail the start: retry with a short deadline per
	// attempt until the start's own deadline.
	for {
		actx, cancel := context.WithTimeout(ctx, clusterIDAttempt)
		id, err := c.tryEnsureClusterID(actx)
		cancel()
		if err == nil {
			return id, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("creating cluster id: %w", err)
		}
		c.logger.Warn("cannot read or create the cluster id; retrying", log.Err(err))
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// clusterIDAttempt bounds one attempt of ensureClusterID.
var clusterIDAttempt = 2 * time.Second

func (c *Controller) tryEnsureClusterID(ctx context.Context) (string, error) {
	key := c.store.Key(metastore.KeyClusterID)
	buf := make([]byte, 16)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails on Linux
	resp, err := c.store.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, hex.EncodeToString(buf))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", err
	}
	if resp.Succeeded {
		return hex.EncodeToString(buf), nil
	}
	return string(resp.Responses[0].GetResponseRange().Kvs[0].Value), nil
}

// campaignLoop keeps this controller in the election: present (a leased
// key), campaigning, active while it holds its lease, and campaigning again
// with a new lease after it loses one.
func (c *Controller) campaignLoop(ctx context.Context) {
	for ctx.Err() == nil {
		sent := time.Now()
		grant, err := c.store.Client.Grant(ctx, int64(c.cfg.ElectionTTL/time.Second))
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Warn("cannot grant etcd lease; retrying", log.Err(err))
				sleepCtx(ctx, 500*time.Millisecond)
			}
			continue
		}
		// The lease is kept by metastore.KeepLease, which survives raft
		// elections, not by the session's own keep-alive stream (whose end
		// this loop ignores).
		leaseCtx, lose := context.WithCancelCause(ctx)
		var keeper sync.WaitGroup
		keeper.Go(func() {
			c.store.KeepLease(leaseCtx, grant.ID, sent, time.Duration(grant.TTL)*time.Second, lose)
		})
		session, err := concurrency.NewSession(c.store.Client, concurrency.WithLease(grant.ID), concurrency.WithContext(leaseCtx))
		wasActive := false
		if err == nil {
			wasActive = c.serveTerm(ctx, leaseCtx, lose, session)
		}
		lose(nil)
		keeper.Wait()
		// Revoking makes presence and election keys vanish at once.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.store.Client.Revoke(rctx, grant.ID) // best effort; the lease expires by itself otherwise
		cancel()
		if !wasActive {
			// A standby only gets here when its lease or election key is
			// gone. When every lease went at once (a resumed etcd member
			// that still believed it led revoked them all, etcd issue
			// 15247), this lets the controller that was active campaign
			// first, so the active controller does not change.
			sleepCtx(ctx, c.cfg.ElectionTTL/3)
		}
	}
}

// serveTerm registers presence, campaigns, and holds leadership until the
// lease is lost (leaseCtx ends, or its election key is deleted) or ctx is
// cancelled. It returns whether this controller was active.
func (c *Controller) serveTerm(ctx, leaseCtx context.Context, lose context.CancelCauseFunc, session *concurrency.Session) bool {
	member := &controllerv1.ControllerMember{
		NodeId:     c.nodeID,
		Address:    c.deps.Node.AdvertiseAddr(),
		EtcdMember: c.store.MemberName(),
	}
	val, err := proto.Marshal(member)
	if err != nil {
		panic(err) // a plain message always marshals
	}
	if _, err := c.store.Client.Put(leaseCtx, c.store.Key(metastore.ControllerKey(c.nodeID)), string(val), clientv3.WithLease(session.Lease())); err != nil {
		if leaseCtx.Err() == nil {
			c.logger.Warn("cannot register controller presence", log.Err(err))
		}
		return false
	}
	election := concurrency.NewElection(session, c.store.Key(metastore.KeyControllerLeader))
	if err := election.Campaign(leaseCtx, strconv.Itoa(int(c.nodeID))); err != nil {
		return false // ctx cancelled or lease lost
	}
	epoch, err := c.bumpEpoch(leaseCtx, election)
	if err != nil {
		c.logger.Warn("won the election but could not bump the controller epoch; resigning", log.Err(err))
		c.resign(election)
		return false
	}
	// Decide only from a view that includes every write made before this
	// term began, including the last writes of the previous controller (our
	// election key may be much older than they are).
	if err := c.catchUp(leaseCtx); err != nil {
		c.resign(election)
		return false
	}
	termCtx, endTerm := context.WithCancel(leaseCtx)
	t := &term{election: election, electionKey: election.Key(), electionRev: election.Rev(), epoch: epoch, ctx: termCtx, lastHeartbeat: map[int32]time.Time{}}
	c.mu.Lock()
	now := time.Now()
	for id := range c.st.brokers {
		t.lastHeartbeat[id] = now
	}
	c.term = t
	c.mu.Unlock()
	c.logger.Info("became active controller", slog.Int64("controller_epoch", epoch))
	var loops sync.WaitGroup
	loops.Go(func() { c.reconcileLoop(t) })
	loops.Go(func() { c.keepRaftLeaderElsewhere(t) })
	loops.Go(func() { c.watchElectionKey(t, lose) })

	<-leaseCtx.Done()
	if ctx.Err() != nil {
		c.resign(election)
		c.logger.Info("resigned as active controller", slog.Int64("controller_epoch", epoch))
	} else {
		c.logger.Warn("lost controller lease; no longer active", slog.Int64("controller_epoch", epoch), log.Err(context.Cause(leaseCtx)))
	}
	c.mu.Lock()
	c.term = nil
	c.mu.Unlock()
	endTerm()
	loops.Wait()
	return true
}

// watchElectionKey ends the term as soon as the followed state shows this
// term's election key deleted (its lease was revoked), instead of at the
// next lease renewal, so this controller campaigns again at once.
func (c *Controller) watchElectionKey(t *term, lose context.CancelCauseFunc) {
	key := strings.TrimPrefix(t.electionKey, c.store.Prefix())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.RLock()
		_, ok := c.st.election[key]
		seen := c.st.rev >= t.electionRev
		c.mu.RUnlock()
		if seen && !ok {
			lose(fmt.Errorf("%w: election key %s deleted", metastore.ErrLeaseLost, key))
			return
		}
	}
}

// keepRaftLeaderElsewhere moves etcd's raft leadership off this process
// while it is the active controller (see metastore.MoveLeaderAway). It
// checks often: a new term often starts while the raft leader is local (a
// fresh cluster, a restart) and the other members cannot take it yet, and a
// kill in that window doubles the failover. The check is a local read; only
// a local raft leader costs a request.
func (c *Controller) keepRaftLeaderElsewhere(t *term) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if moved, err := c.store.MoveLeaderAway(t.ctx); err != nil && t.ctx.Err() == nil {
			c.logger.Debug("cannot move etcd leadership away from the active controller", log.Err(err))
		} else if moved {
			c.logger.Info("moved etcd raft leadership away from the active controller's member")
		}
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (c *Controller) resign(e *concurrency.Election) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = e.Resign(ctx) // if it fails the lease revoke or expiry ends the term anyway
}

// bumpEpoch increments the controller epoch in a transaction guarded by the
// election key.
func (c *Controller) bumpEpoch(ctx context.Context, e *concurrency.Election) (int64, error) {
	key := c.store.Key(metastore.KeyControllerEpoch)
	for {
		resp, err := c.store.Client.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		var cur int64
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) == 1 {
			cur, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		tx, err := c.store.Client.Txn(ctx).
			If(cmp, leaderCmp(e)).
			Then(clientv3.OpPut(key, strconv.FormatInt(cur+1, 10))).
			Commit()
		if err != nil {
			return 0, err
		}
		if tx.Succeeded {
			return cur + 1, nil
		}
		if err := c.stillLeader(ctx, e); err != nil {
			return 0, err
		}
	}
}

// leaderCmp is the guard on every controller write: the election key this
// controller created still exists with the same creation revision.
func leaderCmp(e *concurrency.Election) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
}

// leaderCmp is the guard of the term's writes: its election key still
// exists with the revision it was created at.
func (t *term) leaderCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.electionKey), "=", t.electionRev)
}

func (c *Controller) stillLeader(ctx context.Context, e *concurrency.Election) error {
	resp, err := c.store.Client.Get(ctx, e.Key())
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() {
		return errs.New(errs.NotController, "controller %d lost its election key", c.nodeID)
	}
	return nil
}

// activeTerm returns the current term, a CONTROLLER_QUORUM_UNAVAILABLE
// error when the quorum has no majority, or a NOT_CONTROLLER error naming
// the active controller.
func (c *Controller) activeTerm() (*term, error) {
	// Without a majority no write can succeed and no controller can be
	// active: say so at once, instead of waiting on etcd or pointing at an
	// active controller that may be dead.
	if err := c.quorumLost(context.Background()); err != nil {
		return nil, err
	}
	c.mu.RLock()
	t := c.term
	c.mu.RUnlock()
	if t != nil {
		return t, nil
	}
	img := c.cache.Load()
	return nil, errs.New(errs.NotController, "controller %d is a standby; send this to the active controller (node %d at %q)",
		c.nodeID, img.ControllerID, img.ControllerAddress()).
		WithController(&edpb.ControllerHint{ControllerId: img.ControllerID, Address: img.ControllerAddress()})
}

// IsActive reports whether this controller is the active one.
func (c *Controller) IsActive() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.term != nil
}

// setState installs a freshly loaded state and resets the cache to its
// image.
func (c *Controller) setState(st *state, _ *change) {
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
	c.remember(st.controllers())
	c.cache.Reset(st.image())
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
