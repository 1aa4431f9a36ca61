package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/libs/client"
)

// The connection-scale benchmark (`sluice-bench connections`, `make
// bench-connections`): what idle clients cost one `sluiced --roles=all`.
// A crowd process opens, in steps, idle SDK producers (each its own
// client, so its own gRPC connection, having produced one record), SDK
// consumers following a quiet topic at its end (each a fetch stream the
// server holds open, the SDK's long poll) and idle franz-go clients on the
// Kafka listener (one produce each). After each step the server's RSS,
// goroutines and open files are read, so each kind's cost per connection
// is a difference over a step. One active client produces and consumes
// 1 KiB records at a modest rate before the crowd, with it, and after it
// left, giving its ack and end-to-end latency side by side in one run.
// Then, on a fresh server, the cost of partition replicas: RSS, open files
// and files on disk with N partitions (RF 1) created.

type connConfig struct {
	binDir, outDir, tmpParent string
	producers, consumers      int
	kafka, kafkaConsumers     int
	groups                    int
	quietPartitions           int
	rate                      float64
	window                    time.Duration
	partitionSteps            []int
}

// serverSnap is one reading of the server process.
type serverSnap struct {
	Label      string  `json:"label"`
	CrowdRSS   float64 `json:"crowd_process_rss_mib,omitempty"`
	RSSMiB     float64 `json:"rss_mib"`
	HeapMiB    float64 `json:"go_heap_inuse_mib,omitempty"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	Maps       int     `json:"memory_maps"`
	Files      int     `json:"data_files,omitempty"`
	CPUPct     float64 `json:"server_cpu_pct_quiet"` // server CPU over a quiet window, percent of one core
}

// activeFigures is the active client's window.
type activeFigures struct {
	Label     string  `json:"label"`
	Records   int     `json:"records"`
	AckP50    float64 `json:"ack_p50_ms"`
	AckP99    float64 `json:"ack_p99_ms"`
	E2EP50    float64 `json:"e2e_p50_ms"`
	E2EP99    float64 `json:"e2e_p99_ms"`
	ServerCPU float64 `json:"server_cpu_pct"`
}

type connReport struct {
	Date       string            `json:"date"`
	Minutes    float64           `json:"minutes"`
	Facts      facts             `json:"facts"`
	Servers    map[string]string `json:"servers"`
	Plan       map[string]any    `json:"plan"`
	Steps      []serverSnap      `json:"connection_steps"`
	OpenTimes  map[string]string `json:"open_times"`
	CrowdCPU   float64           `json:"crowd_process_cpu_pct_quiet"`
	Active     []activeFigures   `json:"active_client"`
	Partitions []serverSnap      `json:"partition_steps"`
	Notes      []string          `json:"notes"`
}

func connectionsMain(args []string) error {
	fs := flag.NewFlagSet("connections", flag.ExitOnError)
	var c connConfig
	var steps string
	fs.StringVar(&c.binDir, "bin", "bin", "directory with sluiced and sluice")
	fs.StringVar(&c.outDir, "out", "bench/results", "directory for <date>-connections.md and .json")
	fs.StringVar(&c.tmpParent, "tmp", "", "parent of the temporary data directory (default $TMPDIR)")
	fs.IntVar(&c.producers, "producers", 5000, "idle SDK producers, one gRPC connection each")
	fs.IntVar(&c.consumers, "consumers", 1000, "SDK consumers following a quiet topic at its end, one gRPC connection each")
	fs.IntVar(&c.kafka, "kafka", 1000, "idle franz-go producers on the Kafka listener")
	fs.IntVar(&c.kafkaConsumers, "kafka-consumers", 500, "franz-go consumers long-polling the quiet topic at its end on the Kafka listener")
	fs.IntVar(&c.groups, "groups", 500, "consumer groups of one SDK member each (consumer protocol) on the quiet topic, polling in a loop")
	fs.IntVar(&c.quietPartitions, "quiet-partitions", 8, "partitions of the quiet topic the consumers follow")
	fs.Float64Var(&c.rate, "rate", 200, "records/s of the active client")
	fs.DurationVar(&c.window, "window", 20*time.Second, "length of each active-client window")
	fs.StringVar(&steps, "partition-steps", "1000,2000", "partition replicas (RF 1) on one node at each reading, cumulative; empty skips")
	_ = fs.Parse(args) // ExitOnError
	for _, s := range strings.Split(steps, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return fmt.Errorf("--partition-steps: %q is not a count", s)
			}
			c.partitionSteps = append(c.partitionSteps, n)
		}
	}
	// Both the server and the crowd hold one descriptor per connection;
	// children inherit the raised limit.
	if err := raiseFDLimit(1 << 20); err != nil {
		return err
	}
	h, cleanup, err := openHarness(c.binDir, c.tmpParent, "sluice-bench-conn-", idleGate{})
	if err != nil {
		return err
	}
	defer cleanup()
	c.binDir = h.cfg.binDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep := &connReport{Servers: h.servers, OpenTimes: map[string]string{}, Facts: h.facts,
		Plan: map[string]any{"producers": c.producers, "consumers": c.consumers, "kafka": c.kafka, "kafka_consumers": c.kafkaConsumers, "groups": c.groups, "quiet_partitions": c.quietPartitions,
			"rate": c.rate, "window_s": c.window.Seconds(), "record_size": 1024, "acks": "all", "replication_factor": 1}}
	if err := connRun(ctx, h, c, rep); err != nil {
		return err
	}
	if len(c.partitionSteps) > 0 {
		if err := partitionRun(ctx, h, c, rep); err != nil {
			return err
		}
	}
	rep.Date = time.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	rep.Minutes = math.Round(time.Since(start).Minutes()*10) / 10
	md, js, err := writeReport(c.outDir, rep.Date, "connections", rep, rep.markdown())
	if err != nil {
		return err
	}
	h.logf("report: %s and %s", md, js)
	fmt.Print(rep.markdown())
	return nil
}

func raiseFDLimit(n uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= n {
		return nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, l.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Not root: as far as the hard limit allows.
		want = syscall.Rlimit{Cur: l.Max, Max: l.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return fmt.Errorf("raising the open-files limit: %w", err)
		}
	}
	return nil
}

// startConnSluiced starts one `sluiced --roles=all` with a Kafka listener
// and returns it with its gRPC, HTTP and Kafka addresses and data dir.
func startConnSluiced(h *harness, name string) (*server, [3]string, string, error) {
	var a [3]string
	ports, err := freePorts(5)
	if err != nil {
		return nil, a, "", err
	}
	dir := filepath.Join(h.tmp, name)
	a = [3]string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[4])}
	argv := []string{filepath.Join(h.cfg.binDir, "sluiced"), "--roles=all", "--node-id=1", "--data-dir=" + dir,
		"--listen=" + a[0], "--http-listen=" + a[1],
		fmt.Sprintf("--controller.etcd.client-listen=127.0.0.1:%d", ports[2]),
		fmt.Sprintf("--controller.etcd.peer-listen=127.0.0.1:%d", ports[3]), "--kafka-listen=" + a[2], "--log.level=warn"}
	srv, err := h.procs.start(name, filepath.Join(h.tmp, name+".log"), argv)
	if err != nil {
		return nil, a, "", err
	}
	h.servers[name] = h.display(argv)
	if err := waitCluster(context.Background(), a[0], 1, 60*time.Second); err != nil {
		return nil, a, "", err
	}
	if err := waitPort(context.Background(), a[2], 30*time.Second); err != nil {
		return nil, a, "", err
	}
	return srv, a, dir, nil
}

// snap reads the server: RSS and open descriptors from /proc, goroutines
// and Go heap from its HTTP endpoint, and the server's CPU over quiet.
func snap(label string, srv *server, httpAddr, dataDir string, quiet time.Duration) serverSnap {
	pid := srv.cmd.Process.Pid
	s := serverSnap{Label: label}
	if quiet > 0 {
		c0 := cpuSeconds(pid)
		time.Sleep(quiet)
		s.CPUPct = round1((cpuSeconds(pid) - c0) / quiet.Seconds() * 100)
	}
	s.RSSMiB = rssMiB(pid)
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.FDs = len(ents)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil {
		s.Maps = strings.Count(string(b), "\n")
	}
	if resp, err := http.Get("http://" + httpAddr + "/debug/pprof/goroutine?debug=1"); err == nil {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		_ = resp.Body.Close() // read what was needed
		_, n, _ := strings.Cut(strings.TrimSpace(line), "total ")
		s.Goroutines, _ = strconv.Atoi(n)
	}
	if resp, err := http.Get("http://" + httpAddr + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
				x, _ := strconv.ParseFloat(v, 64)
				s.HeapMiB = round1(x / (1 << 20))
			}
		}
		_ = resp.Body.Close() // read what was needed
	}
	if dataDir != "" {
		_ = filepath.WalkDir(dataDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				s.Files++
			}
			return nil
		})
	}
	return s
}

// rssMiB is a process's resident set in MiB (0 if unknown).
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return round1(kb / 1024)
		}
	}
	return 0
}

func connRun(ctx context.Context, h *harness, c connConfig, rep *connReport) error {
	srv, a, _, err := startConnSluiced(h, "sluiced-conn")
	if err != nil {
		return err
	}
	defer h.procs.stop(srv, 20*time.Second)
	admin, err := client.New(client.Config{Bootstrap: []string{a[0]}})
	if err != nil {
		return err
	}
	defer admin.Close()
	cfgs := map[string]string{"sluice.fsync.before.ack": "false"}
	for _, t := range []struct {
		name string
		n    int32
	}{{"active", 1}, {"idle", 1}, {"quiet", int32(c.quietPartitions)}} {
		if _, err := admin.CreateTopic(ctx, t.name, t.n, 1, cfgs); err != nil {
			return fmt.Errorf("creating %s: %w", t.name, err)
		}
		if err := waitLeaders(ctx, admin, t.name, int(t.n)); err != nil {
			return err
		}
	}
	act, err := newActiveClient(ctx, a[0])
	if err != nil {
		return err
	}
	defer act.close()
	const quiet = 5 * time.Second
	settle := func() { time.Sleep(3 * time.Second) }

	window := func(label string) {
		pid := srv.cmd.Process.Pid
		c0 := cpuSeconds(pid)
		t0 := time.Now()
		f := act.run(ctx, label, c.rate, c.window)
		f.ServerCPU = round1((cpuSeconds(pid) - c0) / time.Since(t0).Seconds() * 100)
		rep.Active = append(rep.Active, f)
		h.logf("%-14s ack p50 %.2f p99 %.2f ms, e2e p50 %.2f p99 %.2f ms, server CPU %.1f%%", label, f.AckP50, f.AckP99, f.E2EP50, f.E2EP99, f.ServerCPU)
	}
	logSnap := func(s serverSnap) {
		rep.Steps = append(rep.Steps, s)
		h.logf("%-14s RSS %.1f MiB, heap %.1f MiB, %d goroutines, %d fds, quiet CPU %.1f%%", s.Label, s.RSSMiB, s.HeapMiB, s.Goroutines, s.FDs, s.CPUPct)
	}

	settle()
	logSnap(snap("baseline", srv, a[1], "", quiet))
	window("without crowd")

	cmd := exec.Command(h.self, "connections-crowd", "--addr", a[0], "--kafka-addr", a[2], "--quiet-partitions", strconv.Itoa(c.quietPartitions))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	crowdDone := false
	defer func() {
		if !crowdDone {
			_ = cmd.Process.Kill() // our child, by pid
			_ = cmd.Wait()         // reaping it
		}
	}()
	replies := bufio.NewScanner(stdout)
	ask := func(kind string, n int) error {
		if n == 0 {
			return nil
		}
		fmt.Fprintf(stdin, "%s %d\n", kind, n)
		if !replies.Scan() {
			return fmt.Errorf("the crowd process ended before opening its %s", kind)
		}
		reply := replies.Text()
		if !strings.HasPrefix(reply, "ok ") {
			return fmt.Errorf("crowd: %s", reply)
		}
		rep.OpenTimes[kind] = strings.TrimPrefix(reply, "ok ")
		settle()
		s := snap(fmt.Sprintf("+%d %s", n, kind), srv, a[1], "", quiet)
		s.CrowdRSS = rssMiB(cmd.Process.Pid)
		logSnap(s)
		return nil
	}
	for _, st := range []struct {
		kind string
		n    int
	}{{"producers", c.producers}, {"consumers", c.consumers}, {"kafka", c.kafka}, {"kafka-consumers", c.kafkaConsumers}, {"groups", c.groups}} {
		if err := ask(st.kind, st.n); err != nil {
			return err
		}
	}
	{
		c0 := cpuSeconds(cmd.Process.Pid)
		time.Sleep(quiet)
		rep.CrowdCPU = round1((cpuSeconds(cmd.Process.Pid) - c0) / quiet.Seconds() * 100)
	}
	window("with crowd")
	logSnap(snap("crowd, after load", srv, a[1], "", 0))
	_ = stdin.Close() // the crowd closes its clients and exits
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			return fmt.Errorf("crowd process: %w", err)
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill() // our child, by pid; its connections end all the same
		<-waited
		rep.Notes = append(rep.Notes, "The crowd process did not close its clients within 3 min and was killed.")
	}
	crowdDone = true
	settle()
	logSnap(snap("crowd gone", srv, a[1], "", quiet))
	window("crowd gone")
	return ctx.Err()
}

func partitionRun(ctx context.Context, h *harness, c connConfig, rep *connReport) error {
	srv, a, dir, err := startConnSluiced(h, "sluiced-parts")
	if err != nil {
		return err
	}
	defer h.procs.stop(srv, 30*time.Second)
	admin, err := client.New(client.Config{Bootstrap: []string{a[0]}, RequestTimeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer admin.Close()
	time.Sleep(3 * time.Second)
	s := snap("0 partitions", srv, a[1], dir, 5*time.Second)
	rep.Partitions = append(rep.Partitions, s)
	h.logf("%-16s RSS %.1f MiB, %d goroutines, %d fds, %d files, quiet CPU %.1f%%", s.Label, s.RSSMiB, s.Goroutines, s.FDs, s.Files, s.CPUPct)
	have := 0
	for i, n := range c.partitionSteps {
		// Topics of 100 partitions, as a cluster holds many topics.
		for have < n {
			k := min(100, n-have)
			name := fmt.Sprintf("parts-%d-%d", i, have)
			t0 := time.Now()
			if _, err := admin.CreateTopic(ctx, name, int32(k), 1, nil); err != nil {
				return fmt.Errorf("creating %s: %w", name, err)
			}
			if err := waitLeaders(ctx, admin, name, k); err != nil {
				return err
			}
			have += k
			if have%500 == 0 {
				h.logf("%d partitions (last topic ready in %v)", have, time.Since(t0).Round(time.Millisecond))
			}
		}
		time.Sleep(5 * time.Second)
		s := snap(fmt.Sprintf("%d partitions", n), srv, a[1], dir, 5*time.Second)
		rep.Partitions = append(rep.Partitions, s)
		h.logf("%-16s RSS %.1f MiB, %d goroutines, %d fds, %d maps, %d files, quiet CPU %.1f%%", s.Label, s.RSSMiB, s.Goroutines, s.FDs, s.Maps, s.Files, s.CPUPct)
	}
	// What one partition replica keeps on disk, as an example.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || !strings.HasPrefix(d.Name(), "parts-") {
			return nil
		}
		ents, _ := os.ReadDir(path)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".log") }) {
			return nil
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("Files of one empty partition replica (%s): %s.", d.Name(), strings.Join(names, ", ")))
		return filepath.SkipAll
	})
	return ctx.Err()
}

// waitLeaders waits until every partition of topic has a leader.
func waitLeaders(ctx context.Context, admin *client.Client, topic string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		md, err := admin.Metadata(ctx, topic)
		if err == nil {
			led := 0
			for _, t := range md.GetTopics() {
				for _, p := range t.GetPartitions() {
					if p.GetLeaderId() > 0 {
						led++
					}
				}
			}
			if led >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: partitions without a leader after 2 min (%v)", topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// activeClient produces to and consumes from the "active" topic with its
// own connection; each value starts with its send time.
type activeClient struct {
	c    *client.Client
	prod *client.Producer
	cons *client.Consumer
}

func newActiveClient(ctx context.Context, addr string) (*activeClient, error) {
	c, err := client.New(client.Config{Bootstrap: []string{addr}})
	if err != nil {
		return nil, err
	}
	a := &activeClient{c: c, prod: c.NewProducer(client.ProducerConfig{Acks: client.AcksAll, Linger: time.Millisecond}), cons: c.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest})}
	a.cons.Assign(client.TopicPartition{Topic: "active"})
	// One record through both ways first, so the windows measure neither
	// the producer id nor the first metadata and fetch stream.
	if _, err := a.prod.ProduceSync(ctx, &client.Record{Topic: "active", Partition: 0, Value: make([]byte, 1024)}); err != nil {
		a.close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.cons.Poll(pctx); err != nil {
		a.close()
		return nil, fmt.Errorf("reading the first active record: %w", err)
	}
	return a, nil
}

func (a *activeClient) close() {
	a.cons.Close()
	_ = a.prod.Close(context.Background()) // the run is over
	_ = a.c.Close()                        // the run is over
}

func (a *activeClient) run(ctx context.Context, label string, rate float64, d time.Duration) activeFigures {
	var mu sync.Mutex
	var acks, e2e []float64
	n := int(rate * d.Seconds())
	rctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	got := make(chan struct{})
	go func() {
		defer close(got)
		seen := 0
		for seen < n {
			recs, err := a.cons.Poll(rctx)
			if err != nil {
				return
			}
			now := time.Now().UnixNano()
			mu.Lock()
			for _, r := range recs {
				if len(r.Value) >= 8 {
					e2e = append(e2e, float64(now-int64(binary.BigEndian.Uint64(r.Value)))/1e6)
					seen++
				}
			}
			mu.Unlock()
		}
	}()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; i < n && rctx.Err() == nil; i++ {
		<-tick.C
		v := make([]byte, 1024)
		sent := time.Now()
		binary.BigEndian.PutUint64(v, uint64(sent.UnixNano()))
		_ = a.prod.Produce(rctx, &client.Record{Topic: "active", Partition: 0, Value: v}, func(r client.Result) {
			if r.Err == nil {
				mu.Lock()
				acks = append(acks, float64(time.Since(sent).Microseconds())/1000)
				mu.Unlock()
			}
		})
	}
	_ = a.prod.Flush(rctx) // acks counted by the callbacks
	<-got
	mu.Lock()
	defer mu.Unlock()
	return activeFigures{Label: label, Records: len(e2e), AckP50: pctl(acks, 50), AckP99: pctl(acks, 99), E2EP50: pctl(e2e, 50), E2EP99: pctl(e2e, 99)}
}

// pctl is the p-th percentile (nearest rank) of v in ms, rounded to 0.01.
func pctl(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return math.Round(s[i]*100) / 100
}

// connectionsCrowd is `sluice-bench connections-crowd`: it reads lines
// "<kind> <n>" on stdin, opens n idle clients of that kind, each with a
// connection of its own, answers "ok <seconds>" and keeps them until stdin
// closes.
func connectionsCrowd(args []string) error {
	fs := flag.NewFlagSet("connections-crowd", flag.ExitOnError)
	addr := fs.String("addr", "", "gRPC address")
	kafkaAddr := fs.String("kafka-addr", "", "Kafka listener address")
	quietParts := fs.Int("quiet-partitions", 8, "partitions of the quiet topic")
	_ = fs.Parse(args) // ExitOnError
	if err := raiseFDLimit(1 << 20); err != nil {
		return err
	}
	var closers []func()
	var mu sync.Mutex
	keep := func(f func()) { mu.Lock(); closers = append(closers, f); mu.Unlock() }
	var open func(n int, one func(i int) error) error
	defer func() {
		_ = open(len(closers), func(i int) error { closers[i](); return nil }) // closing never fails
	}()
	open = func(n int, one func(i int) error) error {
		var next atomic.Int64
		var first error
		var once sync.Once
		var wg sync.WaitGroup
		for range 32 { // opening in parallel, not all at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					if err := one(i); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		return first
	}
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		kind, ns, _ := strings.Cut(in.Text(), " ")
		n, _ := strconv.Atoi(ns)
		t0 := time.Now()
		// A step that hangs fails instead of holding up the run.
		sctx, cancelStep := context.WithTimeout(ctx, 10*time.Minute)
		var err error
		switch kind {
		case "producers":
			err = open(n, func(int) error {
				c, err := client.New(client.Config{Bootstrap: []string{*addr}})
				if err != nil {
					return err
				}
				p := c.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
				keep(func() { _ = p.Close(ctx); _ = c.Close() }) // ending
				_, err = p.ProduceSync(sctx, &client.Record{Topic: "idle", Partition: 0, Value: make([]byte, 1024)})
				return err
			})
		case "consumers":
			err = open(n, func(i int) error {
				c, err := client.New(client.Config{Bootstrap: []string{*addr}})
				if err != nil {
					return err
				}
				k := c.NewConsumer(client.ConsumerConfig{Reset: client.ResetLatest})
				keep(func() { k.Close(); _ = c.Close() }) // ending
				k.Assign(client.TopicPartition{Topic: "quiet", Partition: int32(i % *quietParts)})
				// The consumer has reached the log end and waits on its
				// fetch stream once a short Poll times out with nothing.
				pctx, cancel := context.WithTimeout(sctx, 200*time.Millisecond)
				defer cancel()
				if _, err := k.Poll(pctx); err != nil && pctx.Err() == nil {
					return err
				}
				return nil
			})
		case "kafka":
			err = open(n, func(int) error {
				// franz-go closes a connection idle for 20 s by default (15 min at most);
				// these are meant to stay.
				k, err := kgo.NewClient(kgo.SeedBrokers(*kafkaAddr), kgo.DefaultProduceTopic("idle"), kgo.ConnIdleTimeout(15*time.Minute))
				if err != nil {
					return err
				}
				keep(k.Close)
				return k.ProduceSync(sctx, &kgo.Record{Value: make([]byte, 1024)}).FirstErr()
			})
		case "groups":
			// One member per group, consumer protocol, polling in a loop
			// as an application waiting for records does; ready once it
			// owns the quiet topic.
			err = open(n, func(i int) error {
				c, err := client.New(client.Config{Bootstrap: []string{*addr}})
				if err != nil {
					return err
				}
				g, err := c.NewGroupConsumer(client.GroupConsumerConfig{GroupID: fmt.Sprintf("idle-%d", i), Topics: []string{"quiet"},
					Protocol: client.GroupProtocolConsumer, AutoCommit: true})
				if err != nil {
					_ = c.Close() // reporting err
					return err
				}
				gctx, stop := context.WithCancel(ctx)
				polled := make(chan struct{})
				go func() {
					defer close(polled)
					for gctx.Err() == nil {
						pctx, cancel := context.WithTimeout(gctx, time.Second)
						_, _ = g.Poll(pctx) // a quiet topic: timeouts, and errors retried by polling again
						cancel()
					}
				}()
				keep(func() { stop(); <-polled; _ = g.Close(ctx); _ = c.Close() }) // ending
				for deadline := time.Now().Add(time.Minute); len(g.Assignment()) < *quietParts && sctx.Err() == nil; {
					if time.Now().After(deadline) {
						return fmt.Errorf("group idle-%d: %d of %d partitions after 1 min", i, len(g.Assignment()), *quietParts)
					}
					time.Sleep(50 * time.Millisecond)
				}
				return sctx.Err()
			})
		case "kafka-consumers":
			err = open(n, func(int) error {
				// Fetch long-polls at the log end (fetch.max.wait.ms, 5 s
				// by franz-go's default).
				k, err := kgo.NewClient(kgo.SeedBrokers(*kafkaAddr), kgo.ConsumeTopics("quiet"),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.ConnIdleTimeout(15*time.Minute))
				if err != nil {
					return err
				}
				keep(k.Close)
				pctx, cancel := context.WithTimeout(sctx, 200*time.Millisecond)
				defer cancel()
				if err := k.PollFetches(pctx).Err(); err != nil && pctx.Err() == nil {
					return err
				}
				return nil
			})
		default:
			err = fmt.Errorf("unknown kind %q", kind)
		}
		cancelStep()
		if err != nil {
			fmt.Printf("error %s: %v\n", kind, err)
			return err
		}
		fmt.Printf("ok %.1f s\n", time.Since(t0).Seconds())
	}
	return in.Err()
}

func (r *connReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice connection and partition scale, %s\n\n", r.Date)
	fmt.Fprintf(&b, "`sluice-bench connections` (`make bench-connections`), %.1f min. Commit %s; %s, %d cores, %s GiB; Linux %s; %s.\n\n",
		r.Minutes, r.Facts.Commit, r.Facts.CPU, r.Facts.Cores, r.Facts.MemoryGiB, r.Facts.Kernel, r.Facts.Go)
	fmt.Fprintf(&b, "Plan: %v. Server: `%s`.\n\n", r.Plan, r.Servers["sluiced-conn"])
	b.WriteString("## Idle connections, one `sluiced --roles=all`\n\n")
	b.WriteString("| step | RSS MiB | Go heap MiB | goroutines | fds | server CPU, quiet 5 s | per added client: RSS KiB, heap KiB, goroutines, fds | client process RSS MiB |\n|---|---|---|---|---|---|---|---|\n")
	for i, s := range r.Steps {
		per := ""
		if i > 0 && strings.HasPrefix(s.Label, "+") {
			var n int
			fmt.Sscanf(s.Label, "+%d", &n)
			p := r.Steps[i-1]
			if n > 0 {
				per = fmt.Sprintf("%.1f, %.1f, %.2f, %.2f", (s.RSSMiB-p.RSSMiB)*1024/float64(n), (s.HeapMiB-p.HeapMiB)*1024/float64(n),
					float64(s.Goroutines-p.Goroutines)/float64(n), float64(s.FDs-p.FDs)/float64(n))
			}
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %d | %d | %.1f %% | %s | %.0f |\n", s.Label, s.RSSMiB, s.HeapMiB, s.Goroutines, s.FDs, s.CPUPct, per, s.CrowdRSS)
	}
	b.WriteString("\nEach step adds clients of one kind, each with a connection of its own, opened 32 at a time from one separate process: " +
		"`producers`, an SDK client whose producer (acks=all, idempotent) produced one 1 KiB record and keeps its produce stream open; " +
		"`consumers`, an SDK consumer of one partition of the quiet topic from its end, its fetch stream (follow, max wait 500 ms) held by the server; " +
		"`kafka`, a franz-go client that produced one record; `kafka-consumers`, a franz-go consumer of the quiet topic from its end, " +
		"long-polling Fetch (max wait 5 s); `groups`, a consumer group of one SDK member (consumer protocol, auto-commit) " +
		"owning the quiet topic and polling in a loop of 1 s polls. Readings 3 s after a step; CPU over 5 quiet seconds. " +
		"SDK connections send a gRPC keepalive ping every 10 s.\n")
	fmt.Fprintf(&b, "\nOpening times: %v. The crowd process itself used %.1f %% of a core while idle.\n\n", r.OpenTimes, r.CrowdCPU)
	b.WriteString("## Active client (1 KiB records, acks=all, linger 1 ms, RF 1, no fsync before ack)\n\n| window | records | ack p50 ms | ack p99 ms | end-to-end p50 ms | end-to-end p99 ms | server CPU |\n|---|---|---|---|---|---|---|\n")
	for _, f := range r.Active {
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f %% |\n", f.Label, f.Records, f.AckP50, f.AckP99, f.E2EP50, f.E2EP99, f.ServerCPU)
	}
	if len(r.Partitions) > 0 {
		b.WriteString("\n## Partition replicas (RF 1) on one fresh `sluiced --roles=all`, topics of 100 partitions, no data\n\n")
		b.WriteString("| step | RSS MiB | Go heap MiB | goroutines | fds | memory maps | files in data dir | server CPU, quiet 5 s | per replica over 0: RSS KiB, heap KiB, goroutines, fds, maps, files |\n|---|---|---|---|---|---|---|---|---|\n")
		for i, s := range r.Partitions {
			per := ""
			var n int
			if _, err := fmt.Sscanf(s.Label, "%d partitions", &n); err == nil && n > 0 && i > 0 {
				p, f := r.Partitions[0], float64(n)
				per = fmt.Sprintf("%.1f, %.1f, %.2f, %.2f, %.2f, %.2f", (s.RSSMiB-p.RSSMiB)*1024/f, (s.HeapMiB-p.HeapMiB)*1024/f,
					float64(s.Goroutines-p.Goroutines)/f, float64(s.FDs-p.FDs)/f, float64(s.Maps-p.Maps)/f, float64(s.Files-p.Files)/f)
			}
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %d | %d | %d | %d | %.1f %% | %s |\n", s.Label, s.RSSMiB, s.HeapMiB, s.Goroutines, s.FDs, s.Maps, s.Files, s.CPUPct, per)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}
