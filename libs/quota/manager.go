package quota

import (
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Options configure a Manager. The zero value is usable: Kafka's defaults
// (11 samples of 1 s), sensors expiring after an hour idle, no log output,
// no metrics.
type Options struct {
	// WindowNum is the number of samples a rate is measured over (Kafka's
	// quota.window.num, default 11).
	WindowNum int
	// WindowSize is the span of one sample (Kafka's
	// quota.window.size.seconds, default 1 s). The longest throttle time
	// answered is the whole window (see MaxThrottle).
	WindowSize time.Duration
	// SensorExpiry drops an entity's sensor after this long without a
	// record (Kafka: one hour). Default one hour.
	SensorExpiry time.Duration
	// Logger receives quota table changes.
	Logger *slog.Logger
	// Metrics records throttle times and rates; nil records none.
	Metrics *Metrics
	// MaxConnectionsPerIP bounds the connections open at once from one
	// address on a listener wrapped by LimitListener; 0: no limit.
	MaxConnectionsPerIP int
	// MaxConnectionsPerIPOverrides are per-address exceptions (0: no
	// limit).
	MaxConnectionsPerIPOverrides map[netip.Addr]int
	// Now is the clock; tests inject one. Default time.Now.
	Now func() time.Time
}

// Manager enforces a process's client quotas: it holds the current Table
// and a sensor per matched entity and quota key, and answers how long a
// client over its quota must back off. It is safe for concurrent use; a
// request costs a map lookup under a read lock and a sensor update under
// the sensor's own lock, with no allocation once the client is known.
type Manager struct {
	opts Options

	mu        sync.RWMutex
	table     *Table
	revision  int64
	bindings  map[client]*binding
	sensors   map[string]*sensor
	lastSweep int64
}

// client is who a request is from, as quotas see it.
type client struct{ user, clientID string }

// binding is what a client's requests are measured against, one limit per
// quota key (a nil sensor: no quota of that key applies).
type binding struct {
	limits [numKeys]limit
}

type limit struct {
	quota  float64
	sensor *sensor
	entity string // the matched entity, concrete names, for metrics
}

// Quota keys a request records against, as indexes.
const (
	keyProduce = iota
	keyFetch
	keyRequest
	numKeys
)

var keyNames = [numKeys]string{ProducerByteRate, ConsumerByteRate, RequestPercentage}

// NewManager returns a Manager with an empty table (nothing is throttled).
func NewManager(opts Options) *Manager {
	if opts.WindowNum <= 0 {
		opts.WindowNum = 11
	}
	if opts.WindowSize <= 0 {
		opts.WindowSize = time.Second
	}
	if opts.SensorExpiry <= 0 {
		opts.SensorExpiry = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		opts: opts, table: NewTable(nil),
		bindings: map[client]*binding{}, sensors: map[string]*sensor{},
		lastSweep: opts.Now().UnixNano(),
	}
}

// SetTable replaces the quota table; revision is the metadata revision it
// came from. The next request of every connection is measured against it;
// the rates measured so far are kept, so a changed quota applies to the
// traffic of the last window at once.
func (m *Manager) SetTable(t *Table, revision int64) {
	if t == nil {
		t = NewTable(nil)
	}
	m.mu.Lock()
	m.table, m.revision = t, revision
	m.bindings = map[client]*binding{}
	m.mu.Unlock()
	m.opts.Logger.Info("client quotas applied", slog.Int("entities", len(t.entries)), slog.Int64("revision", revision))
}

// Table returns the current quota table.
func (m *Manager) Table() *Table {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.table
}

// MaxThrottle is the longest throttle time the manager answers: the span
// of the whole window (WindowNum samples), 11 s by default.
//
// Kafka caps request_percentage and connection-rate throttles at one
// sample and leaves byte-rate throttles uncapped. Capped at one sample, a
// client whose requests each carry about a sample's worth of quota or more
// is admitted a whole request after every capped throttle and never pays
// its debt (a franz-go producer sending 1 MB batches against a 1 MiB/s
// quota ran 10-15 % over it that way); uncapped, one huge request can hold
// a client past its request timeout. Waiting the whole window always
// suffices: by then everything the window measured has left it.
func (m *Manager) MaxThrottle() time.Duration {
	return time.Duration(m.opts.WindowNum) * m.opts.WindowSize
}

// RecordProduce records bytes produced by a client (principal is the
// authenticated principal, "User:alice"; clientID the client's id) and
// returns how long the client must back off (zero: within its quota).
func (m *Manager) RecordProduce(principal, clientID string, bytes int) time.Duration {
	return m.record(principal, clientID, keyProduce, float64(bytes))
}

// RecordFetch records bytes fetched by a client and returns how long it
// must back off.
func (m *Manager) RecordFetch(principal, clientID string, bytes int) time.Duration {
	return m.record(principal, clientID, keyFetch, float64(bytes))
}

// RecordRequestTime records time spent handling a client's request and
// returns how long it must back off: request_percentage is the share of
// one handler's time, in percent, over the window.
func (m *Manager) RecordRequestTime(principal, clientID string, d time.Duration) time.Duration {
	return m.record(principal, clientID, keyRequest, d.Seconds()*100)
}

func (m *Manager) record(principal, clientID string, key int, v float64) time.Duration {
	if m == nil {
		return 0
	}
	l := m.limitFor(client{user: userOf(principal), clientID: clientID}, key)
	if l.sensor == nil {
		return 0
	}
	now := m.opts.Now().UnixNano()
	rate, span := l.sensor.record(now, v)
	var throttle time.Duration
	if rate > l.quota {
		throttle = throttleTime(rate, l.quota, span, m.MaxThrottle())
	}
	if m.opts.Metrics != nil {
		m.opts.Metrics.observe(keyNames[key], l.entity, v, throttle)
	}
	return throttle
}

// throttleTime is Kafka's: the time that, added to the window's span with
// nothing more recorded, brings the rate back down to the quota, capped at
// max.
func throttleTime(rate, quota float64, span, max time.Duration) time.Duration {
	d := time.Duration((rate - quota) / quota * float64(span))
	if d > max || d < 0 || math.IsNaN(float64(d)) {
		return max
	}
	return d
}

// userOf is the quota user of a principal: its name without the "User:"
// type, as Kafka's quotas name users.
func userOf(principal string) string {
	if name, ok := strings.CutPrefix(principal, "User:"); ok {
		return name
	}
	return principal
}

// limitFor returns the client's limit of key, resolving and caching the
// client's binding on first use.
func (m *Manager) limitFor(c client, key int) limit {
	m.mu.RLock()
	b, ok := m.bindings[c]
	m.mu.RUnlock()
	if ok {
		return b.limits[key]
	}
	now := m.opts.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.bindings[c]; ok {
		return b.limits[key]
	}
	if now-m.lastSweep > int64(m.opts.SensorExpiry)/2 {
		m.sweepLocked(now)
	}
	b = &binding{}
	for k := range numKeys {
		ent, q, ok := resolve(m.table, c, keyNames[k])
		if !ok {
			continue
		}
		sk := keyNames[k] + "|" + ent
		s := m.sensors[sk]
		if s == nil {
			s = newSensor(m.opts.WindowNum, m.opts.WindowSize, now)
			m.sensors[sk] = s
		}
		b.limits[k] = limit{quota: q, sensor: s, entity: ent}
	}
	m.bindings[c] = b
	return b.limits[key]
}

// sweepLocked drops the sensors idle for longer than SensorExpiry, and
// with them every cached binding (rebuilt on next use), so no binding
// keeps a dropped sensor.
func (m *Manager) sweepLocked(now int64) {
	m.lastSweep = now
	for k, s := range m.sensors {
		if now-s.lastRecord() > int64(m.opts.SensorExpiry) {
			delete(m.sensors, k)
		}
	}
	m.bindings = map[client]*binding{}
}

// Sweep drops idle sensors now (it also happens on its own as clients come
// and go).
func (m *Manager) Sweep() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(m.opts.Now().UnixNano())
}

// sensorCount is the number of live sensors, for tests.
func (m *Manager) sensorCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sensors)
}

// resolve finds the quota of key that applies to c, in Kafka's order of
// precedence (the first entity with a value for key wins):
//
//	user+client-id, user+default client-id, user,
//	default user+client-id, default user+default client-id, default user,
//	client-id, default client-id
//
// and returns the matched entity with each default component replaced by
// the client's own name: a default quota applies to each user (or client
// id) separately, as in Kafka, and every connection of that user (or
// client id) shares its sensor.
func resolve(t *Table, c client, key string) (entity string, quota float64, ok bool) {
	u, cid := "user="+keyName(c.user), "client-id="+keyName(c.clientID)
	du, dc := "user="+DefaultName, "client-id="+DefaultName
	candidates := [...]struct{ match, sensor string }{
		{u + "," + cid, u + "," + cid},
		{u + "," + dc, u + "," + cid},
		{u, u},
		{du + "," + cid, u + "," + cid},
		{du + "," + dc, u + "," + cid},
		{du, u},
		{cid, cid},
		{dc, cid},
	}
	for _, cand := range candidates {
		if v, ok := t.value(cand.match, key); ok {
			return cand.sensor, v, true
		}
	}
	return "", 0, false
}
