package kafka

import (
	"encoding/hex"
	"strings"
	"sync/atomic"

	"github.com/sluice-io/sluice/libs/metadata"
)

// TopicID converts a topic id as the metadata image keeps it (a UUID in its
// text form) to Kafka's 16 bytes; ok is false for anything else, which
// Kafka clients see as the zero UUID ("no id").
func TopicID(s string) (id [16]byte, ok bool) {
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return [16]byte{}, false
	}
	return id, true
}

// TopicIDString is the text form of a Kafka topic id, as the metadata image
// keeps ids.
func TopicIDString(id [16]byte) string {
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// TopicIndex maps Kafka topic ids to names and back for one metadata image.
type TopicIndex struct {
	img   *metadata.Image
	names map[[16]byte]string
	ids   map[string][16]byte
}

// Name returns the topic with id.
func (t *TopicIndex) Name(id [16]byte) (string, bool) {
	n, ok := t.names[id]
	return n, ok
}

// ID returns the id of topic; ok is false when the topic does not exist or
// has no id.
func (t *TopicIndex) ID(topic string) ([16]byte, bool) {
	id, ok := t.ids[topic]
	return id, ok
}

var topicIndexCache atomic.Pointer[TopicIndex]

// Topics returns the id index of img. The index of the latest image asked
// for is kept, so requests at the same image (every request between two
// metadata changes) share one.
func Topics(img *metadata.Image) *TopicIndex {
	if t := topicIndexCache.Load(); t != nil && t.img == img {
		return t
	}
	t := &TopicIndex{img: img, names: make(map[[16]byte]string, len(img.Topics)), ids: make(map[string][16]byte, len(img.Topics))}
	for name, tp := range img.Topics {
		if id, ok := TopicID(tp.ID); ok {
			t.names[id] = name
			t.ids[name] = id
		}
	}
	topicIndexCache.Store(t)
	return t
}
