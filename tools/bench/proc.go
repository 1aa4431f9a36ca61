package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is a long-running process the harness started (sluiced, sluice
// dev, nats-server), with the processes it started in turn.
type server struct {
	name     string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error  // how it ended, once exited is closed
	children []int  // pids started by the server itself (sluice dev's nodes)
	dataDir  string // removed when the harness stops it, if set
}

// pids returns the server's pid and its children's.
func (s *server) pids() []int { return append([]int{s.cmd.Process.Pid}, s.children...) }

// died describes the server's end if it exited by itself (or any of its
// children did), with the tail of its log; "" while everything runs.
func (s *server) died() string {
	msg := ""
	select {
	case <-s.exited:
		msg = fmt.Sprintf("%s (pid %d) exited: %v", s.name, s.cmd.Process.Pid, s.exitErr)
	default:
		for _, pid := range s.children {
			if st, err := readStat(pid); err != nil || st.state == "Z" {
				msg = fmt.Sprintf("%s: its process %d exited", s.name, pid)
				break
			}
		}
	}
	if msg == "" {
		return ""
	}
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return msg + "; its log ends with:\n" + string(b)
}

// processes keeps every server the harness started so that each one is
// stopped, by pid, on every exit path.
type processes struct {
	mu      sync.Mutex
	servers []*server
	// marker is a string every child command line contains (the temporary
	// directory), checked before a pid that is no longer our child is
	// signalled.
	marker string
}

// start launches a server with its output in logPath. It gets a process
// group of its own (so a Ctrl-C reaches only the harness, which stops it in
// order) and is killed by the kernel if the harness dies first.
func (p *processes) start(name, logPath string, argv []string) (*server, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // reporting the start error
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.exitErr = cmd.Wait()
		_ = logFile.Close() // nothing more will be written
		close(s.exited)
	}()
	p.mu.Lock()
	p.servers = append(p.servers, s)
	p.mu.Unlock()
	return s, nil
}

// adoptChildren records the current children of a server (by parent pid),
// so they are stopped even if the server dies without stopping them.
func (p *processes) adoptChildren(s *server) []int {
	kids := childPids(s.cmd.Process.Pid)
	p.mu.Lock()
	s.children = kids
	p.mu.Unlock()
	return kids
}

// stop stops one server: SIGTERM, then SIGKILL after the grace period; then
// any child of it that is still alive.
func (p *processes) stop(s *server, grace time.Duration) {
	if s == nil {
		return
	}
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM) // it may have exited meanwhile
		select {
		case <-s.exited:
		case <-time.After(grace):
			_ = s.cmd.Process.Kill() // did not stop in time
			<-s.exited
		}
	}
	p.mu.Lock()
	kids := s.children
	p.mu.Unlock()
	for _, pid := range kids {
		p.killIfOurs(pid, grace)
	}
	p.mu.Lock()
	for i, x := range p.servers {
		if x == s {
			p.servers = append(p.servers[:i], p.servers[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// killIfOurs stops a pid whose command line still names our temporary
// directory: SIGTERM, then SIGKILL after grace.
func (p *processes) killIfOurs(pid int, grace time.Duration) {
	ours := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && bytes.Contains(b, []byte(p.marker))
	}
	if !ours() {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM) // checked just above that it is ours
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !ours() || isZombie(pid) {
			return
		}
	}
	if ours() {
		_ = syscall.Kill(pid, syscall.SIGKILL) // did not stop in time
	}
}

// stopAll stops every server still running, newest first.
func (p *processes) stopAll() {
	for {
		p.mu.Lock()
		if len(p.servers) == 0 {
			p.mu.Unlock()
			return
		}
		s := p.servers[len(p.servers)-1]
		p.mu.Unlock()
		p.stop(s, 10*time.Second)
	}
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(id); err == nil && st.ppid == pid {
			out = append(out, id)
		}
	}
	return out
}

func isZombie(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state == "Z"
}

// procStat holds the fields of /proc/<pid>/stat the harness uses.
type procStat struct {
	state      string
	ppid       int
	utime      uint64 // clock ticks
	stime      uint64
	clockTicks float64
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procStat{}, errors.New("short stat")
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return procStat{state: f[0], ppid: ppid, utime: ut, stime: st, clockTicks: 100}, nil
}

// cpuSeconds is utime+stime of the pids, in seconds (USER_HZ is 100 on
// Linux).
func cpuSeconds(pids ...int) float64 {
	var t float64
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil {
			t += float64(st.utime+st.stime) / st.clockTicks
		}
	}
	return t
}

// cpuBusy samples /proc/stat over d and returns the busy share of all CPUs
// (everything but idle and iowait), in percent.
func cpuBusy(d time.Duration) float64 {
	read := func() (busy, total uint64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseUint(f[i], 10, 64)
			total += v
			if i != 4 && i != 5 { // idle, iowait
				busy += v
			}
		}
		return busy, total
	}
	b0, t0 := read()
	time.Sleep(d)
	b1, t1 := read()
	if t1 <= t0 {
		return 0
	}
	return 100 * float64(b1-b0) / float64(t1-t0)
}

// idleGate waits for an idle CPU before a measurement: the machine may be
// shared, and a busy neighbour skews every figure. It gives up after
// maxWait per measurement, and after budget over the whole run, and
// records what it saw.
type idleGate struct {
	threshold float64
	maxWait   time.Duration
	budget    time.Duration
	spent     time.Duration
}

func (g *idleGate) wait(ctx context.Context) (busy float64, waited time.Duration) {
	start := time.Now()
	for {
		busy = cpuBusy(time.Second)
		waited = time.Since(start)
		if busy <= g.threshold || ctx.Err() != nil || waited >= g.maxWait || g.spent+waited >= g.budget {
			g.spent += max(waited-time.Second, 0)
			return busy, waited
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // only probing
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// freeBlock returns a base port p such that p+offset is free for each
// offset (sluice dev lays its processes out from one base port).
func freeBlock(offsets []int) (int, error) {
	for try := range 200 {
		base := 20000 + (os.Getpid()*7+try*97)%30000
		ok := true
		var ls []net.Listener
		for _, off := range offsets {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close() // only probing
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no free block of ports found")
}

// waitPort waits until something accepts connections on addr.
func waitPort(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close() // only probing
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens on %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runResult is the outcome of one measurement command.
type runResult struct {
	stdout  []byte
	cpuUser float64 // of the command itself
	cpuSys  float64
	wall    time.Duration
}

// runCommand runs a measurement command to completion, its progress going
// to logPath; on failure the error carries the log's tail.
func runCommand(ctx context.Context, logPath string, timeout time.Duration, argv []string) (runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logFile, err := os.Create(logPath)
	if err != nil {
		return runResult{}, err
	}
	defer logFile.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Run()
	res := runResult{stdout: out.Bytes(), wall: time.Since(start)}
	if cmd.ProcessState != nil {
		res.cpuUser = cmd.ProcessState.UserTime().Seconds()
		res.cpuSys = cmd.ProcessState.SystemTime().Seconds()
	}
	if err != nil {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 1500 {
			tail = tail[len(tail)-1500:]
		}
		return res, fmt.Errorf("%s: %w\n%s%s", filepath.Base(argv[0]), err, out.String(), tail)
	}
	return res, nil
}
