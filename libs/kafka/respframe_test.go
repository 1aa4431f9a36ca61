package kafka

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// randomFetchResponse is a Fetch response at version with every field a
// version has set, and batches of sizes around refMinBytes and around the
// uvarint length boundaries, their bytes random (stand-in values included).
func randomFetchResponse(rng *rand.Rand, version int16) *kmsg.FetchResponse {
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = version
	resp.ThrottleMillis, resp.ErrorCode, resp.SessionID = 5, 0, rng.Int32()
	sizes := []int{0, 1, 100, refMinBytes - 1, refMinBytes, 16383, 16384, 70000, 200000}
	for ti := range 1 + rng.IntN(3) {
		t := kmsg.NewFetchResponseTopic()
		t.Topic = string(rune('a'+ti)) + "\x00\xff-topic"
		for i := range t.TopicID {
			t.TopicID[i] = byte(rng.IntN(256))
		}
		for pi := range 1 + rng.IntN(4) {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition = int32(pi)
			p.HighWatermark, p.LastStableOffset, p.LogStartOffset = rng.Int64(), rng.Int64(), 1
			if rng.IntN(2) == 0 {
				at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				at.ProducerID, at.FirstOffset = 0xff00ff, 0
				p.AbortedTransactions = append(p.AbortedTransactions, at)
			}
			if rng.IntN(3) == 0 {
				p.DivergingEpoch.Epoch, p.DivergingEpoch.EndOffset = 3, 0xff
			}
			if rng.IntN(3) == 0 {
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = 1, 2
			}
			switch n := sizes[rng.IntN(len(sizes))]; {
			case n == 0 && rng.IntN(2) == 0:
				p.RecordBatches = nil
			default:
				off := rng.IntN(len(batchBytes) - n + 1)
				p.RecordBatches = batchBytes[off : off+n : off+n]
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	if rng.IntN(2) == 0 {
		b := kmsg.NewFetchResponseBroker()
		b.NodeID, b.Host, b.Port = 1, "h\x00st", 9092
		resp.Brokers = append(resp.Brokers, b)
	}
	return resp
}

// batchBytes is where random batches are cut from: 0x00, 0x7f and 0xfe,
// stand-in look-alikes.
var batchBytes = func() []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 256<<10)
	for i := range b {
		b[i] = byte(rng.IntN(3)) * 0x7f
	}
	return b
}()

func TestFetchPiecesAreTheWholeEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	byRef := 0
	for v := int16(4); v <= kmsg.NewPtrFetchResponse().MaxVersion(); v++ {
		for range 20 {
			resp := randomFetchResponse(rng, v)
			flexHeader := responseHeaderFlexible(resp.Key(), resp.IsFlexible())
			want := appendResponse(nil, 77, flexHeader, resp)
			var large [][]byte
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if len(p.RecordBatches) >= refMinBytes {
						large = append(large, p.RecordBatches)
					}
				}
			}
			buf, pieces, ok := fetchPieces(77, flexHeader, resp)
			if len(large) == 0 {
				require.False(t, ok, "v%d: nothing to send by reference", v)
				continue
			}
			require.True(t, ok, "v%d", v)
			byRef++
			require.Len(t, pieces, 2*len(large)+1)
			for k, b := range large {
				// The batches go out from their own memory, not a copy.
				require.Same(t, &b[0], &pieces[2*k+1][0], "v%d batch %d", v, k)
			}
			require.True(t, bytes.Equal(want, bytes.Join(pieces, nil)), "v%d: pieces differ from the whole encoding", v)
			// The response is left as it was.
			require.Equal(t, want, appendResponse(nil, 77, flexHeader, resp), "v%d", v)
			putFrameBuf(buf)
		}
	}
	require.Greater(t, byRef, 50)
}

func TestFramePoolKeepsOnlySmallBuffers(t *testing.T) {
	big := make([]byte, 0, maxPooledFrame+1)
	putFrameBuf(&big) // dropped: the pool never hands it out
	for range 100 {
		b := getFrameBuf()
		require.LessOrEqual(t, cap(*b), maxPooledFrame)
		require.Empty(t, *b)
	}
}
