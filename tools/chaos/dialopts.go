package main

import (
	"errors"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/verify"
)

// setDialOptions puts the nemesis's client interceptors on the workload's
// clients; it fails while verify.Config cannot carry them.
func setDialOptions(cfg *verify.Config, opts []grpc.DialOption) error {
	_, _ = cfg, opts
	return errors.New("verify.Config has no DialOptions: client-side faults (late-endtxn, stall-member) cannot reach the workload's clients")
}
