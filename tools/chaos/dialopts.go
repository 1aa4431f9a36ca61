package main

import (
	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/verify"
)

// setDialOptions puts the nemesis's client interceptors on the workload's
// clients.
func setDialOptions(cfg *verify.Config, opts []grpc.DialOption) error {
	cfg.DialOptions = opts
	return nil
}
