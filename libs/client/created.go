package client

import (
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// createdGrace is how long after this client created a topic an answer that
// the topic does not exist is taken for a node whose metadata has not caught
// up with the controller yet, and retried. CreateTopics returns once the
// controller committed the topic; every other node learns it from the
// controller's metadata stream a moment later, so a metadata or list-offsets
// call sent right away to another node can be told UNKNOWN_TOPIC_OR_PARTITION
// (Kafka's clients retry that error too: it is an invalid-metadata error).
const createdGrace = 30 * time.Second

// createdTopics remembers when this client created which topics.
type createdTopics struct {
	mu sync.Mutex
	at map[string]time.Time
}

// note records that topic was created now.
func (t *createdTopics) note(topic string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	for name, at := range t.at {
		if now.Sub(at) >= createdGrace {
			delete(t.at, name)
		}
	}
	t.at[topic] = now
}

// forget drops topic: this client deleted it, so a node's answer that it
// does not exist is the truth, not a node catching up.
func (t *createdTopics) forget(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.at, topic)
}

// recent reports whether topic was created less than createdGrace ago.
func (t *createdTopics) recent(topic string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[topic]
	return ok && now.Sub(at) < createdGrace
}

// retryTopicMetadata is retryMetadata for an answer about one topic: a
// retriable error other than the topic's absence, or its absence right
// after this client created it (a node still catching up).
func (c *Client) retryTopicMetadata(topic string, err error) bool {
	return retryMetadata(err) || (errs.Is(err, errs.UnknownTopicOrPartition) && c.created.recent(topic, time.Now()))
}
