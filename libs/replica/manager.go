package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/topicconfig"
)

// Config tunes the replica manager.
type Config struct {
	// Dir holds one directory per replica.
	Dir string
	// LagTimeMax is replica.lag.time.max.ms: a follower that has not caught
	// up for this long leaves the ISR.
	LagTimeMax time.Duration
	// Storage are the process-level options of every log.
	Storage storage.Options
	// OfflineRetryMin and OfflineRetryMax bound the backoff between
	// attempts to reopen a replica whose log went offline after a
	// transient I/O error such as a full disk; zero means 1 s and 30 s.
	OfflineRetryMin, OfflineRetryMax time.Duration
	// Now is the clock lag decisions read (ISR shrink and expansion); nil
	// is time.Now. Tests inject one to simulate minutes in milliseconds.
	Now func() time.Time
}

// TP names a partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// Manager holds this node's replicas.
type Manager struct {
	cfg    Config
	nodeID int32
	cache  *metadata.Cache
	member *membership.Member
	pool   *wire.Pool
	logger *slog.Logger

	// cleaner enforces retention and compacts compacted topics in the
	// background, one log at a time.
	cleaner *storage.Cleaner
	// off tracks replicas whose log went offline (offline.go).
	off offlineTracker
	// throttle bounds what this node sends to replicas being added by
	// reassignments (throttle.go).
	throttle throttle
	// throttledBytes and throttledWaits count what the throttle let
	// through and held back; nil until RegisterMetrics.
	throttledBytes, throttledWaits metric.Int64Counter

	mu    sync.RWMutex
	parts map[TP]*Partition
	// changed is closed (and replaced) when the set of partitions or their
	// roles change; follower fetchers wait on it.
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	// stopping is closed when Stop begins: long-lived streams (fetch,
	// follower fetch) end so the server can stop without waiting for them.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// Stopping returns a channel closed when the manager begins to stop.
func (m *Manager) Stopping() <-chan struct{} { return m.stopping }

// NewManager returns a manager; Start opens the replicas metadata assigns.
func NewManager(cfg Config, nodeID int32, cache *metadata.Cache, member *membership.Member, pool *wire.Pool, logger *slog.Logger) *Manager {
	if cfg.LagTimeMax == 0 {
		cfg.LagTimeMax = 30 * time.Second
	}
	if cfg.OfflineRetryMin <= 0 {
		cfg.OfflineRetryMin = time.Second
	}
	if cfg.OfflineRetryMax < cfg.OfflineRetryMin {
		cfg.OfflineRetryMax = max(30*time.Second, cfg.OfflineRetryMin)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{
		cfg: cfg, nodeID: nodeID, cache: cache, member: member, pool: pool,
		logger: logger.With(log.Component("replicas")),
		parts:  map[TP]*Partition{}, changed: make(chan struct{}), stopping: make(chan struct{}),
		off:      offlineTracker{wake: make(chan struct{}, 1), states: map[*Partition]*offlineState{}},
		throttle: throttle{now: time.Now},
	}
}

// NodeID returns this node's id.
func (m *Manager) NodeID() int32 { return m.nodeID }

// Start follows metadata: it opens replicas assigned to this node, makes
// them leaders or followers, and closes and deletes replicas that left.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", m.cfg.Dir, err)
	}
	if _, err := m.cache.WaitFor(ctx, func(*metadata.Image) bool { return m.cache.Loaded() }); err != nil {
		return err
	}
	m.cleaner = storage.NewCleaner(storage.CleanerOptions{Logger: m.logger})
	// Take the change signal before reading the image, so a change that
	// lands in between is applied too.
	changed := m.cache.Changed()
	m.apply(m.cache.Load())
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.done = make(chan struct{})
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		m.runRecovery(runCtx)
	}()
	go func() {
		defer close(m.done)
		m.run(runCtx, changed)
		<-recovered
	}()
	return nil
}

// Stop closes every log (cleanly, so the next start skips recovery).
func (m *Manager) Stop(ctx context.Context) error {
	m.stoppingOnce.Do(func() { close(m.stopping) })
	if m.cancel != nil {
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
		}
	}
	if m.cleaner != nil {
		m.cleaner.Close() // a compaction in progress is abandoned, leaving its log as it was
	}
	m.mu.Lock()
	parts := m.parts
	m.parts = map[TP]*Partition{}
	m.signal()
	m.mu.Unlock()
	var errList []error
	for _, p := range parts {
		if err := p.close(); err != nil {
			errList = append(errList, err)
		}
	}
	return errors.Join(errList...)
}

// run applies every metadata change and runs the leaders' periodic work
// (ISR shrink checks, high-watermark checkpoints). Retention and compaction
// run in the cleaner.
func (m *Manager) run(ctx context.Context, changed <-chan struct{}) {
	tick := time.NewTicker(min(m.cfg.LagTimeMax/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = m.cache.Changed()
			m.apply(m.cache.Load())
		case <-tick.C:
			for _, p := range m.Partitions() {
				p.periodic(ctx)
			}
		}
	}
}

// Partitions returns the open partitions.
func (m *Manager) Partitions() []*Partition {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Partition, 0, len(m.parts))
	for _, p := range m.parts {
		out = append(out, p)
	}
	return out
}

// Get returns an open partition.
func (m *Manager) Get(tp TP) (*Partition, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.parts[tp]
	return p, ok
}

// Changed returns a channel closed when partitions are added, removed or
// change role.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

func (m *Manager) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// apply brings the open replicas in line with an image.
func (m *Manager) apply(img *metadata.Image) {
	want := map[TP]*commonv1.PartitionState{}
	topicID := map[string]string{}
	for name, t := range img.Topics {
		for _, ps := range t.Partitions {
			if ps != nil && slices.Contains(ps.GetReplicas(), m.nodeID) {
				want[TP{name, ps.GetPartition()}] = ps
				topicID[name] = t.ID
			}
		}
	}
	m.mu.Lock()
	var removed []*Partition
	for tp, p := range m.parts {
		if _, ok := want[tp]; !ok || p.topicID != topicID[tp.Topic] {
			removed = append(removed, p)
			delete(m.parts, tp)
		}
	}
	var opened []*Partition
	for tp := range want {
		if _, ok := m.parts[tp]; ok {
			continue
		}
		p, err := m.open(tp, topicID[tp.Topic], img)
		if err != nil {
			m.logger.Error("cannot open replica", log.TopicPartition(tp.Topic, tp.Partition), log.Err(err))
			continue
		}
		m.parts[tp] = p
		m.cleaner.Add(p.log)
		opened = append(opened, p)
	}
	parts := make([]*Partition, 0, len(m.parts))
	for _, p := range m.parts {
		parts = append(parts, p)
	}
	m.mu.Unlock()

	roleChanged := len(removed) > 0 || len(opened) > 0
	for _, p := range parts {
		cfg := effectiveConfig(img, p.tp.Topic)
		if p.applyState(want[p.tp], cfg, img) {
			roleChanged = true
		}
	}
	for _, p := range removed {
		m.cleaner.Remove(p.log)
		m.logger.Info("replica removed; deleting its data", log.TopicPartition(p.tp.Topic, p.tp.Partition))
		_ = p.close() // the log goes away with its directory
		if err := os.RemoveAll(p.dir); err != nil {
			m.logger.Warn("cannot delete replica data", log.TopicPartition(p.tp.Topic, p.tp.Partition), log.Err(err))
		}
	}
	if roleChanged {
		m.mu.Lock()
		m.signal()
		m.mu.Unlock()
	}
}

// effectiveConfig resolves a topic's storage config from its overrides and
// the cluster-wide defaults.
func effectiveConfig(img *metadata.Image, topic string) topicSettings {
	var overrides map[string]string
	if t, ok := img.Topics[topic]; ok {
		overrides = t.Configs
	}
	eff := topicconfig.Effective(overrides, img.ClusterConfigs)
	st := map[string]string{}
	for k, v := range eff {
		if _, ok := storage.LookupConfig(k); ok {
			st[k] = v
		}
	}
	cfg, err := storage.ParseConfig(st)
	if err != nil {
		cfg = storage.DefaultConfig() // validated by the controller; never expected
	}
	minISR, _ := strconv.Atoi(eff["min.insync.replicas"])
	return topicSettings{storage: cfg, minISR: max(minISR, 1)}
}

type topicSettings struct {
	storage storage.Config
	minISR  int
}

// open opens (or creates) a replica's log. A directory left by an earlier
// topic of the same name (another topic id) is wiped first.
func (m *Manager) open(tp TP, topicID string, img *metadata.Image) (*Partition, error) {
	dir := filepath.Join(m.cfg.Dir, dirName(tp))
	idFile := filepath.Join(dir, "topic-id")
	if b, err := os.ReadFile(idFile); err == nil && strings.TrimSpace(string(b)) != topicID {
		m.logger.Info("replica directory belongs to a deleted topic of the same name; wiping it", log.TopicPartition(tp.Topic, tp.Partition))
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	settings := effectiveConfig(img, tp.Topic)
	opts := m.cfg.Storage
	if opts.Logger == nil {
		opts.Logger = m.logger
	}
	// The log's own reports (recovery, going offline) name the partition.
	opts.Logger = opts.Logger.With(log.TopicPartition(tp.Topic, tp.Partition))
	opts.OnOffline = m.noteOffline
	l, err := storage.Open(dir, settings.storage, opts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(idFile, []byte(topicID+"\n"), 0o644); err != nil {
		_ = l.Close() // reporting the write error
		return nil, err
	}
	p := newPartition(m, tp, topicID, dir, l)
	return p, nil
}

// dirName is the directory of a replica: topic names cannot contain '/'.
func dirName(tp TP) string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// unfenced returns an error while the controller considers this node
// fenced. A node that just restarted registers fenced, and its old
// leaderships move before it is unfenced: until then metadata may still
// name it leader, but it must not act as one (with a log that may have lost
// its unflushed tail, it would accept writes at offsets its followers hold
// other records for).
func (m *Manager) unfenced() error {
	if m.member == nil {
		return nil
	}
	switch m.member.State() {
	case commonv1.BrokerState_BROKER_STATE_ALIVE, commonv1.BrokerState_BROKER_STATE_SHUTTING_DOWN:
		return nil
	}
	return errs.New(errs.NotLeaderOrFollower, "node %d is fenced while it rejoins the cluster; its leaderships are moving", m.nodeID)
}

// brokerEpoch returns this node's current broker epoch.
func (m *Manager) brokerEpoch() int64 {
	if m.member == nil {
		return 0
	}
	return m.member.Epoch()
}
