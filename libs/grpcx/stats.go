package grpcx

import (
	"context"
	"strings"
	"sync"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc/stats"

	"github.com/sluice-io/sluice/libs/telemetry"
)

// roleStatsHandler routes each RPC to an otelgrpc handler built with the
// tracer provider of the role that serves it. One process may host several
// roles on one server; this keeps each role's spans under its own service
// name.
type roleStatsHandler struct {
	tel    *telemetry.Providers
	roleOf func(string) string

	mu       sync.Mutex
	handlers map[string]stats.Handler
}

type handlerKey struct{}

func newRoleStatsHandler(tel *telemetry.Providers, roleOf func(string) string) *roleStatsHandler {
	if roleOf == nil {
		roleOf = func(string) string { return telemetry.Process }
	}
	return &roleStatsHandler{tel: tel, roleOf: roleOf, handlers: map[string]stats.Handler{}}
}

func (h *roleStatsHandler) handlerFor(role string) stats.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sh, ok := h.handlers[role]; ok {
		return sh
	}
	sh := otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(h.tel.Tracer(role)),
		otelgrpc.WithMeterProvider(h.tel.Meter),
		otelgrpc.WithPropagators(h.tel.Propagator),
		// Health checks and reflection are polled constantly; tracing them
		// would drown the real calls.
		otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))),
	)
	h.handlers[role] = sh
	return sh
}

func (h *roleStatsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	sh := h.handlerFor(h.roleOf(info.FullMethodName))
	return sh.TagRPC(context.WithValue(ctx, handlerKey{}, sh), info)
}

func (h *roleStatsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if sh, ok := ctx.Value(handlerKey{}).(stats.Handler); ok {
		sh.HandleRPC(ctx, s)
	}
}

// Connection events carry no role; otelgrpc ignores them anyway.
func (h *roleStatsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *roleStatsHandler) HandleConn(context.Context, stats.ConnStats) {}

// ServiceOf returns the service part of a full method name
// ("/sluice.storage.v1.StorageService/Produce" gives
// "sluice.storage.v1.StorageService").
func ServiceOf(fullMethod string) string {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}
