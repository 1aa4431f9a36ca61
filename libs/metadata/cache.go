package metadata

import (
	"context"
	"net"
	"strconv"
	"sync"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// deltaRing bounds how many recent deltas the cache keeps for watchers that
// resume from a revision; older watchers get a full snapshot.
const deltaRing = 4096

// Cache holds a node's current Image. Writers (the controller's etcd watch,
// or a Watcher) call Reset and Apply; readers call Load, or Changed to wait
// for the next change. It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	img     *Image
	loaded  bool
	deltas  []*controllerv1.MetadataDelta // revision order, at most deltaRing
	base    int64                         // revision of the image the first delta applies to
	changed chan struct{}
}

// NewCache returns a cache holding the empty image.
func NewCache() *Cache {
	return &Cache{img: Empty(), changed: make(chan struct{})}
}

// Load returns the current image.
func (c *Cache) Load() *Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.img
}

// Loaded reports whether the cache has received a snapshot.
func (c *Cache) Loaded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded
}

// Changed returns a channel closed at the next change.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Reset replaces the image (a new snapshot) and forgets recorded deltas.
func (c *Cache) Reset(img *Image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.img, c.loaded, c.deltas, c.base = img, true, nil, img.Revision
	c.signal()
}

// Apply applies a delta. Deltas at or below the current revision are
// ignored (a watcher that reconnected may see them again).
func (c *Cache) Apply(d *controllerv1.MetadataDelta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.GetRevision() <= c.img.Revision {
		return
	}
	c.img = c.img.Apply(d)
	c.deltas = append(c.deltas, d)
	if len(c.deltas) > deltaRing {
		keep := c.deltas[len(c.deltas)-deltaRing/2:]
		c.base = c.deltas[len(c.deltas)-deltaRing/2-1].GetRevision()
		c.deltas = append([]*controllerv1.MetadataDelta(nil), keep...)
	}
	c.signal()
}

func (c *Cache) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Since returns the deltas after revision rev and the image they lead to.
// ok is false when the cache no longer holds every delta after rev: the
// caller needs the returned image as a full snapshot instead.
func (c *Cache) Since(rev int64) (deltas []*controllerv1.MetadataDelta, img *Image, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img = c.img
	if !c.loaded || rev < c.base || rev > img.Revision {
		return nil, img, false
	}
	for i, d := range c.deltas {
		if d.GetRevision() > rev {
			return append([]*controllerv1.MetadataDelta(nil), c.deltas[i:]...), img, true
		}
	}
	return nil, img, true
}

// WaitFor blocks until pred holds for the current image, or ctx ends.
func (c *Cache) WaitFor(ctx context.Context, pred func(*Image) bool) (*Image, error) {
	for {
		c.mu.Lock()
		img, ch := c.img, c.changed
		c.mu.Unlock()
		if pred(img) {
			return img, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return img, ctx.Err()
		}
	}
}

func joinHostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Follow calls apply with the cache's image whenever the part of it that
// pick returns changes (compared with ==, so a pointer to a set the
// controller replaces whole), until ctx ends. It applies the current image
// before it returns, so a check made after Follow returns sees the cache's
// state, then follows in a goroutine; the returned channel is closed when
// that goroutine ends.
func Follow[T comparable](ctx context.Context, c *Cache, pick func(*Image) T, apply func(*Image)) <-chan struct{} {
	var last T
	first := true
	step := func() <-chan struct{} {
		ch := c.Changed()
		img := c.Load()
		if cur := pick(img); first || cur != last {
			first, last = false, cur
			apply(img)
		}
		return ch
	}
	changed := step()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				changed = step()
			}
		}
	}()
	return done
}
