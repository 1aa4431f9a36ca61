// Package membership registers a node with the active controller and keeps
// its session alive with heartbeats. Every process that runs a role other
// than the controller has one. It knows the node's broker epoch (which
// node-to-node requests carry, so a fenced incarnation's requests are
// refused) and whether the controller considers the node fenced.
//
// When the controller answers a heartbeat with STALE_BROKER_EPOCH (the
// session expired, for example after the process was paused), the member
// registers again and gets a new epoch; listeners hear about it through
// Changed.
//
// Session says whether the controller certainly still holds the node's
// session: a heartbeat sent at t and answered keeps it until t plus the
// session timeout (the controller counts the timeout from when it received
// the heartbeat, later than t). A process that serves reads from memory on
// the strength of an ownership the controller hands out (a coordinator of
// its own) stops when Session says no: past that point the controller may
// have fenced the node and another process may have taken over.
package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Config identifies the node.
type Config struct {
	NodeID    int32
	Rack      string
	Advertise string // host:port of the node's gRPC listener
	// KafkaAdvertise is host:port of the node's Kafka-protocol listener,
	// registered as the endpoint named "kafka"; empty when it has none.
	KafkaAdvertise string
	Roles          []string
	// Controllers lists controller addresses to try when the active one is
	// not known from metadata.
	Controllers []string
}

// Dialer returns a connection to an address.
type Dialer func(addr string) (*grpc.ClientConn, error)

// Member is a node's registration.
type Member struct {
	cfg         Config
	dial        Dialer
	cache       *metadata.Cache
	logger      *slog.Logger
	incarnation string

	mu        sync.Mutex
	epoch     int64
	state     commonv1.BrokerState
	clusterID string
	interval  time.Duration
	changed   chan struct{}
	// sessionTimeout is the controller's session timeout (from
	// RegisterBroker); leaseUntil is when the session may expire at the
	// earliest, by the last answered heartbeat of the current epoch (zero
	// before one was answered, or once the controller said the epoch is
	// stale). It keeps a monotonic clock reading.
	sessionTimeout time.Duration
	leaseUntil     time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a member. cache supplies the active controller's address.
func New(cfg Config, dial Dialer, cache *metadata.Cache, logger *slog.Logger) *Member {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return &Member{
		cfg: cfg, dial: dial, cache: cache, logger: logger.With(log.Component("membership")),
		incarnation: hex.EncodeToString(b), state: commonv1.BrokerState_BROKER_STATE_FENCED,
		interval: time.Second, changed: make(chan struct{}),
	}
}

// Name implements service.Service.
func (m *Member) Name() string { return "membership" }

// Epoch returns the current broker epoch (0 before registration).
func (m *Member) Epoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// State returns the node's state as the controller last reported it.
func (m *Member) State() commonv1.BrokerState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Changed returns a channel closed at the next change of epoch or state.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Session returns the broker epoch and whether the controller certainly
// still holds the node's session in it: a heartbeat of that epoch was
// answered less than the session timeout (less a tenth, for the two clocks'
// rates) after it was sent. It reads the process's own monotonic clock,
// not a clock fault injection shifts.
func (m *Member) Session() (epoch int64, live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, !m.leaseUntil.IsZero() && time.Now().Before(m.leaseUntil)
}

// renew extends the session lease after a heartbeat of epoch, sent at sent,
// was answered without error.
func (m *Member) renew(epoch int64, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch != m.epoch {
		return
	}
	timeout := m.sessionTimeout
	if timeout <= 0 {
		// A controller that names no session timeout: assume the shortest
		// the heartbeat interval allows.
		timeout = m.interval
	}
	if until := sent.Add(timeout - timeout/10); until.After(m.leaseUntil) {
		m.leaseUntil = until
	}
}

// endLease drops the session lease: the controller said the epoch is stale.
func (m *Member) endLease() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaseUntil = time.Time{}
}

func (m *Member) set(epoch int64, state commonv1.BrokerState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch == m.epoch && state == m.state {
		return
	}
	m.epoch, m.state = epoch, state
	close(m.changed)
	m.changed = make(chan struct{})
}

// Start registers the node (retrying until a controller accepts it or ctx
// ends) and starts heartbeating.
func (m *Member) Start(ctx context.Context) error {
	if err := m.register(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		m.heartbeatLoop(runCtx)
	}()
	return nil
}

// Stop stops heartbeating. The session then expires on the controller; call
// ControlledShutdown first to move leadership away cleanly.
func (m *Member) Stop(ctx context.Context) error {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// controllerAddrs lists where to look for the active controller: the one
// metadata names first.
func (m *Member) controllerAddrs() []string {
	var out []string
	if m.cache != nil {
		if a := m.cache.Load().ControllerAddress(); a != "" {
			out = append(out, a)
		}
	}
	for _, a := range m.cfg.Controllers {
		if len(out) == 0 || a != out[0] {
			out = append(out, a)
		}
	}
	return out
}

// call runs fn against the active controller, following NOT_CONTROLLER
// hints and trying each known controller, until fn succeeds, fails with a
// non-retriable error, or ctx ends.
func (m *Member) call(ctx context.Context, fn func(context.Context, controllerv1.ControllerServiceClient) error) error {
	backoff := 50 * time.Millisecond
	for {
		var lastErr error
		addrs := m.controllerAddrs()
		for i := 0; i < len(addrs); i++ {
			conn, err := m.dial(addrs[i])
			if err != nil {
				lastErr = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = fn(cctx, controllerv1.NewControllerServiceClient(conn))
			cancel()
			if err == nil {
				return nil
			}
			lastErr = err
			e := errs.From(err)
			if hint := e.Controller.GetAddress(); e.Code == errs.NotController && hint != "" && !slices.Contains(addrs[:i+1], hint) {
				addrs = slices.Insert(slices.Clone(addrs), i+1, hint)
				continue
			}
			if !e.Retriable() {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no active controller answered (tried %v): %w", addrs, lastErr)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (m *Member) register(ctx context.Context) error {
	host, portStr, err := net.SplitHostPort(m.cfg.Advertise)
	if err != nil {
		return fmt.Errorf("advertise address %q: %w", m.cfg.Advertise, err)
	}
	port, _ := strconv.Atoi(portStr)
	endpoints := []*commonv1.Endpoint{{Name: "grpc", Host: host, Port: int32(port)}}
	if m.cfg.KafkaAdvertise != "" {
		khost, kport, err := net.SplitHostPort(m.cfg.KafkaAdvertise)
		if err != nil {
			return fmt.Errorf("Kafka advertise address %q: %w", m.cfg.KafkaAdvertise, err)
		}
		p, _ := strconv.Atoi(kport)
		endpoints = append(endpoints, &commonv1.Endpoint{Name: "kafka", Host: khost, Port: int32(p)})
	}
	m.mu.Lock()
	clusterID := m.clusterID
	m.mu.Unlock()
	var resp *controllerv1.RegisterBrokerResponse
	err = m.call(ctx, func(ctx context.Context, c controllerv1.ControllerServiceClient) error {
		var err error
		resp, err = c.RegisterBroker(ctx, &controllerv1.RegisterBrokerRequest{
			BrokerId: m.cfg.NodeID, IncarnationId: m.incarnation, ClusterId: clusterID, Rack: m.cfg.Rack,
			Endpoints: endpoints,
			Roles:     m.cfg.Roles,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("registering node %d: %w", m.cfg.NodeID, err)
	}
	m.mu.Lock()
	m.clusterID = resp.GetClusterId()
	m.interval = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
	m.sessionTimeout = time.Duration(resp.GetSessionTimeoutMs()) * time.Millisecond
	// A new epoch's session counts from its first answered heartbeat.
	m.leaseUntil = time.Time{}
	m.mu.Unlock()
	m.set(resp.GetBrokerEpoch(), commonv1.BrokerState_BROKER_STATE_FENCED)
	m.logger.Info("registered with the controller", log.BrokerEpoch(resp.GetBrokerEpoch()))
	return nil
}

// heartbeatLoop keeps one heartbeat stream open to the active controller,
// sending a heartbeat every interval, and re-registers when told the epoch
// is stale.
func (m *Member) heartbeatLoop(ctx context.Context) {
	for ctx.Err() == nil {
		err := m.heartbeatStream(ctx)
		if ctx.Err() != nil {
			return
		}
		if errs.Is(err, errs.StaleBrokerEpoch) {
			m.logger.Warn("the controller fenced this node (session expired); registering again", log.BrokerEpoch(m.Epoch()))
			m.endLease()
			m.set(m.Epoch(), commonv1.BrokerState_BROKER_STATE_FENCED)
			if err := m.register(ctx); err != nil && ctx.Err() == nil {
				m.logger.Warn("cannot register again; retrying", log.Err(err))
			}
			continue
		}
		m.logger.Debug("heartbeat stream ended; reconnecting", log.Err(err))
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// heartbeatStream runs one stream until it fails. A heartbeat not answered
// within two intervals ends it (the controller may be paused or cut off).
func (m *Member) heartbeatStream(ctx context.Context) error {
	var stream grpc.BidiStreamingClient[controllerv1.BrokerHeartbeatRequest, controllerv1.BrokerHeartbeatResponse]
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := m.call(ctx, func(_ context.Context, c controllerv1.ControllerServiceClient) error {
		var err error
		stream, err = c.BrokerHeartbeat(sctx)
		if err != nil {
			return err
		}
		// The first exchange proves this controller is the active one.
		return m.beat(stream)
	})
	if err != nil {
		return err
	}
	for {
		m.mu.Lock()
		interval := m.interval
		if m.state == commonv1.BrokerState_BROKER_STATE_FENCED {
			// Until unfenced, ask often: the node serves nothing meanwhile.
			interval = min(interval, 200*time.Millisecond)
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		if err := m.beat(stream); err != nil {
			return err
		}
	}
}

// beat sends one heartbeat and waits for its answer.
func (m *Member) beat(stream grpc.BidiStreamingClient[controllerv1.BrokerHeartbeatRequest, controllerv1.BrokerHeartbeatResponse]) error {
	m.mu.Lock()
	epoch, interval := m.epoch, m.interval
	m.mu.Unlock()
	sent := time.Now()
	if err := stream.Send(&controllerv1.BrokerHeartbeatRequest{BrokerId: m.cfg.NodeID, BrokerEpoch: epoch}); err != nil {
		return err
	}
	type result struct {
		resp *controllerv1.BrokerHeartbeatResponse
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		resp, err := stream.Recv()
		ch <- result{resp, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		if e := errs.FromProto(r.resp.GetError()); e != nil {
			if e.Code == errs.StaleBrokerEpoch {
				m.endLease()
			}
			return e
		}
		m.renew(epoch, sent)
		if r.resp.GetState() != m.State() {
			m.logger.Info("node state changed", slog.String("state", r.resp.GetState().String()), log.BrokerEpoch(epoch))
		}
		m.set(epoch, r.resp.GetState())
		return nil
	case <-time.After(2*interval + time.Second):
		return fmt.Errorf("no heartbeat answer within %v", 2*interval+time.Second)
	}
}

// ControlledShutdown asks the controller to move leadership away from this
// node, until none remains or ctx ends.
func (m *Member) ControlledShutdown(ctx context.Context) error {
	for {
		var remaining int32
		// No controller within a few seconds (the whole cluster is going
		// down): stop without moving leadership rather than hang.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := m.call(cctx, func(ctx context.Context, c controllerv1.ControllerServiceClient) error {
			resp, err := c.ControlledShutdown(ctx, &controllerv1.ControlledShutdownRequest{BrokerId: m.cfg.NodeID, BrokerEpoch: m.Epoch()})
			if err != nil {
				return err
			}
			if e := errs.FromProto(resp.GetError()); e != nil {
				return e
			}
			remaining = resp.GetRemainingLeaderships()
			return nil
		})
		cancel()
		if err != nil {
			return err
		}
		if remaining == 0 {
			m.logger.Info("controlled shutdown: no leadership left")
			return nil
		}
		m.logger.Info("controlled shutdown: waiting for leadership to move", slog.Int("remaining", int(remaining)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlled shutdown: %d leaderships remain: %w", remaining, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
