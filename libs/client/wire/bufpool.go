package wire

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPool is the gRPC buffer pool of Sluice's servers and clients: tiers
// of powers of two up to 16 MiB, handed out without zeroing. grpc-go's
// default pool clears every buffer it hands out, and tops out at 1 MiB, so
// each produce request of a little over 1 MiB cost a fresh zeroed
// allocation; on the produce path the clearing alone was about a seventh
// of the server's CPU. gRPC reads exactly the bytes it asked for into a
// buffer before anyone sees it, so stale contents are never exposed.
type bufferPool struct {
	tiers [maxTierShift + 1]sync.Pool
}

const (
	minTierShift = 8  // 256 B
	maxTierShift = 24 // 16 MiB
)

var sharedPool = &bufferPool{}

func init() {
	// The protobuf codec marshals into the process-wide default pool, which
	// only this can change.
	experimental.SetDefaultBufferPool(sharedPool)
}

// BufferPool returns the pool Sluice's gRPC servers and clients share.
func BufferPool() mem.BufferPool { return sharedPool }

func tierOf(size int) int {
	if size <= 1<<minTierShift {
		return minTierShift
	}
	return bits.Len(uint(size - 1))
}

func (p *bufferPool) Get(size int) *[]byte {
	t := tierOf(size)
	if t > maxTierShift {
		b := make([]byte, size)
		return &b
	}
	if v, ok := p.tiers[t].Get().(*[]byte); ok {
		*v = (*v)[:size]
		return v
	}
	b := make([]byte, size, 1<<t)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minTierShift || c > 1<<maxTierShift || c&(c-1) != 0 {
		return // not one of ours: let the collector have it
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}
