package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// EpochEntry says that leader epoch Epoch wrote its first batch at
// StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// UndefinedEpoch and UndefinedOffset are what EndOffsetForEpoch answers for
// an epoch this log cannot place (Kafka's UNDEFINED_EPOCH and
// UNDEFINED_EPOCH_OFFSET).
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// epochCache is the leader-epoch cache of KIP-101: epoch -> first offset,
// strictly increasing in both. Followers use it to find where their log
// diverges from a new leader's and truncate there instead of at their high
// watermark, which could lose or diverge acknowledged data (KIP-101, with
// KIP-279's fix for consecutive leader changes). Guarded by the log's lock.
type epochCache struct {
	entries []EpochEntry
	dirty   bool // changed since last persisted
}

func (c *epochCache) latest() (EpochEntry, bool) {
	if len(c.entries) == 0 {
		return EpochEntry{Epoch: UndefinedEpoch, StartOffset: UndefinedOffset}, false
	}
	return c.entries[len(c.entries)-1], true
}

// assign records that epoch starts at offset. A known or older epoch is
// ignored; entries that the new one contradicts (same or later epoch, or a
// start at or after offset) are dropped first, as Kafka's
// LeaderEpochFileCache.assign does, so the cache stays monotonic even after
// an unclean leader change.
func (c *epochCache) assign(epoch int32, offset int64) bool {
	if epoch < 0 {
		return false
	}
	if last, ok := c.latest(); ok && (epoch < last.Epoch || (epoch == last.Epoch && offset >= last.StartOffset)) {
		return false
	}
	n := len(c.entries)
	for n > 0 && (c.entries[n-1].Epoch >= epoch || c.entries[n-1].StartOffset >= offset) {
		n--
	}
	c.entries = append(c.entries[:n], EpochEntry{Epoch: epoch, StartOffset: offset})
	c.dirty = true
	return true
}

// truncateFromEnd drops entries that start at or after offset, after the log
// was truncated to end at offset.
func (c *epochCache) truncateFromEnd(offset int64) {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= offset {
		n--
	}
	if n != len(c.entries) {
		c.entries = c.entries[:n]
		c.dirty = true
	}
}

// truncateFromStart forgets entries wholly before offset, the new log start:
// the last epoch that starts before it is kept, moved to start at offset.
func (c *epochCache) truncateFromStart(offset int64) {
	i := 0
	for i+1 < len(c.entries) && c.entries[i+1].StartOffset <= offset {
		i++
	}
	if i > 0 {
		c.entries = append(c.entries[:0], c.entries[i:]...)
		c.dirty = true
	}
	if len(c.entries) > 0 && c.entries[0].StartOffset < offset {
		c.entries[0].StartOffset = offset
		c.dirty = true
	}
}

func (c *epochCache) clear() {
	if len(c.entries) > 0 {
		c.entries = c.entries[:0]
		c.dirty = true
	}
}

// endOffsetFor answers an OffsetsForLeaderEpoch request (KIP-101, KIP-279):
// the largest epoch at most requested that this log knows, and the offset
// where it ended, that is the start of the next epoch, or leo if it is the
// latest. An epoch older than every entry answers (requested, first start);
// a newer one, or an empty cache, answers undefined.
func (c *epochCache) endOffsetFor(requested int32, leo int64) (int32, int64) {
	if requested == UndefinedEpoch || len(c.entries) == 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	last := c.entries[len(c.entries)-1]
	if requested == last.Epoch {
		return requested, leo
	}
	// First entry with an epoch above requested.
	hi := 0
	for hi < len(c.entries) && c.entries[hi].Epoch <= requested {
		hi++
	}
	if hi == len(c.entries) {
		// Requested is newer than every epoch here.
		return UndefinedEpoch, UndefinedOffset
	}
	if hi == 0 {
		return requested, c.entries[0].StartOffset
	}
	return c.entries[hi-1].Epoch, c.entries[hi].StartOffset
}

// encode writes Kafka's leader-epoch-checkpoint format: version 0, the
// number of entries, then one "epoch offset" line per entry.
func (c *epochCache) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

// decodeEpochs parses a leader-epoch-checkpoint file.
func decodeEpochs(data []byte) ([]EpochEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	v, ok := line()
	if !ok || v != "0" {
		return nil, fmt.Errorf("leader epoch checkpoint: unknown version %q", v)
	}
	ns, ok := line()
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 0 || n > 1<<20 {
		return nil, fmt.Errorf("leader epoch checkpoint: bad entry count %q", ns)
	}
	out := make([]EpochEntry, 0, n)
	for i := 0; i < n; i++ {
		l, ok := line()
		if !ok {
			return nil, fmt.Errorf("leader epoch checkpoint: %d of %d entries", i, n)
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return nil, fmt.Errorf("leader epoch checkpoint: bad line %q", l)
		}
		e, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || o < 0 {
			return nil, fmt.Errorf("leader epoch checkpoint: bad line %q", l)
		}
		if len(out) > 0 && (int32(e) <= out[len(out)-1].Epoch || o < out[len(out)-1].StartOffset) {
			return nil, fmt.Errorf("leader epoch checkpoint: entries out of order at %q", l)
		}
		out = append(out, EpochEntry{Epoch: int32(e), StartOffset: o})
	}
	return out, nil
}
