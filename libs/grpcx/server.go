package grpcx

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/experimental"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// ServerConfig tunes a gRPC server.
type ServerConfig struct {
	// MaxRecvMsgBytes bounds one received message (a produce request).
	MaxRecvMsgBytes int
	// GracefulStopTimeout bounds how long Stop waits for calls to finish
	// before it closes them.
	GracefulStopTimeout time.Duration
}

// RegisterFlags registers the server flags.
func (c *ServerConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxRecvMsgBytes, "grpc.max-recv-msg-bytes", 64<<20,
		"Largest gRPC message the server accepts, in bytes (a produce request with all its batches).")
	fs.DurationVar(&c.GracefulStopTimeout, "grpc.graceful-stop-timeout", 10*time.Second,
		"How long a stopping server waits for calls in flight before closing them.")
}

// Validate checks the configuration.
func (c *ServerConfig) Validate() error {
	if c.MaxRecvMsgBytes < 1<<20 {
		return fmt.Errorf("grpc.max-recv-msg-bytes: %d is below the 1 MiB minimum", c.MaxRecvMsgBytes)
	}
	if c.GracefulStopTimeout < 0 {
		return fmt.Errorf("grpc.graceful-stop-timeout: %v is negative", c.GracefulStopTimeout)
	}
	return nil
}

// ServerOptions are the collaborators of a server.
type ServerOptions struct {
	Logger *slog.Logger
	// Telemetry enables tracing and RPC metrics; nil disables them.
	Telemetry *telemetry.Providers
	// RoleOf maps a full method name to the role that serves it, so that the
	// server span is reported under that role's service name, or to
	// telemetry.Process. Nil reports every call under the process's name.
	RoleOf func(fullMethod string) string
	// TLS, if set, serves every connection over TLS with this configuration
	// (tlsx.Source.ServerConfig, with "h2"); nil serves plaintext.
	TLS *tls.Config
	// Authn builds every call's identity (auth.Identity in its context) or
	// refuses the call; nil makes every caller ANONYMOUS.
	Authn *authn.Authenticator
	// StreamGuard, if set, runs on every stream after authentication: it
	// ends long-lived streams whose authorization the cluster withdrew
	// (authz.StreamGuard).
	StreamGuard grpc.StreamServerInterceptor
	// Extra server options, such as a codec.
	Extra []grpc.ServerOption
}

// Server is a gRPC server with health, reflection and validators.
//
// Calls to a registered service are refused with NODE_NOT_READY until the
// service is first marked serving, so a role never sees a call before it has
// started. Health and reflection are always open.
type Server struct {
	GRPC       *grpc.Server
	Health     *health.Server
	Validators *Validators

	cfg    ServerConfig
	logger *slog.Logger

	mu      sync.RWMutex
	ready   map[string]bool
	streams *streamStopper
}

// NewServer builds a server. Register services on s.GRPC, their validators
// on s.Validators, then call Serve.
func NewServer(cfg ServerConfig, o ServerOptions) *Server {
	s := &Server{
		Health:     health.NewServer(),
		Validators: NewValidators(),
		cfg:        cfg,
		logger:     o.Logger,
		streams:    newStreamStopper(),
		ready: map[string]bool{
			healthpb.Health_ServiceDesc.ServiceName:    true,
			"grpc.reflection.v1.ServerReflection":      true,
			"grpc.reflection.v1alpha.ServerReflection": true,
		},
	}
	// Nothing is serving until the roles say so.
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(serverCodeToLevel),
	}
	recoveryOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		o.Logger.ErrorContext(ctx, "panic in gRPC handler", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		return errs.New(errs.UnknownServerError, "internal error; the server logged the details")
	})
	if o.Authn == nil {
		o.Authn = authn.New(authn.Options{Logger: o.Logger})
	}
	streamGuard := o.StreamGuard
	if streamGuard == nil {
		streamGuard = func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, ss)
		}
	}
	opts := []grpc.ServerOption{
		// Frames go out without copying their bodies; everything else is
		// plain protobuf.
		grpc.ForceServerCodecV2(wire.PassThroughCodec()),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgBytes),
		experimental.BufferPool(wire.BufferPool()),
		// Data streams carry megabytes: windows that let a 1 MiB produce
		// request or fetch chunk flow without waiting for window updates,
		// and socket reads and writes in large pieces (see transport.go).
		grpc.InitialWindowSize(wire.StreamWindow),
		grpc.InitialConnWindowSize(wire.ConnWindow),
		grpc.ReadBufferSize(wire.ReadBuffer(o.TLS != nil)),
		grpc.WriteBufferSize(wire.SocketBuffer),
		grpc.SharedWriteBuffer(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Clients ping idle connections every 10 s (see Dial); allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Interceptors run outermost first: log the final outcome, map errors
		// to statuses, recover panics, authenticate the caller, then validate
		// the request.
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(slogAdapter(o.Logger), logOpts...),
			unaryErrorInterceptor(o.Logger),
			recovery.UnaryServerInterceptor(recoveryOpt),
			o.Authn.UnaryServerInterceptor(),
			s.unaryGate,
			s.Validators.unaryInterceptor(),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(slogAdapter(o.Logger), logOpts...),
			streamErrorInterceptor(o.Logger),
			// Outside recovery: it may run the handler on a goroutine
			// of its own, whose panics recovery must still catch.
			s.streams.interceptor,
			recovery.StreamServerInterceptor(recoveryOpt),
			o.Authn.StreamServerInterceptor(),
			streamGuard,
			s.streamGate,
			s.Validators.streamInterceptor(),
		),
	}
	if o.Telemetry != nil {
		opts = append(opts, grpc.StatsHandler(newRoleStatsHandler(o.Telemetry, o.RoleOf)))
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(wire.TLSCredentials(o.TLS)))
	}
	opts = append(opts, o.Extra...)
	s.GRPC = grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s.GRPC, s.Health)
	reflection.Register(s.GRPC)
	return s
}

// Serve accepts connections on lis until Stop. It returns nil after Stop.
func (s *Server) Serve(lis net.Listener) error {
	err := s.GRPC.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// SetServing marks services (by full name, "" for the whole server) as
// serving or not in gRPC health. The first time a service is marked serving
// its calls are let through; marking it not serving later (while stopping)
// only changes health, so calls in flight and late calls still reach the
// role, which answers them or refuses them itself.
func (s *Server) SetServing(serving bool, services ...string) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
		s.mu.Lock()
		for _, name := range services {
			s.ready[name] = true
		}
		s.mu.Unlock()
	}
	for _, name := range services {
		s.Health.SetServingStatus(name, st)
	}
}

func (s *Server) checkReady(method string) error {
	svc := ServiceOf(method)
	s.mu.RLock()
	ok := s.ready[svc]
	s.mu.RUnlock()
	if ok {
		return nil
	}
	return errs.New(errs.NodeNotReady, "%s on this node is starting; retry shortly or use another node", svc)
}

func (s *Server) unaryGate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.checkReady(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) streamGate(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.checkReady(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// EndStreams ends the open streams of services (every service when none is
// given) with BROKER_NOT_AVAILABLE once the requests they accepted are
// answered, and refuses new ones the same way; it returns when they ended
// or ctx ended. A role calls it for its own services once it no longer
// leads anything (after controlled shutdown), before it closes what the
// streams use; Stop calls it for everything left. Unary calls are not
// affected.
func (s *Server) EndStreams(ctx context.Context, services ...string) {
	// A handler that ignores the request to end is left to Stop's
	// deadline rather than holding a role's stop for longer.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.GracefulStopTimeout)
	defer cancel()
	s.streams.stop(ctx, services...)
}

// Stop marks everything NOT_SERVING, ends long-lived streams (EndStreams),
// lets calls in flight finish, both within the graceful-stop timeout (or
// until ctx ends), then closes what is left.
func (s *Server) Stop(ctx context.Context) {
	s.Health.Shutdown()
	timer := time.NewTimer(s.cfg.GracefulStopTimeout)
	defer timer.Stop()
	s.EndStreams(ctx)
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-timer.C:
		s.logger.Warn("graceful stop timed out; closing remaining calls", slog.Duration("timeout", s.cfg.GracefulStopTimeout))
	case <-ctx.Done():
	}
	s.GRPC.Stop()
	<-done
}

// serverCodeToLevel logs successes at debug, client mistakes at info and
// server faults at error, so a healthy cluster's log stays quiet.
func serverCodeToLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	default:
		return logging.LevelInfo
	}
}

func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

func unaryErrorInterceptor(l *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, toStatus(ctx, l, info.FullMethod, err)
	}
}

func streamErrorInterceptor(l *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return toStatus(ss.Context(), l, info.FullMethod, handler(srv, ss))
	}
}

// toStatus makes sure every error leaving a handler is a status with an
// ErrorInfo: Sluice errors convert themselves, context errors become
// Canceled/DeadlineExceeded, bare Unimplemented statuses (from the generated
// Unimplemented servers) get a clearer message, and anything else is an
// internal error whose details stay in the log.
func toStatus(ctx context.Context, l *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	var se *errs.Error
	if errors.As(err, &se) {
		return se
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.Unimplemented && len(st.Details()) == 0 {
			return errs.New(errs.Unimplemented, "%s is part of the Sluice API but this server version does not implement it yet",
				strings.TrimPrefix(method, "/"))
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	l.ErrorContext(ctx, "unclassified error from gRPC handler", slog.String("method", method), slog.Any("err", err))
	return errs.New(errs.UnknownServerError, "internal error: %v", err)
}
