package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/quota"
)

// ServerOptions are the collaborators of a Server.
type ServerOptions struct {
	Logger *slog.Logger
	// Meter records the listener's metrics; nil records none.
	Meter metric.MeterProvider
	// Tracer makes a span per request ("kafka.<ApiName>"); nil makes none.
	Tracer trace.TracerProvider
	// TLS, if set, serves every connection over TLS with this
	// configuration (tlsx.Source.ServerConfig); nil serves plaintext.
	TLS *tls.Config
	// Authn names the principal of a verified client certificate; nil
	// maps it with the DEFAULT rule.
	Authn *authn.Authenticator
	// SASL, when it names mechanisms, requires SASL authentication of
	// every connection not authenticated by a client certificate.
	SASL *SASLOptions
	// Quotas, if set, enforces client quotas: producer_byte_rate,
	// consumer_byte_rate and request_percentage per principal and client
	// id (see quota.go).
	Quotas *quota.Manager
}

// Server serves a Mux on a listener: it reads size-prefixed request frames,
// decodes them with kmsg, calls the handlers one request at a time per
// connection, and writes the responses in request order. It answers
// ApiVersions itself.
//
// It is a service.Service: Start accepts connections, Stop stops accepting,
// lets every connection write the responses of requests already read, and
// closes connections that are still busy when the stop's context ends.
type Server struct {
	cfg     Config
	mux     *Mux
	lis     net.Listener
	logger  *slog.Logger
	metrics *metrics
	tracer  trace.Tracer
	tls     *tls.Config
	authn   *authn.Authenticator
	sasl    *saslServer // nil: no SASL
	quotas  *quota.Manager
	// queued bounds the request bytes held over all connections.
	queued *budget

	// ctx is the parent of every request's context; cancel ends them all
	// when a stop runs out of time.
	ctx    context.Context
	cancel context.CancelFunc

	// stopped is closed when Stop begins (Stopping).
	stopped chan struct{}

	mu       sync.Mutex
	conns    map[*conn]struct{}
	stopping bool
	// wg counts the accept loop, every connection's reader and writer and
	// every running Reply.Wait.
	wg sync.WaitGroup
}

// NewServer returns a server for mux on lis and registers ApiVersions
// (v0-v4) on mux, so ApiVersions lists itself (it panics if key 18 is
// taken: one server per mux). Zero fields of cfg take their defaults.
// Nothing is accepted before Start.
func NewServer(cfg Config, mux *Mux, lis net.Listener, opts ServerOptions) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	stopped := make(chan struct{})
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), stoppingKey{}, (<-chan struct{})(stopped)))
	s := &Server{
		cfg: cfg.withDefaults(), mux: mux, lis: lis,
		logger:  logger.With(log.Component("kafka-listener")),
		metrics: newMetrics(opts.Meter), tracer: tracerOf(opts.Tracer),
		queued: newBudget(cfg.withDefaults().MaxQueuedRequestBytes),
		ctx:    ctx, cancel: cancel, stopped: stopped, conns: map[*conn]struct{}{},
		tls: opts.TLS, authn: opts.Authn, quotas: opts.Quotas,
	}
	if s.authn == nil {
		s.authn = authn.New(authn.Options{Logger: logger})
	}
	mux.Handle(apiVersionsKey, 0, apiVersionsMax, s.apiVersions)
	s.registerSASL(opts.SASL)
	return s
}

// Name implements service.Service.
func (s *Server) Name() string { return "kafka-listener" }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Start starts accepting connections.
func (s *Server) Start(context.Context) error {
	s.wg.Add(1)
	go s.acceptLoop()
	s.logger.Info("Kafka listener started", log.Addr(s.lis.Addr().String()))
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.isStopping() {
				return
			}
			// Out of file descriptors and the like: wait and go on, as
			// net/http does, rather than end the listener.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("accepting a Kafka connection failed", log.Err(err), slog.Duration("retry_in", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			_ = nc.Close() // accepted while stopping: nothing was read
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		s.metrics.conns.Add(context.Background(), 1)
		go c.readLoop()
		go c.writeLoop()
	}
}

func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

type stoppingKey struct{}

// Stopping returns a channel closed when the listener that read the
// request in ctx begins to stop (nil for a context of no request). A
// Reply.Wait that waits for something that may never come (a Fetch's max
// wait, which a client may set to many seconds) answers with what it has
// once it is closed: the listener writes the answers of the requests it
// read before it closes their connections, and would otherwise wait out
// the longest of those waits.
func Stopping(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return ch
}

// Stop stops accepting and reading requests, lets each connection write
// the responses of the requests it has read, then closes it. When ctx ends
// first, it closes every connection and cancels every request's context,
// then waits at most a few seconds more for handlers to return.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		close(s.stopped)
	}
	s.stopping = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if err := s.lis.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		s.logger.Warn("closing the Kafka listener", log.Err(err))
	}
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	conns = conns[:0]
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("kafka listener: handlers still running after the stop deadline: %w", ctx.Err())
	}
}
