package app

import (
	"flag"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/planted"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/services/sluiced/faults"
)

// UnsafeConfig holds switches for testing a cluster to destruction. Never
// on in production.
type UnsafeConfig struct {
	// FaultInjection serves /debug/faults/* on the HTTP listener, runs
	// storage on a FaultFS with a shiftable clock, and role-to-role calls
	// through the link faults' interceptors.
	FaultInjection bool
	// FaultSeed seeds the FaultFS's random choices; 0 picks one from the
	// time (logged).
	FaultSeed uint64
}

// RegisterFlags registers the flags.
func (c *UnsafeConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.FaultInjection, "unsafe.fault-injection", false,
		"UNSAFE, for tests only: serve POST /debug/faults/{crash,disk,flip,clock,link,clear} on the HTTP listener "+
			"(anyone who reaches it can crash the process or corrupt its data), run storage through a fault-injecting file system and a shiftable clock, "+
			"and calls to other processes through interceptors that can delay and duplicate them.")
	fs.Uint64Var(&c.FaultSeed, "unsafe.fault-seed", 0,
		"Seed of the fault-injecting file system's random choices (0 = from the time, logged). Only with --unsafe.fault-injection.")
}

// Validate checks the configuration.
func (c *UnsafeConfig) Validate() error { return nil }

// faultKit is what fault injection builds before the roles: the storage
// file system and clock the replicas use, the link faults of the
// process's role-to-role connections, and the HTTP handler.
type faultKit struct {
	fs      *vfs.FaultFS
	clock   *storage.ShiftedClock
	links   *faults.Links
	handler *faults.Handler
}

// setupUnsafe logs the unsafe switches that are on, and with fault
// injection returns the kit (nil otherwise).
func setupUnsafe(cfg Config, logger *slog.Logger) *faultKit {
	if planted.Enabled {
		logger.Warn("UNSAFE: built with planted bugs (tag sluice_planted); never run this build in production",
			slog.String(planted.EnvVar, strings.Join(planted.Active(), ",")))
	}
	if !cfg.Unsafe.FaultInjection {
		return nil
	}
	seed := cfg.Unsafe.FaultSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	logger.Warn("UNSAFE: fault injection is on: POST /debug/faults/* on the HTTP listener can crash this process and corrupt its data",
		slog.String("http_listen", cfg.Node.HTTPListen), slog.Uint64("fault_seed", seed))
	if cfg.Node.HTTPListen == "" {
		logger.Warn("fault injection has no endpoint: --http-listen is empty")
	}
	return &faultKit{fs: vfs.NewFaultFS(vfs.OS, seed), clock: storage.NewShiftedClock(), links: faults.NewLinks(seed)}
}

// dialOptions are the options of the process's role-to-role connections:
// the link faults' interceptors, or none without fault injection (then no
// call pays for them).
func (k *faultKit) dialOptions() []grpc.DialOption {
	if k == nil {
		return nil
	}
	return k.links.DialOptions()
}

// replicaConfig applies the kit to a replica manager's configuration: every
// log on the one FaultFS and the shifted clock, and ISR lag judged on that
// clock too.
func (k *faultKit) replicaConfig(rc replica.Config) replica.Config {
	if k == nil {
		return rc
	}
	rc.Storage.FS = k.fs
	rc.Storage.Clock = k.clock
	rc.Now = k.clock.Now
	return rc
}

// register builds the handler once the replicas exist and adds it to mux.
func (k *faultKit) register(mux *http.ServeMux, replicas *replica.Manager, logger *slog.Logger) {
	if k == nil {
		return
	}
	d := faults.Deps{Clock: k.clock, Links: k.links, Logger: logger.With(log.Component("faults"))}
	if replicas != nil {
		d.FS = k.fs
		d.ReplicaDir = func(topic string, partition int32) (string, bool) {
			p, ok := replicas.Get(replica.TP{Topic: topic, Partition: partition})
			if !ok || p.Log() == nil {
				return "", false
			}
			return filepath.Clean(p.Log().Dir()), true
		}
	}
	k.handler = faults.New(d)
	k.handler.Register(mux)
}
