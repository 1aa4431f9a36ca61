package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// roleGroupCoordinator is the role name metadata lists for nodes that serve
// GroupCoordinatorService (role.GroupCoordinator on the server side; the SDK
// does not import server packages).
const roleGroupCoordinator = "group-coordinator"

// coordinator is the node that coordinates a group.
type coordinator struct {
	id   int32
	addr string
}

// coordCache remembers each group's coordinator, so group calls go straight
// to it; an answer that says it moved (NOT_COORDINATOR, or a node that
// cannot be reached) replaces or drops the entry. Its zero value is ready to
// use.
type coordCache struct {
	mu     sync.Mutex
	groups map[string]coordinator
	// warned is when the last "coordinator not available" warning went out.
	warned time.Time
}

func (cc *coordCache) get(group string) (coordinator, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	co, ok := cc.groups[group]
	return co, ok
}

func (cc *coordCache) put(group string, co coordinator) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.groups == nil {
		cc.groups = map[string]coordinator{}
	}
	cc.groups[group] = co
}

// forget drops group's entry if it still names co: a concurrent call may
// have learned the new coordinator already, and that must not be lost.
func (cc *coordCache) forget(group string, co coordinator) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cur, ok := cc.groups[group]; ok && cur == co {
		delete(cc.groups, group)
	}
}

// warnDue says whether a retry warning may go out now (one every warnEvery).
func (cc *coordCache) warnDue(now time.Time) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if now.Sub(cc.warned) < warnEvery {
		return false
	}
	cc.warned = now
	return true
}

// FindCoordinator returns the node that coordinates groupID, asking any
// node with the group-coordinator role, and remembers it for later group
// calls. While no coordinator is known (COORDINATOR_NOT_AVAILABLE; the
// first lookup in a cluster may be creating the offsets topic) or no node
// answers, it retries with backoff until ctx's deadline or
// Config.RequestTimeout, then returns the last answer a server gave.
func (c *Client) FindCoordinator(ctx context.Context, groupID string) (nodeID int32, addr string, err error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var b backoff
	var answered, last error
	for {
		co, server, err := c.lookupCoordinator(ctx, groupKind, groupID)
		if err == nil {
			c.groups.put(groupID, co)
			return co.id, co.addr, nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if server {
			answered = err
		}
		if step, _ := nextCoordStep(err, coordinator{}, true); step == stepReturn && ctx.Err() == nil {
			return -1, "", err
		}
		c.warnCoordinator(groupKind, groupID, err)
		if ctx.Err() != nil || !b.wait(ctx) {
			return -1, "", coordinatorGaveUp(ctx, groupKind.subject(groupID), answered, last)
		}
	}
}

// coordKind is what a coordinator coordinates: groups or transactional ids.
type coordKind struct {
	keyType groupv1.CoordinatorKeyType
	// noun names a key in messages.
	noun string
	// waitOn says whether an error nextCoordStep would return is worth
	// another attempt on the same coordinator; nil: none is.
	waitOn func(error) bool
}

var (
	groupKind = coordKind{keyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, noun: "group"}
	txnKind   = coordKind{keyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, noun: "transactional id",
		waitOn: txnRetriable}
)

// subject names key in messages.
func (k coordKind) subject(key string) string {
	if key == "" && k.keyType == groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		return "producer ids (no transactional id)"
	}
	return fmt.Sprintf("%s %q", k.noun, key)
}

// cache returns the coordinator cache of k's keys.
func (c *Client) coordCache(k coordKind) *coordCache {
	if k.keyType == groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		return &c.txns
	}
	return &c.groups
}

// onGroupCoordinator runs fn on groupID's coordinator (see onCoordinator).
func (c *Client) onGroupCoordinator(ctx context.Context, groupID string, fn func(ctx context.Context, gc groupv1.GroupCoordinatorServiceClient) (*edpb.Error, error)) error {
	return c.onCoordinator(ctx, groupKind, groupID, func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error) {
		return fn(ctx, groupv1.NewGroupCoordinatorServiceClient(conn))
	})
}

// onCoordinator runs fn on the coordinator of key. fn returns the
// response's top-level error (nil on success) or the call's error.
//
// The coordinator comes from the cache, or else from FindCoordinator on any
// group-coordinator node. NOT_COORDINATOR with a hint sends the next
// attempt to the hinted node at once; without a hint, and on
// COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT or a node that cannot be
// reached, the coordinator is looked up again after a backoff;
// COORDINATOR_LOAD_IN_PROGRESS (and what kind.waitOn accepts) waits for the
// same node. This goes on until ctx's deadline or Config.RequestTimeout,
// and then the last answer a server gave is returned (a transport failure
// only if no server answered). Any other error is returned at once, as the
// server phrased it.
func (c *Client) onCoordinator(ctx context.Context, kind coordKind, key string, fn func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error)) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cache := c.coordCache(kind)
	var b backoff
	var answered, last error
	hinted := false
	for {
		co, ok := cache.get(key)
		var err error
		server := false
		if !ok {
			co, server, err = c.lookupCoordinator(ctx, kind, key)
			if err == nil {
				cache.put(key, co)
			}
		}
		if err == nil {
			server, err = c.callCoordinator(ctx, co, fn)
			if err == nil {
				return nil
			}
		}
		if ctx.Err() == nil || last == nil {
			// An error caused by the deadline itself says less than the
			// one before it.
			last = err
		}
		if server {
			answered = err
		}
		if ctx.Err() != nil {
			return coordinatorGaveUp(ctx, kind.subject(key), answered, last)
		}
		step, next := nextCoordStep(err, co, hinted)
		if step == stepReturn && kind.waitOn != nil && kind.waitOn(err) {
			step = stepWait
		}
		hinted = false
		switch step {
		case stepReturn:
			return err
		case stepFollowHint:
			cache.put(key, next)
			hinted = true
			continue
		case stepRefind:
			cache.forget(key, co)
		case stepWait:
			// The coordinator is replaying its log, or busy with the
			// key: keep it.
		}
		c.warnCoordinator(kind, key, err)
		if !b.wait(ctx) {
			return coordinatorGaveUp(ctx, kind.subject(key), answered, last)
		}
	}
}

// coordStep is what a group call does after a failed attempt.
type coordStep int

const (
	// stepReturn: the answer is final; return it.
	stepReturn coordStep = iota
	// stepFollowHint: NOT_COORDINATOR named the coordinator; call it now.
	stepFollowHint
	// stepRefind: look the coordinator up again after a backoff.
	stepRefind
	// stepWait: call the same coordinator again after a backoff.
	stepWait
)

func (s coordStep) String() string {
	switch s {
	case stepReturn:
		return "return"
	case stepFollowHint:
		return "follow-hint"
	case stepRefind:
		return "refind"
	case stepWait:
		return "wait"
	}
	return fmt.Sprintf("coordStep(%d)", int(s))
}

// nextCoordStep decides what follows an attempt on cur that failed with err,
// and for stepFollowHint, the node to call. A hint is followed at once only
// if the previous attempt was not itself a hint followed (hinted), and only
// if it names another node: two nodes naming each other, or a node naming
// itself, get a backoff and a fresh lookup instead of a tight loop.
func nextCoordStep(err error, cur coordinator, hinted bool) (coordStep, coordinator) {
	e := errs.From(err)
	switch e.Code {
	case errs.NotCoordinator:
		if h, ok := coordinatorFromHint(e.Coordinator); ok && !hinted && h != cur {
			return stepFollowHint, h
		}
		return stepRefind, coordinator{}
	case errs.CoordinatorNotAvailable, errs.RequestTimedOut, errs.NodeUnreachable, errs.NodeNotReady, errs.BrokerNotAvailable:
		// REQUEST_TIMED_OUT is what Kafka's consumers treat as a lost
		// coordinator on commits too; the others mean the node is gone or
		// not serving yet.
		return stepRefind, coordinator{}
	case errs.CoordinatorLoadInProgress:
		return stepWait, coordinator{}
	}
	return stepReturn, coordinator{}
}

// coordinatorFromHint returns the coordinator a NOT_COORDINATOR hint names,
// if it names one.
func coordinatorFromHint(h *edpb.CoordinatorHint) (coordinator, bool) {
	if h == nil || h.GetAddress() == "" || h.GetNodeId() < 0 {
		return coordinator{}, false
	}
	return coordinator{id: h.GetNodeId(), addr: h.GetAddress()}, true
}

// coordinatorGaveUp is the error of a coordinator call whose time ran out:
// the last answer a server gave, which says why no coordinator took the
// call; else REQUEST_TIMED_OUT naming the last transport failure. A
// caller's cancellation is reported as such. subject names what the call
// was for (coordKind.subject).
func coordinatorGaveUp(ctx context.Context, subject string, answered, last error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w (last error: %v)", subject, ctx.Err(), last)
	}
	if answered != nil {
		return answered
	}
	if last == nil {
		last = ctx.Err()
	}
	return timedOut(fmt.Sprintf("no coordinator of %s answered", subject), last)
}

// warnCoordinator logs that a coordinator call is retrying, at most once
// every warnEvery, so a caller waiting on it is not left in silence.
func (c *Client) warnCoordinator(kind coordKind, key string, err error) {
	if c.cfg.Logger == nil || !c.coordCache(kind).warnDue(time.Now()) {
		return
	}
	if kind.keyType == groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION {
		c.cfg.Logger.Warn("transaction coordinator not available; retrying", slog.String("transactional_id", key), slog.String("error", err.Error()))
		return
	}
	c.cfg.Logger.Warn("group coordinator not available; retrying", slog.String("group", key), slog.String("error", err.Error()))
}

// callCoordinator runs fn on co. server says whether the error, if any, is
// an answer from a server rather than a transport failure.
func (c *Client) callCoordinator(ctx context.Context, co coordinator, fn func(ctx context.Context, conn grpc.ClientConnInterface) (*edpb.Error, error)) (server bool, err error) {
	conn, err := c.readyConn(ctx, co.addr)
	if err != nil {
		return false, err
	}
	gerr, err := fn(ctx, conn)
	if err != nil {
		return serverAnswer(err), errs.From(err)
	}
	if e := errs.FromProto(gerr); e != nil {
		return true, e
	}
	return false, nil
}

// lookupCoordinator asks the group-coordinator nodes metadata lists (the
// bootstrap addresses if metadata cannot be had or lists none) for the
// coordinator of key: one pass, passing over nodes that cannot be reached,
// are not ready or do not serve the group API (which answers
// FindCoordinator for both kinds). server says whether the error, if any,
// is a server's answer.
func (c *Client) lookupCoordinator(ctx context.Context, kind coordKind, key string) (co coordinator, server bool, err error) {
	addrs, merr := c.groupCoordinatorAddrs(ctx)
	if merr != nil && !errs.IsRetriable(merr) {
		return coordinator{}, serverAnswer(merr), merr
	}
	if len(addrs) == 0 {
		// Any bootstrap node may serve the group API; one that does not
		// answers UNIMPLEMENTED and is passed over.
		addrs = c.bootstrapOrder()
	}
	var resp *groupv1.FindCoordinatorResponse
	// last is the failure worth reporting: not a node without the group
	// API, nor the end of ctx, which would hide why the pass failed.
	last := merr
	for _, addr := range addrs {
		if ctx.Err() != nil {
			break
		}
		conn, err := c.readyConn(ctx, addr)
		if err != nil {
			if ctx.Err() == nil {
				last = err
			}
			continue
		}
		resp, err = groupv1.NewGroupCoordinatorServiceClient(conn).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{
			KeyType: kind.keyType, Keys: []string{key},
		})
		if err == nil {
			break
		}
		switch errs.CodeOf(err) {
		case errs.Unimplemented:
			continue
		case errs.NodeUnreachable, errs.NodeNotReady, errs.RequestTimedOut:
			if ctx.Err() == nil {
				last = fmt.Errorf("%s: %w", addr, err)
			}
			continue
		}
		return coordinator{}, serverAnswer(err), errs.From(err)
	}
	if resp == nil {
		switch {
		case last != nil:
		case ctx.Err() != nil:
			last = ctx.Err()
		default:
			last = errs.New(errs.CoordinatorNotAvailable, "no node serves the group coordinator API (asked %v)", addrs)
		}
		return coordinator{}, false, fmt.Errorf("finding the coordinator of %s: %w", kind.subject(key), last)
	}
	for _, k := range resp.GetCoordinators() {
		if k.GetKey() != key {
			continue
		}
		if e := errs.FromProto(k.GetError()); e != nil {
			return coordinator{}, true, e
		}
		if k.GetAddress() == "" {
			return coordinator{}, true, errs.New(errs.CoordinatorNotAvailable, "%s: FindCoordinator named node %d without an address", kind.subject(key), k.GetNodeId())
		}
		return coordinator{id: k.GetNodeId(), addr: k.GetAddress()}, false, nil
	}
	return coordinator{}, true, errs.New(errs.UnknownServerError, "FindCoordinator answered without %s", kind.subject(key))
}

// groupCoordinatorAddrs returns the addresses of the live nodes metadata
// lists with the group-coordinator role.
func (c *Client) groupCoordinatorAddrs(ctx context.Context) ([]string, error) {
	return c.roleAddrs(ctx, roleGroupCoordinator)
}

// roleAddrs returns the addresses of the live nodes metadata lists with a
// role.
func (c *Client) roleAddrs(ctx context.Context, role string) ([]string, error) {
	md, err := c.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range md.GetBrokers() {
		if !slices.Contains(b.GetRoles(), role) || !brokerUsable(b.GetState()) {
			continue
		}
		for _, e := range b.GetEndpoints() {
			out = append(out, joinHostPort(e.GetHost(), e.GetPort()))
			break
		}
	}
	return out, nil
}

// brokerUsable says whether a node in this state may answer calls: a
// fenced node or one shutting down no longer coordinates groups.
func brokerUsable(s commonv1.BrokerState) bool {
	return s == commonv1.BrokerState_BROKER_STATE_ALIVE || s == commonv1.BrokerState_BROKER_STATE_UNSPECIFIED
}

// readyConn returns the connection to addr once it is up. A connection not
// up yet gets BootstrapTimeout to come up, so a paused or cut-off node is
// passed over instead of holding the call until its deadline; the call
// itself then gets the caller's whole deadline (the first FindCoordinator
// may create the offsets topic, which takes a few seconds).
func (c *Client) readyConn(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	conn, err := c.Conn(addr)
	if err != nil {
		return nil, err
	}
	conn.Connect()
	wctx, cancel := context.WithTimeout(ctx, c.cfg.BootstrapTimeout)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Idle || s == connectivity.Connecting; s = conn.GetState() {
		if !conn.WaitForStateChange(wctx, s) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errs.New(errs.NodeUnreachable, "%s did not answer within %v", addr, c.cfg.BootstrapTimeout)
		}
	}
	return conn, nil
}

// appendNew appends the items of add not in list yet.
func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}
