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
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/telemetry"
	"github.com/sluice-io/sluice/services/controller"
	"github.com/sluice-io/sluice/services/groupcoord"
	"github.com/sluice-io/sluice/services/replication"
	"github.com/sluice-io/sluice/services/storagenode"
	"github.com/sluice-io/sluice/services/txncoord"
)

// Run starts the configured roles and blocks until ctx ends or a component
// fails; then it stops everything in order. Logs go to logOut.
func Run(ctx context.Context, cfg Config, logOut io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger, err := log.New(cfg.Log, logOut)
	if err != nil {
		return err
	}
	logger = logger.With(log.NodeID(int32(cfg.Node.ID)))

	tel, err := telemetry.Setup(ctx, cfg.Telemetry, fmt.Sprintf("node-%d", cfg.Node.ID))
	if err != nil {
		return err
	}
	srv := grpcx.NewServer(cfg.GRPC, grpcx.ServerOptions{Logger: logger, Telemetry: tel, RoleOf: RoleOf})
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

	m := service.NewManager(logger, srv)
	m.Add(service.Func{N: "telemetry", StopFn: tel.Shutdown})
	if httpLis != nil {
		m.Add(httpService(httpLis, tel, logger))
	}
	m.Add(grpcService(srv, lis, logger))
	for _, r := range cfg.Roles {
		m.Add(newRole(r, cfg, logger, tel, srv))
	}
	m.Ready = func() {
		logger.Info("sluiced ready", slog.String("roles", cfg.Roles.String()), slog.String("listen", lis.Addr().String()))
	}
	return m.Run(ctx)
}

func newRole(r role.Role, cfg Config, logger *slog.Logger, tel *telemetry.Providers, srv *grpcx.Server) service.Service {
	switch r {
	case role.Controller:
		return controller.New(cfg.Controller, controller.Deps{Logger: logger, Telemetry: tel, Server: srv, Node: cfg.Node})
	case role.StorageNode:
		return storagenode.New(cfg.StorageNode, storagenode.Deps{Logger: logger, Telemetry: tel, Server: srv, Node: cfg.Node})
	case role.Replication:
		return replication.New(cfg.Replication, replication.Deps{Logger: logger, Telemetry: tel, Server: srv, Node: cfg.Node})
	case role.GroupCoordinator:
		return groupcoord.New(cfg.GroupCoordinator, groupcoord.Deps{Logger: logger, Telemetry: tel, Server: srv, Node: cfg.Node})
	case role.TransactionCoordinator:
		return txncoord.New(cfg.TransactionCoordinator, txncoord.Deps{Logger: logger, Telemetry: tel, Server: srv, Node: cfg.Node})
	}
	panic(fmt.Sprintf("no constructor for role %q", r)) // role.Parse only yields known roles
}

// RoleOf maps a gRPC method to the role that serves it, so each role's
// server spans carry its own service name.
func RoleOf(fullMethod string) string {
	svc := grpcx.ServiceOf(fullMethod)
	for prefix, r := range map[string]role.Role{
		"sluice.controller.":  role.Controller,
		"sluice.storage.":     role.StorageNode,
		"sluice.replication.": role.Replication,
		"sluice.group.":       role.GroupCoordinator,
		"sluice.txn.":         role.TransactionCoordinator,
	} {
		if strings.HasPrefix(svc, prefix) {
			return string(r)
		}
	}
	return "sluiced"
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

// httpService serves Prometheus metrics and pprof profiles.
func httpService(lis net.Listener, tel *telemetry.Providers, logger *slog.Logger) service.Service {
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
	}
}
