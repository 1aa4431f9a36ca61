package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

// HTTPFaults returns the fault endpoint of a process started with
// --unsafe.fault-injection, reached on its HTTP listener
// (ClusterTarget.Faults).
func HTTPFaults(p *devcluster.Process) FaultAPI {
	return httpFaults{c: faultapi.Client{HTTPAddr: p.HTTPAddr}}
}

type httpFaults struct{ c faultapi.Client }

// slowSync is how long each fsync waits under a slow-sync disk fault.
const slowSync = 300 * time.Millisecond

func (h httpFaults) Crash(ctx context.Context, dropUnsynced bool) error {
	return h.c.Crash(ctx, dropUnsynced)
}

// Disk maps the plan's disk details to fault requests: "enospc" fails
// every write with ENOSPC, "slow-sync" delays every fsync.
func (h httpFaults) Disk(ctx context.Context, detail string, d time.Duration) error {
	var f faultapi.DiskFault
	switch detail {
	case "enospc":
		f = faultapi.DiskFault{Op: "write", Error: "ENOSPC", Duration: d}
	case "slow-sync":
		f = faultapi.DiskFault{Op: "sync", Latency: slowSync, Duration: d}
	default:
		return fmt.Errorf("unknown disk fault %q (enospc or slow-sync)", detail)
	}
	_, err := h.c.Disk(ctx, f)
	return err
}

func (h httpFaults) Clock(ctx context.Context, offset time.Duration) error {
	_, err := h.c.Clock(ctx, offset)
	return err
}

// Link maps a plan's link to a link fault on the calls to peerAddr
// (faultapi.AnyPeer for every peer) lasting d.
func (h httpFaults) Link(ctx context.Context, peerAddr string, l Link, d time.Duration) error {
	_, err := h.c.Link(ctx, faultapi.LinkFault{Peer: peerAddr, Delay: l.Delay, Jitter: l.Jitter, Duplicate: l.Duplicate, Duration: d})
	return err
}

func (h httpFaults) Clear(ctx context.Context) error { return h.c.Clear(ctx) }
