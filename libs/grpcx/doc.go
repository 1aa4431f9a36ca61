// Package grpcx builds Sluice's gRPC servers and clients the same way in
// every role: OpenTelemetry stats handlers (a tracer per role), structured
// call logging on slog, panic recovery, request validation, the error
// catalog's status mapping, gRPC health and reflection, and a graceful stop
// that drains calls before it forces them closed.
//
//	srv := grpcx.NewServer(cfg, grpcx.ServerOptions{Logger: logger, Telemetry: tel})
//	storagev1.RegisterStorageServiceServer(srv.GRPC, impl)
//	grpcx.Register(srv.Validators, validateProduce)
//	go srv.Serve(lis)
//	...
//	srv.Stop(ctx)
package grpcx
