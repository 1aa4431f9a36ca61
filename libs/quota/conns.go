package quota

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Connection limits per IP address, on any listener wrapped by
// LimitListener:
//
//   - max connections per IP (--quota.max-connections-per-ip, with
//     per-address overrides): a connection over the limit is closed as
//     soon as it is accepted, with a log line (at most one a second), as
//     Kafka does; the client sees the connection reset and reconnects
//     later.
//   - connection_creation_rate per ip (from the quota table: the ip's own
//     entry, else the default ip's): a connection that brings the
//     address's rate over the quota is accepted, but the server reads
//     nothing from it until the throttle time has passed, so the client
//     waits instead of reconnecting in a loop; it counts against the
//     address's open connections meanwhile, so a flood stays bounded by
//     the connection limit.
//
// Connections from the same address to two listeners count separately,
// each against its own listener's limit.

// LimitListener returns lis with the manager's per-IP connection limits
// applied to what it accepts; name ("kafka", "grpc") is for log lines.
func (m *Manager) LimitListener(lis net.Listener, name string) net.Listener {
	return &limitListener{Listener: lis, m: m, name: name, open: map[netip.Addr]int{}}
}

type limitListener struct {
	net.Listener
	m       *Manager
	name    string
	mu      sync.Mutex
	open    map[netip.Addr]int
	lastLog atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := addrOf(nc.RemoteAddr())
		if !ip.IsValid() {
			return nc, nil // not an IP connection (a test's pipe): no limits
		}
		if !l.acquire(ip) {
			_ = nc.Close() // refused; nothing was read
			continue
		}
		delay := l.m.recordConnection(ip)
		return &limitedConn{Conn: nc, l: l, ip: ip, readyAt: time.Now().Add(delay), closed: make(chan struct{})}, nil
	}
}

func (l *limitListener) acquire(ip netip.Addr) bool {
	limit := l.m.opts.MaxConnectionsPerIP
	if n, ok := l.m.opts.MaxConnectionsPerIPOverrides[ip]; ok {
		limit = n
	}
	l.mu.Lock()
	n := l.open[ip]
	ok := limit <= 0 || n < limit
	if ok {
		l.open[ip] = n + 1
	}
	l.mu.Unlock()
	if !ok {
		now := time.Now().UnixNano()
		if last := l.lastLog.Load(); now-last > int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
			l.m.opts.Logger.Warn("connection refused: too many connections from one address",
				slog.String("listener", l.name), slog.String("ip", ip.String()), slog.Int("open", n), slog.Int("max", limit))
		}
	}
	return ok
}

func (l *limitListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[ip] - 1; n > 0 {
		l.open[ip] = n
	} else {
		delete(l.open, ip)
	}
}

// limitedConn counts against its address until closed and reads nothing
// before readyAt.
type limitedConn struct {
	net.Conn
	l         *limitListener
	ip        netip.Addr
	readyAt   time.Time
	ready     atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *limitedConn) Read(b []byte) (int, error) {
	if err := c.waitReady(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// waitReady waits until readyAt, the end of the connection's creation
// throttle.
func (c *limitedConn) waitReady() error {
	if !c.ready.Load() {
		if d := time.Until(c.readyAt); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.closed:
				t.Stop()
				return net.ErrClosed
			}
		}
		c.ready.Store(true)
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		close(c.closed)
		c.l.release(c.ip)
	})
	return err
}

// NetConn returns the wrapped connection (for TLS and the like).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// WriteBuffers writes v with the wrapped connection's own gathering write
// (one writev on a TCP socket), which net.Buffers.WriteTo would not find
// through the wrapper.
func (c *limitedConn) WriteBuffers(v *net.Buffers) (int64, error) { return v.WriteTo(c.Conn) }

func addrOf(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Addr{}
		}
	}
	return ap.Addr().Unmap()
}

// recordConnection records a new connection from ip against its
// connection_creation_rate and returns how long to hold it.
func (m *Manager) recordConnection(ip netip.Addr) time.Duration {
	m.mu.RLock()
	t := m.table
	m.mu.RUnlock()
	q, ok := t.value(EntityIP+"="+ip.String(), ConnectionCreationRate)
	if !ok {
		if q, ok = t.value(EntityIP+"="+DefaultName, ConnectionCreationRate); !ok {
			return 0
		}
	}
	key := ConnectionCreationRate + "|" + EntityIP + "=" + ip.String()
	now := m.opts.Now().UnixNano()
	m.mu.Lock()
	s := m.sensors[key]
	if s == nil {
		s = newSensor(m.opts.WindowNum, m.opts.WindowSize, now)
		m.sensors[key] = s
	}
	m.mu.Unlock()
	rate, span := s.record(now, 1)
	var d time.Duration
	if rate > q {
		d = throttleTime(rate, q, span, m.MaxThrottle())
	}
	if m.opts.Metrics != nil {
		m.opts.Metrics.observe(ConnectionCreationRate, EntityIP+"="+ip.String(), 1, d)
	}
	return d
}
