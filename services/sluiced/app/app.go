// Package app assembles sluiced: one process running any set of Sluice's
// roles on one gRPC server. The order of assembly is the order of start:
// telemetry, the HTTP endpoint, the gRPC server, then the roles in
// role.All's order; they stop in reverse.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/kafka/nodeapi"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/planted"
	"github.com/sluice-io/sluice/libs/quota"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/telemetry"
	"github.com/sluice-io/sluice/services/controller"
	"github.com/sluice-io/sluice/services/groupcoord"
	"github.com/sluice-io/sluice/services/replication"
	"github.com/sluice-io/sluice/services/storagenode"
	"github.com/sluice-io/sluice/services/txncoord"
)

// otelErrorsOnce sets the process's OpenTelemetry error handler once.
var otelErrorsOnce sync.Once

// Run starts the configured roles and blocks until ctx ends or a component
// fails; then it stops everything in order. Logs go to logOut.
func Run(ctx context.Context, cfg Config, logOut io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// --node-id=auto and wildcard advertised hosts become this machine's
	// id and address before anything reads them.
	if err := cfg.Node.Resolve(); err != nil {
		return err
	}
	logger, err := log.New(cfg.Log, logOut)
	if err != nil {
		return err
	}
	logger = logger.With(log.Node(int32(cfg.Node.ID)))
	if err := planted.Err(); err != nil {
		return err
	}
	kit := setupUnsafe(cfg, logger)

	cfg.Telemetry.Service = ServiceName(cfg.Roles)
	tel, err := telemetry.Setup(ctx, cfg.Telemetry, fmt.Sprintf("node-%d", cfg.Node.ID))
	if err != nil {
		return err
	}
	// Spans that fail to export (a collector down or refusing) are dropped
	// by the SDK; say so in the log, not on bare stderr. The handler is
	// the process's: the first node of a process sets it.
	otelErrorsOnce.Do(func() {
		tlog := logger.With(log.Component("telemetry"))
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { tlog.Warn("OpenTelemetry error", "err", err) }))
	})
	// The metadata cache is made first: the password verifier of both
	// listeners reads users' SCRAM credentials from it.
	cache := metadata.NewCache()
	sec, err := setupSecurity(&cfg, cache, logger)
	if err != nil {
		return err
	}
	// With --authz.enabled every role checks calls against the cluster's
	// ACLs, which arrive with the metadata and apply to the next request of
	// every connection, and to the next message of every stream.
	acls := cfg.Authz.New(logger.With(log.Component("authz")))
	guard := &authz.StreamGuard{ACLs: acls, Users: sec.scram}
	// Filled in as the roles are built, before the server accepts a call.
	served := serviceRoles{}
	srv := grpcx.NewServer(cfg.GRPC, grpcx.ServerOptions{Logger: logger, Telemetry: tel, RoleOf: served.RoleOf,
		TLS: sec.serverTLS("h2"), Authn: sec.authn, StreamGuard: guard.StreamServerInterceptor()})
	// Bind before anything starts, so a port in use fails at once with a
	// clear error.
	lis, err := net.Listen("tcp", cfg.Node.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Node.Listen, err)
	}
	var httpLis net.Listener
	if cfg.Node.HTTPListen != "" {
		if httpLis, err = net.Listen("tcp", cfg.Node.HTTPListen); err != nil {
			_ = lis.Close() // reporting the HTTP listen error
			return fmt.Errorf("http-listen %s: %w", cfg.Node.HTTPListen, err)
		}
	}
	var kafkaLis net.Listener
	if cfg.Node.KafkaListen != "" {
		if kafkaLis, err = net.Listen("tcp", cfg.Node.KafkaListen); err != nil {
			_ = lis.Close() // reporting the Kafka listen error
			if httpLis != nil {
				_ = httpLis.Close()
			}
			return fmt.Errorf("kafka-listen %s: %w", cfg.Node.KafkaListen, err)
		}
	}

	n := &node{cfg: cfg, logger: logger, tel: tel, srv: srv,
		cache: cache,
		kafka: kafka.NewMux(),
		pool:  wire.NewPool(wire.ClientOptions{Telemetry: tel.Client(telemetry.Process), TLS: sec.clientTLS(), Extra: kit.dialOptions()})}
	if kit != nil {
		n.now = kit.clock.Now
	}
	if acls != nil {
		n.authz = acls
		authz.Follow(ctx, acls, n.cache)
	}
	// Client quotas arrive with the metadata like ACLs, and apply to the
	// next request of every connection; connection limits per IP apply to
	// both client listeners.
	n.quotas = cfg.Quota.New(logger.With(log.Component("quota")), tel.Meter)
	quota.Follow(ctx, n.quotas, n.cache)
	lis = n.quotas.LimitListener(lis, "grpc")
	if kafkaLis != nil {
		kafkaLis = n.quotas.LimitListener(kafkaLis, "kafka")
	}
	// Every node answers metadata requests from its cache, showing each
	// caller the topics it may Describe.
	ms := metadata.NewServer(n.cache, int32(cfg.Node.ID), srv.Validators)
	ms.DescribeTopic = authz.DescribeTopic(n.authz)
	metadatav1.RegisterMetadataServiceServer(srv.GRPC, ms)

	m := service.NewManager(logger, srv)
	m.Add(service.Func{N: "telemetry", StopFn: tel.Shutdown})
	m.Add(service.Func{N: "connections", StopFn: func(context.Context) error { return n.pool.Close() }})
	var httpMux *http.ServeMux
	if httpLis != nil {
		var hs service.Service
		hs, httpMux = httpService(httpLis, tel, logger)
		m.Add(hs)
	}
	m.Add(grpcService(srv, lis, logger))
	if cfg.Roles.Has(role.Controller) {
		m.Add(served.add(role.Controller, n.newRole(role.Controller)))
	} else {
		m.Add(metadata.NewWatcher(n.cache, cfg.Node.ControllerAddrs(), n.pool.Get, int32(cfg.Node.ID), logger))
	}
	m.Add(metadataReady{n.cache})
	if others := cfg.Roles.Without(role.Controller); len(others) > 0 {
		n.member = membership.New(membership.Config{
			NodeID: int32(cfg.Node.ID), Rack: cfg.Node.Rack, Advertise: cfg.Node.AdvertiseAddr(),
			KafkaAdvertise: kafkaAdvertise(cfg.Node, kafkaLis), Roles: others.Strings(), Controllers: n.controllerAddrs(),
		}, n.pool.Get, n.cache, logger)
		m.Add(n.member)
		if cfg.Roles.Has(role.StorageNode) {
			rc := kit.replicaConfig(cfg.StorageNode.ReplicaConfig(cfg.Node))
			if cfg.StorageNode.PageCacheBudgetBytes < 0 {
				_, why := storage.AutoPageCacheBudget()
				logger.Info("page-cache budget chosen from the machine", "budget_bytes", rc.Storage.PageCache.Budget(), "why", why)
			}
			n.replicas = replica.NewManager(rc, int32(cfg.Node.ID), n.cache, n.member, n.pool, logger)
		}
		for _, r := range others {
			m.Add(served.add(r, n.newRole(r)))
		}
	}
	if httpMux != nil {
		// Served from the start, like /metrics; the handler reads the
		// replicas only when called.
		kit.register(httpMux, n.replicas, logger)
	}
	// The Kafka APIs every process answers, whatever its roles (Metadata,
	// FindCoordinator, the admin APIs).
	nodeapi.Register(n.kafka, nodeapi.Deps{Metadata: n.cache, Pool: n.pool, NodeID: int32(cfg.Node.ID), Logger: logger, Authz: n.authz})
	if !cfg.Roles.Has(role.GroupCoordinator) {
		// Kafka clients judge the cluster by any node's ApiVersions
		// (franz-go uses KIP-848 only if ConsumerGroupHeartbeat is
		// there): advertise the group APIs, answered NOT_COORDINATOR.
		groupcoord.RegisterKafkaElsewhere(n.kafka, int32(cfg.Node.ID))
	}
	if !cfg.Roles.Has(role.TransactionCoordinator) {
		// Likewise librdkafka's idempotent producer needs InitProducerId
		// from whichever node it reached first.
		txncoord.RegisterKafkaElsewhere(n.kafka, int32(cfg.Node.ID), n.cache, n.pool, n.authz)
	}
	if kafkaLis != nil {
		// Last to start, once every role has registered its handlers;
		// first to stop, so no Kafka request reaches a stopped role.
		m.Add(kafka.NewServer(cfg.Kafka, n.kafka, kafkaLis, kafka.ServerOptions{
			Logger: logger, Meter: tel.Meter, Tracer: tel.Tracer(telemetry.Process),
			TLS: sec.serverTLS(), Authn: sec.authn, SASL: sec.kafkaSASL(cfg.Kafka), Quotas: n.quotas}))
	}
	m.Ready = func() {
		logger.Info("sluiced ready", slog.String("roles", cfg.Roles.String()), slog.String("listen", lis.Addr().String()))
	}
	return m.Run(ctx)
}

// node holds what a process's roles share.
type node struct {
	cfg    Config
	logger *slog.Logger
	tel    *telemetry.Providers
	srv    *grpcx.Server
	// kafka is the process's Kafka-protocol mux; roles register on it
	// whether or not the listener is on.
	kafka  *kafka.Mux
	cache  *metadata.Cache
	pool   *wire.Pool
	member *membership.Member
	// replicas are the node's partition replicas, shared by the storage-node
	// and replication roles.
	replicas *replica.Manager
	// now is the roles' clock: nil (time.Now) unless fault injection
	// shifts it.
	now func() time.Time
	// authz is the process's authorizer; nil with authorization off.
	authz authz.Authorizer
	// quotas enforces the cluster's client quotas and the per-IP
	// connection limits.
	quotas *quota.Manager
}

// controllerAddrs are the controllers to reach: --controllers, or this
// process when it runs the controller role alone.
func (n *node) controllerAddrs() []string {
	if addrs := n.cfg.Node.ControllerAddrs(); len(addrs) > 0 {
		return addrs
	}
	return []string{n.cfg.Node.AdvertiseAddr()}
}

func (n *node) newRole(r role.Role) service.Service {
	cfg := n.cfg
	deps := service.Deps{Logger: n.logger, Telemetry: n.tel, Server: n.srv, Kafka: n.kafka, Node: cfg.Node,
		Metadata: n.cache, Member: n.member, Pool: n.pool, Replicas: n.replicas, Now: n.now, Authz: n.authz, Quotas: n.quotas}
	switch r {
	case role.Controller:
		return controller.New(cfg.Controller, deps)
	case role.StorageNode:
		return storagenode.New(cfg.StorageNode, deps)
	case role.Replication:
		return replication.New(cfg.Replication, deps)
	case role.GroupCoordinator:
		return groupcoord.New(cfg.GroupCoordinator, deps)
	case role.TransactionCoordinator:
		return txncoord.New(cfg.TransactionCoordinator, deps)
	}
	panic(fmt.Sprintf("no constructor for role %q", r)) // role.Parse only yields known roles
}

// kafkaAdvertise is the Kafka address the node registers:
// --kafka-advertise, else the listen host with the port actually bound (so
// port 0 works); empty without a listener.
func kafkaAdvertise(nc config.Node, lis net.Listener) string {
	if lis == nil {
		return ""
	}
	if nc.KafkaAdvertise != "" {
		return nc.KafkaAdvertise
	}
	host, _, err := net.SplitHostPort(nc.KafkaListen)
	if err != nil {
		return lis.Addr().String() // validated already; the bound address is the best guess
	}
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	return net.JoinHostPort(host, port)
}

// metadataReady reports MetadataService SERVING once the node has cluster
// metadata.
type metadataReady struct{ cache *metadata.Cache }

func (metadataReady) Name() string { return "metadata" }

func (m metadataReady) Start(ctx context.Context) error {
	_, err := m.cache.WaitFor(ctx, func(*metadata.Image) bool { return m.cache.Loaded() })
	return err
}

func (metadataReady) Stop(context.Context) error { return nil }

func (metadataReady) HealthServices() []string {
	return []string{metadatav1.MetadataService_ServiceDesc.ServiceName}
}

// ServiceName is the service.name of a process's own spans and metrics
// (those of no single role: metadata calls, outgoing calls on the shared
// connections): a one-role process is named like its role
// ("sluice-storage-node"), a process with several roles "sluiced".
func ServiceName(roles role.Set) string {
	if len(roles) == 1 {
		return telemetry.ServiceName(string(roles[0]))
	}
	return "sluiced"
}

// serviceRoles maps each gRPC service to the role of this process that
// serves it, as the roles report their health services. Spans and health
// then name the same role: the replication API is the storage node's where
// the storage node registers it, whichever roles the process runs.
type serviceRoles map[string]role.Role

// add records the services svc reports and returns svc.
func (s serviceRoles) add(r role.Role, svc service.Service) service.Service {
	if h, ok := svc.(service.HealthReporter); ok {
		for _, name := range h.HealthServices() {
			s[name] = r
		}
	}
	return svc
}

// RoleOf names the role that serves fullMethod in this process, or
// telemetry.Process for services of the process itself (metadata, health).
func (s serviceRoles) RoleOf(fullMethod string) string {
	if r, ok := s[grpcx.ServiceOf(fullMethod)]; ok {
		return string(r)
	}
	return telemetry.Process
}

func grpcService(srv *grpcx.Server, lis net.Listener, logger *slog.Logger) service.Service {
	served := make(chan error, 1)
	return service.Func{
		N: "grpc-server",
		StartFn: func(context.Context) error {
			go func() { served <- srv.Serve(lis) }()
			return nil
		},
		StopFn: func(ctx context.Context) error {
			srv.Stop(ctx)
			if err := <-served; err != nil {
				logger.Warn("gRPC server ended with error", log.Err(err))
				return err
			}
			return nil
		},
	}
}

// httpService serves Prometheus metrics and pprof profiles; it returns its
// mux so fault injection can add its endpoints.
func httpService(lis net.Listener, tel *telemetry.Providers, logger *slog.Logger) (service.Service, *http.ServeMux) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(tel.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return service.Func{
		N: "http",
		StartFn: func(context.Context) error {
			go func() {
				if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
					logger.Error("HTTP server failed", log.Err(err))
				}
			}()
			return nil
		},
		StopFn: hs.Shutdown,
	}, mux
}
