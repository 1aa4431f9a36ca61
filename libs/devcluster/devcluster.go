// Package devcluster runs a multi-process Sluice cluster on loopback: one
// sluiced process per node, each with its own data directory and ports. It
// is the engine of `sluice dev` and of the integration test harness, which
// need the same things: start every process, wait until each reports
// SERVING, and kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT), stop
// (SIGTERM) or restart any one of them.
//
//	c, err := devcluster.Start(ctx, devcluster.Spec{Sluiced: "bin/sluiced", Dir: dir, Controllers: 3, StorageNodes: 3})
//	defer c.StopAll()
//	c.Process("storage-2").Kill()
package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/libs/role"
)

// Spec describes a cluster to start.
type Spec struct {
	// Sluiced is the path of the sluiced binary.
	Sluiced string
	// Dir holds one data directory and one log file per process.
	Dir string
	// Controllers is the number of controller processes (at least 1); they
	// form one etcd quorum.
	Controllers int
	// StorageNodes is the number of storage-node processes. Each also runs
	// replication and the two coordinator roles, as Kafka brokers do.
	StorageNodes int
	// Combined runs every role in each controller process (sluiced
	// --roles=all), as `make run` does.
	Combined bool
	// StorageRoles are the roles of storage-node processes; empty means
	// storage-node, replication and both coordinators.
	StorageRoles role.Set
	// Workers is the number of replication workers in processes of their
	// own (after the storage nodes), for storage nodes without the
	// replication role.
	Workers int
	// GroupCoordinators is the number of group coordinators in processes
	// of their own (after the workers). With any, storage nodes run
	// without the group-coordinator role (unless StorageRoles says
	// otherwise), and the coordinators share the groups.
	GroupCoordinators int
	// TransactionCoordinators is the number of transaction coordinators in
	// processes of their own (after the group coordinators). With any,
	// storage nodes run without the transaction-coordinator role (unless
	// StorageRoles says otherwise), and the coordinators share
	// __transaction_state.
	TransactionCoordinators int
	// BasePort is the first port; process k (0-based, controllers first)
	// uses BasePort+10k for gRPC, +1 for HTTP, +2 and +3 for etcd, +4 for
	// the Kafka listener. 0 picks free ports.
	BasePort int
	// Host is the address to bind; empty means 127.0.0.1.
	Host string
	// Hosts, if set, gives each process (controllers first) its own
	// address, such as a network namespace's; every process then uses the
	// base ports.
	Hosts []string
	// Wrap, if set, returns a command prefix for process k, such as
	// "ip netns exec <ns>".
	Wrap func(k int) []string
	// ExtraArgs are appended to every process's command line.
	ExtraArgs []string
	// Env is added to every process's environment.
	Env []string
	// Output, if set, receives every process's log lines prefixed with its
	// name; otherwise logs go only to <Dir>/<name>.log.
	Output io.Writer
	// OnExit, if set, is called when a process exits by itself or is
	// killed.
	OnExit func(p *Process, err error)
	// ReadyTimeout bounds the wait for each process to report SERVING.
	ReadyTimeout time.Duration
	// TLS runs every listener, etcd member and role-to-role connection
	// over TLS with certificates from a throw-away CA under Dir/tls (made
	// on first use, kept across restarts); Cluster.TLS names the files a
	// client needs.
	TLS bool
}

// Cluster is a running set of processes.
type Cluster struct {
	spec  Spec
	procs []*Process
	out   *lockedWriter

	tls       *TLSFiles
	clientTLS *tls.Config // nil for plaintext
}

// Start launches every process and waits until each one reports SERVING.
// On error, whatever started is stopped.
func Start(ctx context.Context, spec Spec) (*Cluster, error) {
	if spec.Controllers < 1 {
		return nil, errors.New("at least one controller is required")
	}
	if spec.StorageNodes < 0 {
		return nil, errors.New("storage nodes cannot be negative")
	}
	if spec.Host == "" {
		spec.Host = "127.0.0.1"
	}
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 60 * time.Second
	}
	if _, err := os.Stat(spec.Sluiced); err != nil {
		return nil, fmt.Errorf("sluiced binary: %w", err)
	}
	if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cluster dir: %w", err)
	}
	c := &Cluster{spec: spec}
	if spec.Output != nil {
		c.out = &lockedWriter{w: spec.Output}
	}
	n := spec.Controllers + spec.StorageNodes + spec.Workers + spec.GroupCoordinators + spec.TransactionCoordinators
	ports, err := c.ports(n)
	if err != nil {
		return nil, err
	}
	var peers, controllerAddrs []string
	host := func(k int) string {
		if k < len(spec.Hosts) {
			return spec.Hosts[k]
		}
		return spec.Host
	}
	for i := range spec.Controllers {
		scheme := "http"
		if spec.TLS {
			scheme = "https"
		}
		peers = append(peers, fmt.Sprintf("controller-%d=%s://%s:%d", i+1, scheme, host(i), ports[i][3]))
		controllerAddrs = append(controllerAddrs, fmt.Sprintf("%s:%d", host(i), ports[i][0]))
	}
	for k := range n {
		p := &Process{cluster: c, NodeID: int32(k + 1), index: k}
		var roleArgs []string
		addr := func(i int) string { return fmt.Sprintf("%s:%d", host(k), ports[k][i]) }
		p.Addr, p.HTTPAddr, p.KafkaAddr = addr(0), addr(1), addr(4)
		if k < spec.Controllers {
			p.Name = fmt.Sprintf("controller-%d", k+1)
			p.Roles = role.Set{role.Controller}
			if spec.Combined {
				p.Roles = role.All
			}
			p.EtcdClientAddr, p.EtcdPeerAddr = addr(2), addr(3)
		} else if k < spec.Controllers+spec.StorageNodes {
			p.Name = fmt.Sprintf("storage-%d", k-spec.Controllers+1)
			p.Roles = role.Set{role.StorageNode, role.Replication}
			if spec.GroupCoordinators == 0 {
				p.Roles = append(p.Roles, role.GroupCoordinator)
			}
			if spec.TransactionCoordinators == 0 {
				p.Roles = append(p.Roles, role.TransactionCoordinator)
			}
			if len(spec.StorageRoles) > 0 {
				p.Roles = spec.StorageRoles
			}
		} else if k >= spec.Controllers+spec.StorageNodes+spec.Workers+spec.GroupCoordinators {
			x := k - spec.Controllers - spec.StorageNodes - spec.Workers - spec.GroupCoordinators
			p.Name = fmt.Sprintf("transaction-coordinator-%d", x+1)
			p.Roles = role.Set{role.TransactionCoordinator}
		} else if k >= spec.Controllers+spec.StorageNodes+spec.Workers {
			g := k - spec.Controllers - spec.StorageNodes - spec.Workers
			p.Name = fmt.Sprintf("group-coordinator-%d", g+1)
			p.Roles = role.Set{role.GroupCoordinator}
		} else {
			w := k - spec.Controllers - spec.StorageNodes
			p.Name = fmt.Sprintf("replication-%d", w+1)
			p.Roles = role.Set{role.Replication}
			roleArgs = []string{fmt.Sprintf("--replication.shard=%d", w), fmt.Sprintf("--replication.shards=%d", spec.Workers)}
		}
		p.DataDir = filepath.Join(spec.Dir, p.Name)
		p.LogPath = filepath.Join(spec.Dir, p.Name+".log")
		p.Args = []string{
			"--roles=" + p.Roles.String(),
			fmt.Sprintf("--node-id=%d", p.NodeID),
			"--data-dir=" + p.DataDir,
			"--listen=" + p.Addr,
			"--http-listen=" + p.HTTPAddr,
			"--kafka-listen=" + p.KafkaAddr,
			"--controllers=" + strings.Join(controllerAddrs, ","),
		}
		p.Args = append(p.Args, roleArgs...)
		if p.Roles.Has(role.Controller) {
			p.Args = append(p.Args,
				"--controller.etcd.name="+p.Name,
				"--controller.etcd.client-listen="+p.EtcdClientAddr,
				"--controller.etcd.peer-listen="+p.EtcdPeerAddr,
				"--controller.etcd.initial-cluster="+strings.Join(peers, ","),
			)
		}
		c.procs = append(c.procs, p)
	}
	if spec.TLS {
		if err := c.setupTLS(spec.Dir, host); err != nil {
			return nil, err
		}
	}
	for _, p := range c.procs {
		p.Args = append(p.Args, spec.ExtraArgs...)
	}
	for _, p := range c.procs {
		if err := p.Start(); err != nil {
			c.StopAll()
			return nil, err
		}
	}
	// Controllers wait for each other to form the quorum, so wait for all
	// processes together.
	if err := c.WaitHealthy(ctx, spec.ReadyTimeout); err != nil {
		c.StopAll()
		return nil, err
	}
	return c, nil
}

// portsPerProcess: gRPC, HTTP, etcd client, etcd peer, Kafka.
const portsPerProcess = 5

// ports returns, for each process, its gRPC, HTTP, etcd client, etcd peer
// and Kafka ports.
func (c *Cluster) ports(n int) ([][portsPerProcess]int, error) {
	out := make([][portsPerProcess]int, n)
	if len(c.spec.Hosts) > 0 {
		base := c.spec.BasePort
		if base == 0 {
			base = 9090
		}
		for k := range n {
			for i := range portsPerProcess {
				out[k][i] = base + i
			}
		}
		return out, nil
	}
	if c.spec.BasePort != 0 {
		for k := range n {
			for i := range portsPerProcess {
				out[k][i] = c.spec.BasePort + 10*k + i
			}
		}
		return out, nil
	}
	free, err := FreePorts(portsPerProcess * n)
	if err != nil {
		return nil, err
	}
	for k := range n {
		copy(out[k][:], free[portsPerProcess*k:portsPerProcess*(k+1)])
	}
	return out, nil
}

// Processes returns every process, controllers first.
func (c *Cluster) Processes() []*Process { return c.procs }

// Process returns the process with the given name, or nil.
func (c *Cluster) Process(name string) *Process {
	for _, p := range c.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Controllers returns the controller processes.
func (c *Cluster) Controllers() []*Process { return c.filter(role.Controller) }

// StorageNodes returns the storage-node processes.
func (c *Cluster) StorageNodes() []*Process { return c.filter(role.StorageNode) }

func (c *Cluster) filter(r role.Role) []*Process {
	var out []*Process
	for _, p := range c.procs {
		if p.Roles.Has(r) {
			out = append(out, p)
		}
	}
	return out
}

// Bootstrap returns the gRPC addresses of every process, for clients.
func (c *Cluster) Bootstrap() []string {
	out := make([]string, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.Addr
	}
	return out
}

// KafkaBootstrap returns the Kafka-protocol addresses of every process,
// for Kafka clients.
func (c *Cluster) KafkaBootstrap() []string {
	out := make([]string, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.KafkaAddr
	}
	return out
}

// WaitHealthy waits until every running process reports SERVING.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.procs))
	for i, p := range c.procs {
		if !p.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.WaitHealthy(ctx, timeout)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopAll stops every process: SIGTERM, then SIGKILL for any that has not
// exited within 10 s. Paused processes are resumed first so they can exit.
// Processes without the controller role stop first, in parallel, then the
// controllers: a storage node's controlled shutdown asks the active
// controller to move its leaderships away, and with the controllers gone
// at the same moment it retried for its whole timeout (3 s) before giving
// up, on every multi-process cluster a test tore down.
func (c *Cluster) StopAll() {
	stop := func(controllers bool) {
		var wg sync.WaitGroup
		for _, p := range c.procs {
			if p.Roles.Has(role.Controller) == controllers {
				wg.Go(func() { _ = p.Stop(10 * time.Second) })
			}
		}
		wg.Wait()
	}
	stop(false)
	stop(true)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
