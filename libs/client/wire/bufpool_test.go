package wire

import (
	"testing"
)

func TestBufferPoolSizes(t *testing.T) {
	p := &bufferPool{}
	for _, size := range []int{0, 1, 255, 256, 257, 4096, 16385, 64 << 10, 64<<10 + 1, 80 << 10, 80<<10 + 1, 1 << 20,
		1<<20 + 37, 1<<20 + 4096, 1<<20 + 256<<10, 1<<20 + 256<<10 + 1, 2<<20 - 1, 16 << 20, 16<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size {
			t.Fatalf("Get(%d) returned %d bytes", size, len(*b))
		}
		switch c := cap(*b); {
		case size > 16<<20:
		case size <= 256:
			if c != 256 {
				t.Fatalf("Get(%d) has capacity %d, want 256", size, c)
			}
		case size <= 64<<10 && c >= 2*size:
			t.Fatalf("Get(%d) has capacity %d: more than the next power of two", size, c)
		case size > 64<<10 && 4*c > 5*size:
			t.Fatalf("Get(%d) has capacity %d: more than a quarter over", size, c)
		}
		p.Put(b)
		again := p.Get(size)
		if len(*again) != size || cap(*again) != cap(*b) {
			t.Fatalf("Get(%d) after Put returned %d bytes of %d, want %d of %d", size, len(*again), cap(*again), size, cap(*b))
		}
	}
	// A foreign buffer is dropped, not handed out at the wrong size.
	for _, odd := range []int{1000, 70 << 10, 1<<20 + 1} {
		b := make([]byte, odd)
		p.Put(&b)
		got := p.Get(odd)
		if capacity, _, _ := classOf(odd); cap(*got) != capacity {
			t.Fatalf("Get(%d) capacity %d, want its class's %d", odd, cap(*got), capacity)
		}
	}
}

// Every class holds exactly the sizes between the class below and its own
// capacity, and classes have distinct indexes in range.
func TestBufferPoolClasses(t *testing.T) {
	seen := map[int]int{}
	prev := 0
	for size := 1; size <= 16<<20; size++ {
		c, i, ok := classOf(size)
		if !ok || c < size || i < 0 || i >= numClasses {
			t.Fatalf("classOf(%d) = %d, %d, %v", size, c, i, ok)
		}
		if c != prev {
			if c2, i2, _ := classOf(c); c2 != c || i2 != i {
				t.Fatalf("class %d (index %d) does not hold its own capacity: %d, %d", c, i, c2, i2)
			}
			if other, dup := seen[i]; dup {
				t.Fatalf("index %d of both class %d and class %d", i, other, c)
			}
			seen[i] = c
			prev = c
		}
	}
	if _, _, ok := classOf(16<<20 + 1); ok {
		t.Fatal("a size past 16 MiB has a class")
	}
	// A 1 MiB fetch's copy with its slack, and a 1 MiB batch's request.
	if c, _, _ := classOf(1<<20 + 4096); c != 1<<20+256<<10 {
		t.Fatalf("1 MiB + 4 KiB lands in %d, want 1.25 MiB", c)
	}
}

func BenchmarkBufferPool(b *testing.B) {
	p := &bufferPool{}
	for b.Loop() {
		buf := p.Get(1<<20 + 4096)
		p.Put(buf)
	}
}
