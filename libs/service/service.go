// Package service runs a process's components in a fixed order: each starts
// only after the ones before it are ready, and they stop in reverse order, so
// a role never outlives what it depends on. Health follows the lifecycle:
// a component's services report SERVING once it has started (a component
// with Readiness: while it says it can serve), the process as a whole ("")
// while every component does, and everything reports NOT_SERVING
// before the first one stops, so load balancers and clients move away before
// calls start failing.
//
//	m := service.NewManager(logger, healthSetter)
//	m.Add(grpcServer)          // started first, stopped last
//	m.Add(controllerRole)
//	err := m.Run(ctx)          // returns when ctx ends or a component fails
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

// Service is one component of a process.
type Service interface {
	// Name identifies the component in logs.
	Name() string
	// Start brings the component up and returns once it is ready to do its
	// work, or with an error. ctx bounds the start only.
	Start(ctx context.Context) error
	// Stop shuts the component down, draining work in flight while ctx
	// allows.
	Stop(ctx context.Context) error
}

// Failer is implemented by components that can fail after starting (for
// example an embedded etcd whose disk fails). The manager stops the process
// when the channel yields.
type Failer interface {
	Failed() <-chan error
}

// HealthReporter is implemented by components that serve gRPC services; the
// manager marks those services SERVING as soon as the component has started,
// and NOT_SERVING before anything stops.
type HealthReporter interface {
	HealthServices() []string
}

// Readiness is implemented by components that can serve only in some
// states after they started: a storage node until the controller unfences
// it. Their services report SERVING only while Serving says so, and the
// process ("") only while every such component does, so a script or an
// orchestrator waiting on health never races a node that would answer
// NODE_NOT_READY or NOT_LEADER_OR_FOLLOWER. Later components start without
// waiting for it.
type Readiness interface {
	// Serving reports whether the component can serve now, and a channel
	// closed at the next change.
	Serving() (bool, <-chan struct{})
}

// Health sets gRPC health statuses; grpcx.Server implements it.
type Health interface {
	SetServing(serving bool, services ...string)
}

// Func adapts functions to a Service.
type Func struct {
	N       string
	StartFn func(context.Context) error
	StopFn  func(context.Context) error
}

// Name implements Service.
func (f Func) Name() string { return f.N }

// Start implements Service.
func (f Func) Start(ctx context.Context) error {
	if f.StartFn == nil {
		return nil
	}
	return f.StartFn(ctx)
}

// Stop implements Service.
func (f Func) Stop(ctx context.Context) error {
	if f.StopFn == nil {
		return nil
	}
	return f.StopFn(ctx)
}

// Manager starts, supervises and stops services in order.
type Manager struct {
	logger       *slog.Logger
	health       Health
	services     []Service
	StartTimeout time.Duration
	StopTimeout  time.Duration
	// Ready, if set, is called once every service has started.
	Ready func()

	mu        sync.Mutex
	started   bool            // every service has started
	notReady  map[string]bool // components with Readiness that cannot serve now
	stopping  bool
	watchers  sync.WaitGroup
	stopWatch chan struct{}
}

// NewManager returns a manager. health may be nil.
func NewManager(logger *slog.Logger, health Health) *Manager {
	return &Manager{logger: logger, health: health, StartTimeout: 2 * time.Minute, StopTimeout: 30 * time.Second,
		notReady: map[string]bool{}, stopWatch: make(chan struct{})}
}

// Add appends a service; services start in the order they are added.
func (m *Manager) Add(s Service) { m.services = append(m.services, s) }

// Run starts every service, waits until ctx ends or a service fails, then
// stops them all in reverse order. It returns the failure that ended the run
// (nil when ctx ended it) joined with any stop errors.
func (m *Manager) Run(ctx context.Context) error {
	started, err := m.start(ctx)
	if err != nil {
		m.stopWatchers()
		m.setHealth(false, started)
		return errors.Join(err, m.stop(started))
	}
	m.mu.Lock()
	m.started = true
	m.updateProcessLocked()
	m.mu.Unlock()
	m.logger.Info("all components started", slog.Int("components", len(started)))
	if m.Ready != nil {
		m.Ready()
	}
	runErr := m.wait(ctx, started)
	m.stopWatchers()
	m.setHealth(false, started)
	return errors.Join(runErr, m.stop(started))
}

func (m *Manager) start(ctx context.Context) ([]Service, error) {
	var started []Service
	for _, s := range m.services {
		if ctx.Err() != nil {
			return started, nil // asked to stop while starting: not a failure
		}
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, m.StartTimeout)
		err := s.Start(sctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return started, nil
			}
			return started, fmt.Errorf("starting %s: %w", s.Name(), err)
		}
		m.logger.Info("component started", slog.String("component", s.Name()), slog.Duration("took", time.Since(t0)))
		started = append(started, s)
		// A component's services serve as soon as it is ready: later
		// components may call them (a storage node registering with the
		// controller in the same process).
		if r, ok := s.(Readiness); ok {
			m.watch(s, r)
		} else if h, ok := s.(HealthReporter); ok && m.health != nil {
			m.health.SetServing(true, h.HealthServices()...)
		}
	}
	return started, nil
}

// watch follows a component's Readiness until the process stops.
func (m *Manager) watch(s Service, r Readiness) {
	m.mu.Lock()
	m.notReady[s.Name()] = true
	m.mu.Unlock()
	m.watchers.Go(func() {
		was := false
		for first := true; ; first = false {
			ok, changed := r.Serving()
			if first || ok != was {
				m.setReady(s, ok)
				was = ok
			}
			select {
			case <-changed:
			case <-m.stopWatch:
				return
			}
		}
	})
}

// setReady records whether a component with Readiness can serve and sets
// its services' and the process's health.
func (m *Manager) setReady(s Service, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	if ok {
		delete(m.notReady, s.Name())
		m.logger.Info("component serving", slog.String("component", s.Name()))
	} else {
		m.notReady[s.Name()] = true
		m.logger.Info("component not serving", slog.String("component", s.Name()))
	}
	if h, isReporter := s.(HealthReporter); isReporter && m.health != nil {
		m.health.SetServing(ok, h.HealthServices()...)
	}
	m.updateProcessLocked()
}

// updateProcessLocked sets the process's health (""): SERVING once every
// component has started and while every one with Readiness can serve.
func (m *Manager) updateProcessLocked() {
	if m.health == nil || m.stopping {
		return
	}
	m.health.SetServing(m.started && len(m.notReady) == 0, "")
}

// stopWatchers stops following Readiness; health only turns NOT_SERVING
// from here on.
func (m *Manager) stopWatchers() {
	m.mu.Lock()
	if !m.stopping {
		m.stopping = true
		close(m.stopWatch)
	}
	m.mu.Unlock()
	m.watchers.Wait()
}

// wait blocks until ctx ends or any Failer fails.
func (m *Manager) wait(ctx context.Context, started []Service) error {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
	var names []string
	for _, s := range started {
		if f, ok := s.(Failer); ok {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(f.Failed())})
			names = append(names, s.Name())
		}
	}
	chosen, v, _ := reflect.Select(cases)
	if chosen == 0 {
		return nil
	}
	err, _ := v.Interface().(error)
	if err == nil {
		err = errors.New("stopped unexpectedly")
	}
	m.logger.Error("component failed; stopping the process", slog.String("component", names[chosen-1]), slog.Any("err", err))
	return fmt.Errorf("%s failed: %w", names[chosen-1], err)
}

func (m *Manager) stop(started []Service) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.StopTimeout)
	defer cancel()
	var errs []error
	for i := len(started) - 1; i >= 0; i-- {
		s := started[i]
		t0 := time.Now()
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", s.Name(), err))
			m.logger.Warn("component stopped with error", slog.String("component", s.Name()), slog.Any("err", err))
			continue
		}
		m.logger.Info("component stopped", slog.String("component", s.Name()), slog.Duration("took", time.Since(t0)))
	}
	return errors.Join(errs...)
}

// setHealth(false) marks the process and every started component NOT_SERVING
// before anything stops.
func (m *Manager) setHealth(serving bool, started []Service) {
	if m.health == nil {
		return
	}
	m.health.SetServing(serving, "")
	for _, s := range started {
		if h, ok := s.(HealthReporter); ok {
			m.health.SetServing(serving, h.HealthServices()...)
		}
	}
}
