package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) SetServing(serving bool, names ...string) {
	for _, n := range names {
		if serving {
			r.add("serving " + n)
		} else {
			r.add("not-serving " + n)
		}
	}
}

type comp struct {
	service.Func
	health []string
	failed chan error
}

func (c *comp) HealthServices() []string { return c.health }
func (c *comp) Failed() <-chan error     { return c.failed }

func newComp(r *recorder, name string, startErr error) *comp {
	return &comp{
		Func: service.Func{
			N:       name,
			StartFn: func(context.Context) error { r.add("start " + name); return startErr },
			StopFn:  func(context.Context) error { r.add("stop " + name); return nil },
		},
		health: []string{name + ".Service"},
		failed: make(chan error, 1),
	}
}

func TestStartsInOrderStopsInReverseWithHealth(t *testing.T) {
	r := &recorder{}
	m := service.NewManager(log.Discard(), r)
	a, b := newComp(r, "a", nil), newComp(r, "b", nil)
	m.Add(a)
	m.Add(b)
	ctx, cancel := context.WithCancel(context.Background())
	m.Ready = cancel
	require.NoError(t, m.Run(ctx))
	require.Equal(t, []string{
		"start a", "serving a.Service", "start b", "serving b.Service", "serving ",
		"not-serving ", "not-serving a.Service", "not-serving b.Service",
		"stop b", "stop a",
	}, r.get())
}

func TestFailedStartStopsWhatStarted(t *testing.T) {
	r := &recorder{}
	m := service.NewManager(log.Discard(), r)
	m.Add(newComp(r, "a", nil))
	m.Add(newComp(r, "b", errors.New("disk full")))
	m.Add(newComp(r, "c", nil))
	err := m.Run(context.Background())
	require.ErrorContains(t, err, "starting b: disk full")
	require.Equal(t, []string{"start a", "serving a.Service", "start b",
		"not-serving ", "not-serving a.Service", "stop a"}, r.get())
}

func TestComponentFailureStopsProcess(t *testing.T) {
	r := &recorder{}
	m := service.NewManager(log.Discard(), nil)
	a, b := newComp(r, "a", nil), newComp(r, "b", nil)
	m.Add(a)
	m.Add(b)
	m.Ready = func() { a.failed <- errors.New("etcd lost its disk") }
	err := m.Run(context.Background())
	require.ErrorContains(t, err, "a failed: etcd lost its disk")
	require.Equal(t, []string{"start a", "start b", "stop b", "stop a"}, r.get())
}

// gated is a component that can serve only while its state says so, like
// a storage node before the controller unfences it.
type gated struct {
	*comp
	mu      sync.Mutex
	ok      bool
	changed chan struct{}
}

func (g *gated) Serving() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, g.changed
}

func (g *gated) set(ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ok = ok
	close(g.changed)
	g.changed = make(chan struct{})
}

// A started component that cannot serve yet keeps its services and the
// process NOT_SERVING, without holding up the components after it.
func TestReadinessGatesHealth(t *testing.T) {
	r := &recorder{}
	m := service.NewManager(log.Discard(), r)
	g := &gated{comp: newComp(r, "storage", nil), changed: make(chan struct{})}
	m.Add(g)
	m.Add(newComp(r, "later", nil))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	m.Ready = func() { close(ready) }
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-ready
	has := func(e string) func() bool {
		return func() bool {
			for _, x := range r.get() {
				if x == e {
					return true
				}
			}
			return false
		}
	}
	require.Eventually(t, has("not-serving "), 5*time.Second, 5*time.Millisecond)
	require.False(t, has("serving storage.Service")(), "SERVING before the component can serve: %v", r.get())
	require.False(t, has("serving ")(), "process SERVING before every component can serve: %v", r.get())
	require.True(t, has("start later")(), "a later component waited for readiness")
	g.set(true)
	require.Eventually(t, has("serving "), 5*time.Second, 5*time.Millisecond)
	require.True(t, has("serving storage.Service")())
	cancel()
	require.NoError(t, <-done)
}
