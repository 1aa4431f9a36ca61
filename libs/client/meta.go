package client

import (
	"context"
	"sync"
	"time"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/errs"
)

// metaCache keeps what producers and consumers need to know about topics:
// partition counts, leaders, leader epochs and addresses. It refreshes a
// topic on demand (an unknown topic, a NOT_LEADER error) and applies leader
// hints from errors at once, without a metadata round trip.
type metaCache struct {
	c *Client

	mu      sync.Mutex
	topics  map[string]*topicMeta
	loading map[string]chan struct{}
}

type topicMeta struct {
	partitions []partMeta
	fetched    time.Time
}

type partMeta struct {
	leader int32
	epoch  int32
	addr   string
}

type leaderInfo struct {
	id    int32
	epoch int32
	addr  string
}

// metadataMaxAge is metadata.max.age.ms: a topic's metadata is refreshed at
// least this often.
const metadataMaxAge = 5 * time.Minute

func newMetaCache(c *Client) *metaCache {
	return &metaCache{c: c, topics: map[string]*topicMeta{}, loading: map[string]chan struct{}{}}
}

// partitions returns a topic's partition count, fetching its metadata if
// needed.
func (m *metaCache) partitions(ctx context.Context, topic string, now time.Time) (int32, error) {
	m.mu.Lock()
	t, ok := m.topics[topic]
	m.mu.Unlock()
	if ok && now.Sub(t.fetched) < metadataMaxAge {
		return int32(len(t.partitions)), nil
	}
	if err := m.refresh(ctx, topic); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return int32(len(m.topics[topic].partitions)), nil
}

// refresh fetches a topic's metadata; concurrent callers share one fetch.
func (m *metaCache) refresh(ctx context.Context, topic string) error {
	m.mu.Lock()
	if ch, ok := m.loading[topic]; ok {
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
		_, ok := m.topics[topic]
		m.mu.Unlock()
		if !ok {
			return errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", topic)
		}
		return nil
	}
	ch := make(chan struct{})
	m.loading[topic] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.loading, topic)
		m.mu.Unlock()
		close(ch)
	}()
	md, err := m.c.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	ti := md.GetTopics()[0]
	if e := errs.FromProto(ti.GetError()); e != nil {
		return e
	}
	addrs := map[int32]string{}
	for _, b := range md.GetBrokers() {
		for _, e := range b.GetEndpoints() {
			addrs[b.GetId()] = joinHostPort(e.GetHost(), e.GetPort())
			break
		}
	}
	t := &topicMeta{fetched: time.Now(), partitions: make([]partMeta, len(ti.GetPartitions()))}
	for i, p := range ti.GetPartitions() {
		t.partitions[i] = partMeta{leader: p.GetLeaderId(), epoch: p.GetLeaderEpoch(), addr: addrs[p.GetLeaderId()]}
	}
	m.mu.Lock()
	m.topics[topic] = t
	m.mu.Unlock()
	return nil
}

// known returns the partition count of a topic whose metadata is cached,
// however old.
func (m *metaCache) known(topic string) (int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[topic]
	if !ok {
		return 0, false
	}
	return int32(len(t.partitions)), true
}

// refreshIfStale refreshes, in the background, a topic whose metadata is
// older than metadataMaxAge.
func (m *metaCache) refreshIfStale(topic string, now time.Time) {
	m.mu.Lock()
	t, ok := m.topics[topic]
	m.mu.Unlock()
	if ok && now.Sub(t.fetched) >= metadataMaxAge {
		m.refreshSoon(topic)
	}
}

// refreshSoon refreshes a topic in the background.
func (m *metaCache) refreshSoon(topic string) {
	m.mu.Lock()
	_, busy := m.loading[topic]
	m.mu.Unlock()
	if busy {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.refresh(ctx, topic) // failures show up as the next send's error
	}()
}

// leader returns a partition's leader, if known and alive.
func (m *metaCache) leader(topic string, p int32) (leaderInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[topic]
	if !ok || int(p) >= len(t.partitions) {
		return leaderInfo{}, false
	}
	pm := t.partitions[p]
	if pm.leader < 0 || pm.addr == "" {
		return leaderInfo{}, false
	}
	return leaderInfo{id: pm.leader, epoch: pm.epoch, addr: pm.addr}, true
}

// leaderEpoch returns the leader epoch to send with requests.
func (m *metaCache) leaderEpoch(topic string, p int32) (*int32, bool) {
	l, ok := m.leader(topic, p)
	if !ok {
		return nil, false
	}
	e := l.epoch
	return &e, true
}

// hint applies a leader hint from an error.
func (m *metaCache) hint(topic string, p int32, h *edpb.LeaderHint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[topic]
	if !ok || int(p) >= len(t.partitions) {
		return
	}
	if h.GetLeaderId() < 0 || h.GetLeaderEpoch() < t.partitions[p].epoch {
		return
	}
	t.partitions[p] = partMeta{leader: h.GetLeaderId(), epoch: h.GetLeaderEpoch(), addr: h.GetLeaderAddress()}
}
