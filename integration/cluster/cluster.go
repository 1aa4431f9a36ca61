// Package cluster is the integration-test harness: it starts real sluiced
// processes on loopback (one process with every role, or several controllers
// and storage nodes), and lets tests kill, pause, resume, stop and restart
// any of them. Each process logs to a file; when a test fails, the tail of
// every log is attached to its output.
package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
)

// Options select the topology.
type Options struct {
	// Controllers is the number of controller processes (default 1).
	Controllers int
	// StorageNodes is the number of storage-node processes.
	StorageNodes int
	// Combined runs every role in each controller process.
	Combined bool
	// ExtraArgs are passed to every process.
	ExtraArgs []string
	// Hosts and Wrap place processes in network namespaces (see
	// devcluster.Spec).
	Hosts []string
	Wrap  func(k int) []string
	// Env is added to every process's environment.
	Env []string
	// StorageRoles and Workers: see devcluster.Spec.
	StorageRoles role.Set
	Workers      int
	// GroupCoordinators: see devcluster.Spec.
	GroupCoordinators int
	// TransactionCoordinators: see devcluster.Spec.
	TransactionCoordinators int
	// Sluiced is the server binary to run instead of the workspace's (a
	// build with a planted bug, for a negative control).
	Sluiced string
	// TLS runs the cluster with TLS everywhere (see devcluster.Spec);
	// Client then connects with the cluster's admin certificate.
	TLS bool
}

// DefaultArgs make processes start fast on a busy test machine without
// weakening what the tests check: etcd keeps its real timing, sessions and
// leases stay as configured.
var DefaultArgs = []string{"--log.level=debug"}

// binary builds a program of this workspace once per test binary, unless
// env names a prebuilt one (the Makefile sets SLUICED and SLUICE to bin/).
type binary struct {
	env, pkg, name string
	once           sync.Once
	path           string
	err            error
}

func (b *binary) get(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(b.env); p != "" {
		return p
	}
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "sluice-it-build")
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(dir, b.name)
		if out, err := exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", b.name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var (
	sluiced = &binary{env: "SLUICED", pkg: "github.com/sluice-io/sluice/services/sluiced", name: "sluiced"}
	cli     = &binary{env: "SLUICE", pkg: "github.com/sluice-io/sluice/tools/sluice", name: "sluice"}
)

// Sluiced returns the path of a sluiced binary.
func Sluiced(t testing.TB) string { return sluiced.get(t) }

// CLI returns the path of a sluice (CLI) binary.
func CLI(t testing.TB) string { return cli.get(t) }

// Start starts a cluster for the test and stops it when the test ends.
func Start(t testing.TB, o Options) *devcluster.Cluster {
	t.Helper()
	if o.Controllers == 0 {
		o.Controllers = 1
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := o.Sluiced
	if bin == "" {
		bin = Sluiced(t)
	}
	c, err := devcluster.Start(ctx, devcluster.Spec{
		Sluiced:                 bin,
		Dir:                     dir,
		Controllers:             o.Controllers,
		StorageNodes:            o.StorageNodes,
		Combined:                o.Combined,
		Hosts:                   o.Hosts,
		Env:                     o.Env,
		StorageRoles:            o.StorageRoles,
		Workers:                 o.Workers,
		GroupCoordinators:       o.GroupCoordinators,
		TransactionCoordinators: o.TransactionCoordinators,
		Wrap:                    o.Wrap,
		ExtraArgs:               append(append([]string{}, DefaultArgs...), o.ExtraArgs...),
		ReadyTimeout:            90 * time.Second,
		TLS:                     o.TLS,
	})
	if err != nil {
		dumpLogs(t, dir)
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(func() {
		c.StopAll()
		if t.Failed() {
			dumpLogs(t, dir)
		}
		// SLUICE_TEST_LOGS keeps every process log of every test, for
		// looking into a run that passed but behaved oddly.
		if keep := os.Getenv("SLUICE_TEST_LOGS"); keep != "" {
			dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
			_ = os.MkdirAll(dst, 0o755)
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
				}
			}
		}
	})
	return c
}

// Client returns an SDK client bootstrapped from every process, closed when
// the test ends.
func Client(t testing.TB, c *devcluster.Cluster) *client.Client {
	t.Helper()
	cfg := client.Config{Bootstrap: c.Bootstrap()}
	if f := c.TLS(); f != nil {
		tc, err := f.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// dumpLogs attaches the last lines of every process log to the test output.
func dumpLogs(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if len(lines) > 200 {
				lines = lines[1:]
			}
		}
		_ = f.Close()
		t.Logf("---- last %d lines of %s ----\n%s", len(lines), filepath.Base(path), strings.Join(lines, "\n"))
	}
}
