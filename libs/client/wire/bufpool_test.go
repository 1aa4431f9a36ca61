package wire

import "testing"

func TestBufferPoolSizes(t *testing.T) {
	p := &bufferPool{}
	for _, size := range []int{0, 1, 255, 256, 257, 4096, 16385, 1 << 20, 1<<20 + 37, 16 << 20, 16<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size {
			t.Fatalf("Get(%d) returned %d bytes", size, len(*b))
		}
		if size > 0 && size <= 16<<20 && cap(*b) >= 2*size && size > 256 {
			t.Fatalf("Get(%d) has capacity %d: more than the next power of two", size, cap(*b))
		}
		p.Put(b)
		again := p.Get(size)
		if len(*again) != size {
			t.Fatalf("Get(%d) after Put returned %d bytes", size, len(*again))
		}
	}
	// A foreign buffer is dropped, not handed out at the wrong size.
	odd := make([]byte, 1000)
	p.Put(&odd)
	if b := p.Get(1000); cap(*b) != 1024 {
		t.Fatalf("Get(1000) capacity %d, want 1024", cap(*b))
	}
}
