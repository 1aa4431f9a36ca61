package devcluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/libs/role"
)

// Process is one sluiced process of a cluster.
type Process struct {
	Name     string
	NodeID   int32
	Roles    role.Set
	Addr     string
	HTTPAddr string
	// KafkaAddr is the process's Kafka-protocol listener.
	KafkaAddr      string
	EtcdClientAddr string
	EtcdPeerAddr   string
	DataDir        string
	LogPath        string
	Args           []string

	cluster *Cluster
	index   int

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	paused  bool
	stopped bool // stopped on purpose: not reported by OnExit
}

// Start launches the process (again, after it exited). Its output is
// appended to LogPath and, if the cluster has an Output, copied there with
// the process name as prefix.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
		return fmt.Errorf("creating data dir of %s: %w", p.Name, err)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of %s: %w", p.Name, err)
	}
	argv := append([]string{p.cluster.spec.Sluiced}, p.Args...)
	if wrap := p.cluster.spec.Wrap; wrap != nil {
		argv = append(wrap(p.index), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(p.cluster.spec.Env) > 0 {
		cmd.Env = append(os.Environ(), p.cluster.spec.Env...)
	}
	var sink io.Writer = logFile
	var pw *io.PipeWriter
	if p.cluster.out != nil {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		sink = io.MultiWriter(logFile, pw)
		go prefixLines(pr, p.cluster.out, "["+p.Name+"] ")
	}
	cmd.Stdout, cmd.Stderr = sink, sink
	// A process group of its own: Ctrl-C in the terminal reaches the
	// launcher only, which stops the processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // reporting the start error
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.cmd, p.exited, p.exitErr, p.paused, p.stopped = cmd, make(chan struct{}), nil, false, false
	exited := p.exited
	go func() {
		err := cmd.Wait()
		_ = logFile.Close() // nothing more will be written
		if pw != nil {
			_ = pw.Close()
		}
		p.mu.Lock()
		p.exitErr = err
		stopped := p.stopped
		close(exited)
		p.mu.Unlock()
		if !stopped && p.cluster.spec.OnExit != nil {
			p.cluster.spec.OnExit(p, err)
		}
	}()
	return nil
}

func prefixLines(r io.Reader, w io.Writer, prefix string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		_, _ = fmt.Fprintf(w, "%s%s\n", prefix, sc.Bytes()) // the console going away is not an error for the cluster
	}
}

// PID returns the process id, or 0 if it never started.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process has started and not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the process was stopped with SIGSTOP and not yet
// resumed.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Exited returns a channel closed when the current run exits.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

func (p *Process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s was never started", p.Name)
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%s is not running", p.Name)
	default:
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	case syscall.SIGKILL, syscall.SIGTERM:
		p.stopped = sig == syscall.SIGTERM
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to exit: a crash.
func (p *Process) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Exited()
	return nil
}

// Pause sends SIGSTOP: the process freezes with its connections open, as a
// node that stalls in a long GC pause or is descheduled.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused process.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT) }

// Stop asks the process to shut down gracefully (SIGTERM) and waits up to
// timeout before killing it. Stopping a process that is not running is a
// no-op.
func (p *Process) Stop(timeout time.Duration) error {
	if p.Paused() {
		_ = p.Resume() // a stopped process cannot handle SIGTERM
	}
	if p.signal(syscall.SIGTERM) != nil {
		return nil // not running: nothing to stop
	}
	select {
	case <-p.Exited():
		return nil
	case <-time.After(timeout):
		_ = p.signal(syscall.SIGKILL) // it may have exited in between
		<-p.Exited()
		return fmt.Errorf("%s did not stop within %v and was killed", p.Name, timeout)
	}
}

// Restart stops the process if it runs (gracefully) and starts it again with
// the same arguments and data.
func (p *Process) Restart() error {
	if p.Running() {
		if err := p.Stop(10 * time.Second); err != nil {
			return err
		}
	}
	return p.Start()
}

// ExitErr returns how the last run ended (nil while running or after a clean
// exit).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// WaitHealthy polls gRPC health until the process reports SERVING, exits,
// or timeout passes.
func (p *Process) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	creds := insecure.NewCredentials()
	if p.cluster.clientTLS != nil {
		creds = credentials.NewTLS(p.cluster.clientTLS)
	}
	conn, err := grpc.NewClient("passthrough:///"+p.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	exited := p.Exited()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("health is %v", resp.GetStatus())
		}
		last = err
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it was healthy (%v); see %s", p.Name, p.ExitErr(), p.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy within %v: %w; see %s", p.Name, timeout, last, p.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1.
//
// They are drawn at random from below the kernel's ephemeral range: a port
// the kernel handed out for ":0" is also what it hands to the next outgoing
// connection of any process, so between our probe and the server's bind a
// client elsewhere on the machine could take it (seen as "address already in
// use" when tests run in parallel). Ports handed out earlier by this process
// are not handed out again.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close() // only reserving
		}
	}()
	lo, hi := portPool()
	out := make([]int, 0, n)
	for attempts := 0; len(out) < n; attempts++ {
		if attempts > 1000*n {
			return nil, fmt.Errorf("finding %d free ports in %d-%d: too many in use", n, lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		if !claimPort(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use by someone else
		}
		lns = append(lns, l)
		out = append(out, port)
	}
	return out, nil
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
	poolLo     int
	poolHi     int
	poolOnce   sync.Once
)

// claimPort records port as handed out; false if it already was.
func claimPort(port int) bool {
	portsMu.Lock()
	defer portsMu.Unlock()
	if portsGiven[port] {
		return false
	}
	portsGiven[port] = true
	return true
}

// portPool is the range FreePorts draws from: from 20000 up to the start of
// the ephemeral range (Linux default 32768), or 20000-30000 when the range
// cannot be read or leaves too little room.
func portPool() (int, int) {
	poolOnce.Do(func() {
		poolLo, poolHi = 20000, 30000
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
		if err != nil {
			return
		}
		var first, last int
		if _, err := fmt.Sscan(string(b), &first, &last); err != nil {
			return
		}
		if first-poolLo >= 5000 {
			poolHi = first
		} else if last < 60000 {
			poolLo, poolHi = last+1, 65000
		}
	})
	return poolLo, poolHi
}
