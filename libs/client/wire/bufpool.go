package wire

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPool is the gRPC buffer pool of Sluice's servers and clients:
// size classes up to 16 MiB, handed out without zeroing. grpc-go's default
// pool clears every buffer it hands out, and tops out at 1 MiB, so each
// produce request of a little over 1 MiB cost a fresh zeroed allocation; on
// the produce path the clearing alone was about a seventh of the server's
// CPU. gRPC reads exactly the bytes it asked for into a buffer before
// anyone sees it, so stale contents are never exposed.
//
// Classes are powers of two up to 64 KiB and quarter steps above (80, 96,
// 112, 128 KiB, ..., 1.25, 1.5, 1.75, 2 MiB, ...): the common large sizes
// are a power of two plus a little (a 1 MiB produce batch with its request
// around it, a 1 MiB fetch's read copy with an index interval of slack),
// which powers of two alone round up to twice their size. Read copies
// count their capacity against the storage node's budget, so the quarter
// steps let 1.6 times as many 1 MiB fetches copy at once.
type bufferPool struct {
	classes [numClasses]sync.Pool
}

const (
	minTierShift  = 8  // 256 B, the smallest class
	fineTierShift = 16 // 64 KiB: above it, four classes per doubling
	maxTierShift  = 24 // 16 MiB, the largest class
	numClasses    = fineTierShift + 1 + 4*(maxTierShift-fineTierShift)
)

var sharedPool = &bufferPool{}

func init() {
	// The protobuf codec marshals into the process-wide default pool, which
	// only this can change.
	experimental.SetDefaultBufferPool(sharedPool)
}

// BufferPool returns the pool Sluice's gRPC servers and clients share.
func BufferPool() mem.BufferPool { return sharedPool }

// classOf returns the capacity of the class that holds size bytes and the
// class's index, or ok false when size is beyond the largest class.
func classOf(size int) (capacity, index int, ok bool) {
	if size <= 1<<minTierShift {
		return 1 << minTierShift, minTierShift, true
	}
	if size > 1<<maxTierShift {
		return 0, 0, false
	}
	if size <= 1<<fineTierShift {
		e := bits.Len(uint(size - 1)) // 1<<(e-1) < size <= 1<<e
		return 1 << e, e, true
	}
	e := bits.Len(uint(size-1)) - 1 // 1<<e < size <= 1<<(e+1)
	quarter := 1 << (e - 2)
	k := (size - 1<<e + quarter - 1) / quarter // 1..4
	return 1<<e + k*quarter, fineTierShift + 1 + 4*(e-fineTierShift) + k - 1, true
}

func (p *bufferPool) Get(size int) *[]byte {
	capacity, i, ok := classOf(size)
	if !ok {
		b := make([]byte, size)
		return &b
	}
	if v, ok := p.classes[i].Get().(*[]byte); ok {
		*v = (*v)[:size]
		return v
	}
	b := make([]byte, size, capacity)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	capacity, i, ok := classOf(c)
	if !ok || capacity != c {
		return // not one of ours: let the collector have it
	}
	p.classes[i].Put(b)
}
