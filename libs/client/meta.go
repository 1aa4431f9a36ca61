package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// metaCache keeps what producers and consumers need to know about topics:
// partition counts, leaders, leader epochs and addresses. It refreshes a
// topic on demand (an unknown topic, a NOT_LEADER error) and applies leader
// hints from errors at once, without a metadata round trip.
type metaCache struct {
	c *Client

	mu      sync.Mutex
	topics  map[string]*topicMeta
	loading map[string]*load
	// absent holds topics that metadata said do not exist, with that
	// answer: a producer fails their batches instead of retrying them.
	absent map[string]*errs.Error
}

// load is one metadata fetch in progress; err is its result once done is
// closed.
type load struct {
	done chan struct{}
	err  error
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
	return &metaCache{c: c, topics: map[string]*topicMeta{}, loading: map[string]*load{}, absent: map[string]*errs.Error{}}
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
	return m.countLocked(topic)
}

// countLocked returns the partition count of a refreshed topic. The entry
// can be gone already: a concurrent refresh may have learned, between this
// caller's refresh and now, that the topic was deleted. m.mu must be held.
func (m *metaCache) countLocked(topic string) (int32, error) {
	t, ok := m.topics[topic]
	if !ok {
		if e, gone := m.absent[topic]; gone {
			return 0, e
		}
		return 0, errs.New(errs.UnknownTopicOrPartition, "topic %q has no metadata", topic)
	}
	return int32(len(t.partitions)), nil
}

// partitionsWait is partitions with retries: retriable failures (no node
// reachable, a node still starting) are retried with backoff until timeout
// or ctx ends; the last one is in the error then. A topic metadata says
// does not exist fails at once.
func (m *metaCache) partitionsWait(ctx context.Context, topic string, timeout time.Duration) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var b backoff
	for {
		n, err := m.partitions(ctx, topic, time.Now())
		if err == nil || !m.c.retryTopicMetadata(topic, err) {
			return n, err
		}
		if !b.wait(ctx) {
			return 0, timedOut(fmt.Sprintf("metadata of topic %q not available within %v", topic, timeout), err)
		}
	}
}

// retryMetadata says whether a failed metadata fetch is worth retrying: a
// retriable error other than the topic's absence, which a metadata answer
// states with authority.
func retryMetadata(err error) bool {
	return errs.IsRetriable(err) && !errs.Is(err, errs.UnknownTopicOrPartition)
}

// timedOut is the error of an operation that kept failing until its time
// ran out: REQUEST_TIMED_OUT with the last error as cause (as Kafka's
// clients report it).
func timedOut(what string, last error) *errs.Error {
	return errs.New(errs.RequestTimedOut, "%s; last error: %w", what, last)
}

// backoff doubles a wait from 50 ms up to 1 s (retry.backoff.ms,
// retry.backoff.max.ms).
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 50*time.Millisecond), time.Second)
	return b.d
}

// wait sleeps for the next backoff; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refresh fetches a topic's metadata; concurrent callers share one fetch.
func (m *metaCache) refresh(ctx context.Context, topic string) error {
	m.mu.Lock()
	if l, ok := m.loading[topic]; ok {
		m.mu.Unlock()
		select {
		case <-l.done:
			return l.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l := &load{done: make(chan struct{})}
	m.loading[topic] = l
	m.mu.Unlock()
	l.err = m.fetch(ctx, topic)
	m.mu.Lock()
	delete(m.loading, topic)
	m.mu.Unlock()
	close(l.done)
	return l.err
}

func (m *metaCache) fetch(ctx context.Context, topic string) error {
	md, err := m.c.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	if len(md.GetTopics()) == 0 {
		return errs.New(errs.UnknownServerError, "metadata for topic %q came back without the topic", topic)
	}
	ti := md.GetTopics()[0]
	if e := errs.FromProto(ti.GetError()); e != nil {
		if e.Code == errs.UnknownTopicOrPartition {
			m.mu.Lock()
			delete(m.topics, topic)
			m.absent[topic] = e
			m.mu.Unlock()
		}
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
	delete(m.absent, topic)
	m.mu.Unlock()
	return nil
}

// absentErr returns metadata's answer that a topic does not exist, if that
// was its last answer.
func (m *metaCache) absentErr(topic string) (*errs.Error, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.absent[topic]
	return e, ok
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
