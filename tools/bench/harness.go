package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/client"
)

// harness runs the measurements and keeps their samples.
type harness struct {
	cfg     config
	tmp     string
	self    string
	procs   *processes
	idle    idleGate
	facts   facts
	samples []sample
	// servers are the server command lines, for the report.
	servers map[string]string
	// cacheNotDropped says why the page cache could not be dropped.
	cacheNotDropped string
	// sustained are the sustained block's runs, of sustainedGiB each;
	// sustainedNote says why it ran fewer GiB than asked, or none.
	sustained     []sustainedRun
	sustainedGiB  int
	sustainedNote string
}

// sample is one figure measured in one round.
type sample struct {
	Figure     string  `json:"figure"`
	Round      int     `json:"round"`
	Values     figures `json:"values,omitempty"`
	Command    string  `json:"command"`
	SyncS      float64 `json:"sync_before_s"`
	BusyBefore float64 `json:"cpu_busy_before_pct"`
	IdleWaitS  float64 `json:"idle_wait_s"`
	Error      string  `json:"error,omitempty"`
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// display renders a command line as the report shows it: binaries under
// bin/, the temporary directory as $TMP.
func (h *harness) display(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		a = strings.ReplaceAll(a, h.self, "bin/sluice-bench")
		a = strings.ReplaceAll(a, h.cfg.binDir+"/", "bin/")
		a = strings.ReplaceAll(a, h.tmp, "$TMP")
		if strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// measurement describes one command to time.
type measurement struct {
	figure string
	argv   []string
	// sluicePerf says the output is `sluice perf -o json`'s summary;
	// otherwise it is a flat JSON object of figures.
	sluicePerf bool
	// server's processes are the brokers whose CPU time is charged to the
	// bytes the command moves (cpu), and whose death explains a failure.
	server *server
	cpu    bool
	bytes  int64
}

// measure waits for an idle CPU, runs the command, and records its figures
// (and the servers' CPU seconds per GB moved).
func (h *harness) measure(ctx context.Context, round int, m measurement) {
	s := sample{Figure: m.figure, Round: round, Command: h.display(m.argv)}
	// Write back what earlier measurements left dirty in the page cache
	// first: the kernel would otherwise flush it (30 s after it was
	// written) in the middle of this one, stalling its writes and fsyncs.
	syncStart := time.Now()
	syscall.Sync()
	s.SyncS = round1(time.Since(syncStart).Seconds())
	busy, waited := h.idle.wait(ctx)
	s.BusyBefore, s.IdleWaitS = round1(busy), round1(waited.Seconds())
	var pids []int
	if m.server != nil && m.cpu {
		pids = m.server.pids()
	}
	cpu0 := cpuSeconds(pids...)
	res, err := runCommand(ctx, filepath.Join(h.tmp, fmt.Sprintf("%s-r%d.log", m.figure, round)), 5*time.Minute, m.argv)
	cpu := cpuSeconds(pids...) - cpu0
	if err == nil {
		s.Values, err = parseFigures(res.stdout, m.sluicePerf)
	}
	if err != nil {
		s.Error = err.Error()
		if m.server != nil {
			if d := m.server.died(); d != "" {
				s.Error = d + "\n---\n" + s.Error
			}
		}
		h.logf("round %d %-24s FAILED: %v", round, m.figure, err)
		h.samples = append(h.samples, s)
		return
	}
	s.Values["client_cpu_s"] = res.cpuUser + res.cpuSys
	if len(pids) > 0 && m.bytes > 0 && cpu > 0 {
		s.Values["server_cpu_s"] = cpu
		s.Values["server_cpu_s_per_gb"] = cpu / (float64(m.bytes) / 1e9)
		s.Values["mb_per_server_cpu_s"] = float64(m.bytes) / 1e6 / cpu
	}
	h.samples = append(h.samples, s)
	h.logf("round %d %-24s %s (busy before %.0f%%)", round, m.figure, brief(s.Values), busy)
}

// fail records a figure that could not be measured this round.
func (h *harness) fail(round int, figure string, err error) {
	h.samples = append(h.samples, sample{Figure: figure, Round: round, Error: err.Error()})
	h.logf("round %d %-24s FAILED: %v", round, figure, err)
}

func brief(f figures) string {
	var parts []string
	for _, k := range []string{"records_per_s", "mb_per_s", "lat_p50_ms", "lat_p99_ms", "lat_p999_ms", "sync_p99_ms", "server_cpu_s_per_gb"} {
		if v, ok := f[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%.4g", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// perfOutput is the part of `sluice perf -o json` the harness reads.
type perfOutput struct {
	Records       int64   `json:"records"`
	Bytes         int64   `json:"bytes"`
	Errors        int64   `json:"errors"`
	RecordsPerSec float64 `json:"records_per_s"`
	MBPerSec      float64 `json:"mb_per_s"`
	Latency       *struct {
		P50, P95, P99, Max float64
		P999               float64 `json:"p99_9"`
	} `json:"latency_ms"`
	AckLatency *struct {
		P50, P99 float64
		P999     float64 `json:"p99_9"`
	} `json:"ack_latency_ms"`
	Transactions *struct {
		CommitsPerSec float64 `json:"commits_per_s"`
		Commit        struct {
			P50, P99 float64
		} `json:"commit_latency_ms"`
		EndTxn struct {
			P50, P99 float64
		} `json:"end_txn_latency_ms"`
	} `json:"transactions"`
}

func parseFigures(out []byte, sluicePerf bool) (figures, error) {
	if !sluicePerf {
		var f figures
		if err := json.Unmarshal(out, &f); err != nil {
			return nil, fmt.Errorf("reading figures %q: %w", out, err)
		}
		return f, nil
	}
	var p perfOutput
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("reading perf output %q: %w", out, err)
	}
	f := figures{"records_per_s": p.RecordsPerSec, "mb_per_s": p.MBPerSec, "errors": float64(p.Errors)}
	if l := p.Latency; l != nil {
		f["lat_p50_ms"], f["lat_p95_ms"], f["lat_p99_ms"], f["lat_p999_ms"], f["lat_max_ms"] = l.P50, l.P95, l.P99, l.P999, l.Max
	}
	if a := p.AckLatency; a != nil {
		f["ack_p50_ms"], f["ack_p99_ms"], f["ack_p999_ms"] = a.P50, a.P99, a.P999
	}
	if t := p.Transactions; t != nil {
		f["commits_per_s"], f["commit_p50_ms"], f["commit_p99_ms"] = t.CommitsPerSec, t.Commit.P50, t.Commit.P99
		f["end_txn_p50_ms"], f["end_txn_p99_ms"] = t.EndTxn.P50, t.EndTxn.P99
	}
	return f, nil
}

// dropCaches writes back dirty pages and drops the clean ones from the page
// cache (root only; without it the run goes on and the report says so).
func (h *harness) dropCaches() {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		h.cacheNotDropped = err.Error()
	}
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

// ---- limits ----

func (h *harness) limitsBlock(ctx context.Context, round int) {
	h.measure(ctx, round, measurement{figure: "limit.grpc_1stream",
		argv: []string{h.self, "limit-grpc", "--size", "1048576", "--dur", "3s"}})
	h.measure(ctx, round, measurement{figure: "limit.fdatasync_1mib",
		argv: []string{h.self, "limit-fsync", "--dir", h.tmp, "--chunk", "1048576", "--dur", "4s"}})
	h.measure(ctx, round, measurement{figure: "limit.pagecache_read",
		argv: []string{h.self, "limit-read", "--dir", h.tmp, "--size", strconv.Itoa(512 << 20), "--passes", "4"}})
}

// ---- Sluice, one process ----

var sluiceSingleFigures = []string{"sluice.produce_1k", "sluice.consume_1k", "sluice.produce_100b", "sluice.produce_1k_fsync", "sluice.ack_1k_fsync", "sluice.e2e_1k"}

func (h *harness) sluiceBlock(ctx context.Context, round int) {
	srv, addr, err := h.startSluiced(ctx, fmt.Sprintf("sluiced-r%d", round))
	if err != nil {
		h.failAll(round, sluiceSingleFigures, err)
		return
	}
	defer h.stopSluiced(srv)
	c := h.cfg
	sl := func(args ...string) []string { return h.perfArgv(addr, args...) }
	parts := strconv.Itoa(c.partitions)
	batch := strconv.Itoa(c.batchSize)
	n1k, n100 := strconv.FormatInt(c.records1K, 10), strconv.FormatInt(c.records100, 10)
	h.measure(ctx, round, measurement{figure: "sluice.produce_1k", sluicePerf: true, server: srv, cpu: true, bytes: c.records1K * 1024,
		argv: sl("produce", "--topic", "p1k", "--partitions", parts, "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=false",
			"--num-records", n1k, "--record-size", "1024", "--acks", "1", "--batch-size", batch)})
	h.measure(ctx, round, measurement{figure: "sluice.consume_1k", sluicePerf: true, server: srv, cpu: true, bytes: c.records1K * 1024,
		argv: sl("consume", "--topic", "p1k", "--messages", n1k)})
	h.measure(ctx, round, measurement{figure: "sluice.produce_100b", sluicePerf: true, server: srv, cpu: true, bytes: c.records100 * 100,
		argv: sl("produce", "--topic", "p100", "--partitions", parts, "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=false",
			"--num-records", n100, "--record-size", "100", "--acks", "1", "--batch-size", batch)})
	// With fsync before ack, only acks=all waits for the fsync (acks=1
	// answers after the page-cache write); on one replica acks=all waits
	// for the leader's own group commit.
	h.measure(ctx, round, measurement{figure: "sluice.produce_1k_fsync", sluicePerf: true, server: srv, cpu: true, bytes: c.records1K * 1024,
		argv: sl("produce", "--topic", "psync", "--partitions", parts, "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=true",
			"--num-records", n1k, "--record-size", "1024", "--acks", "all", "--batch-size", batch)})
	h.measure(ctx, round, measurement{figure: "sluice.ack_1k_fsync", sluicePerf: true, server: srv,
		argv: sl("e2e", "--topic", "esync", "--partitions", "1", "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=true",
			"--num-records", strconv.FormatInt(c.e2eRecords/2, 10), "--rate", ftoa(c.e2eRate), "--record-size", "1024", "--acks", "all", "--linger", "1ms")})
	h.measure(ctx, round, measurement{figure: "sluice.e2e_1k", sluicePerf: true, server: srv,
		argv: sl("e2e", "--topic", "e2e", "--partitions", "1", "--replication-factor", "1", "--topic-config", "sluice.fsync.before.ack=false",
			"--num-records", strconv.FormatInt(c.e2eRecords, 10), "--rate", ftoa(c.e2eRate), "--record-size", "1024", "--acks", "1")})
}

// startSluiced starts one `sluiced --roles=all` with its data in
// $TMP/<name> and waits until its storage node is alive; stopSluiced stops
// it and removes the data.
func (h *harness) startSluiced(ctx context.Context, name string) (*server, string, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(h.tmp, name)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	argv := []string{filepath.Join(h.cfg.binDir, "sluiced"), "--roles=all", "--node-id=1", "--data-dir=" + dir,
		"--listen=" + addr, fmt.Sprintf("--http-listen=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--controller.etcd.client-listen=127.0.0.1:%d", ports[2]),
		fmt.Sprintf("--controller.etcd.peer-listen=127.0.0.1:%d", ports[3]), "--log.level=warn"}
	srv, err := h.procs.start("sluiced", filepath.Join(h.tmp, name+".log"), argv)
	if err != nil {
		return nil, "", err
	}
	srv.dataDir = dir
	h.servers["sluiced"] = h.display(argv)
	if err := waitCluster(ctx, addr, 1, 60*time.Second); err != nil {
		h.stopSluiced(srv)
		return nil, "", err
	}
	return srv, addr, nil
}

func (h *harness) stopSluiced(srv *server) {
	h.procs.stop(srv, 15*time.Second)
	_ = os.RemoveAll(srv.dataDir) // frees the disk for the next block; the whole tree goes at the end anyway
}

// perfArgv is `sluice perf` against addr with JSON output, then args.
func (h *harness) perfArgv(addr string, args ...string) []string {
	return append([]string{filepath.Join(h.cfg.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf"}, args...)
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (h *harness) failAll(round int, figs []string, err error) {
	for _, f := range figs {
		h.fail(round, f, err)
	}
}

// waitCluster waits until the cluster at addr has storage nodes alive.
func waitCluster(ctx context.Context, addr string, storageNodes int, timeout time.Duration) error {
	return waitClusterTLS(ctx, addr, nil, storageNodes, timeout)
}

// waitClusterTLS is waitCluster over TLS with tlsConf (nil: plaintext).
func waitClusterTLS(ctx context.Context, addr string, tlsConf *tls.Config, storageNodes int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.New(client.Config{Bootstrap: []string{addr}, TLS: tlsConf, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	var last error
	for {
		d, err := c.DescribeCluster(ctx)
		if err == nil {
			alive := 0
			for _, b := range d.GetBrokers() {
				if b.GetState() == commonv1.BrokerState_BROKER_STATE_ALIVE && slices.ContainsFunc(b.GetRoles(), func(r string) bool { return strings.Contains(r, "storage") }) {
					alive++
				}
			}
			if alive >= storageNodes {
				return nil
			}
			err = fmt.Errorf("%d of %d storage nodes alive", alive, storageNodes)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster at %s not ready within %v: %v", addr, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ---- NATS JetStream ----

var natsFigures = []string{"nats.pub_1k", "nats.consume_1k", "nats.pub_100b", "nats.e2e_1k"}

// startNATS starts nats-server with a file store; syncAlways makes it
// fsync every message before its ack.
func (h *harness) startNATS(round int, syncAlways bool) (*server, string, string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, "", "", err
	}
	tag := fmt.Sprintf("r%d", round)
	sync := ""
	if syncAlways {
		tag += "-fsync"
		sync = ", sync_interval: always"
	}
	store := filepath.Join(h.tmp, "nats-"+tag)
	conf := filepath.Join(h.tmp, "nats-"+tag+".conf")
	text := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q, max_file_store: 64GB, max_memory_store: 1GB%s }\n", ports[0], store, sync)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, "", "", err
	}
	argv := []string{filepath.Join(h.cfg.binDir, "nats-server"), "-c", conf}
	srv, err := h.procs.start("nats-server", filepath.Join(h.tmp, "nats-"+tag+".log"), argv)
	if err != nil {
		return nil, "", "", err
	}
	key := "nats-server"
	if syncAlways {
		key += " (fsync)"
	}
	h.servers[key] = h.display(argv) + "\n# with " + filepath.Base(conf) + ": " + strings.ReplaceAll(strings.TrimSpace(strings.ReplaceAll(text, h.tmp, "$TMP")), "\n", " ")
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if err := waitPort(context.Background(), addr, 30*time.Second); err != nil {
		h.procs.stop(srv, 10*time.Second)
		return nil, "", "", err
	}
	return srv, "nats://" + addr, store, nil
}

func (h *harness) natsBlock(ctx context.Context, round int) {
	c := h.cfg
	srv, url, store, err := h.startNATS(round, false)
	if err != nil {
		h.failAll(round, natsFigures, err)
	} else {
		n1k, n100 := strconv.FormatInt(c.records1K, 10), strconv.FormatInt(c.records100, 10)
		h.measure(ctx, round, measurement{figure: "nats.pub_1k", server: srv, cpu: true, bytes: c.records1K * 1024,
			argv: []string{h.self, "nats-pub", "--url", url, "--stream", "P1K", "--count", n1k, "--size", "1024"}})
		h.measure(ctx, round, measurement{figure: "nats.consume_1k", server: srv, cpu: true, bytes: c.records1K * 1024,
			argv: []string{h.self, "nats-consume", "--url", url, "--stream", "P1K", "--count", n1k}})
		h.measure(ctx, round, measurement{figure: "nats.pub_100b", server: srv, cpu: true, bytes: c.records100 * 100,
			argv: []string{h.self, "nats-pub", "--url", url, "--stream", "P100", "--count", n100, "--size", "100"}})
		h.measure(ctx, round, measurement{figure: "nats.e2e_1k", server: srv,
			argv: []string{h.self, "nats-e2e", "--url", url, "--stream", "E2E", "--count", strconv.FormatInt(c.e2eRecords, 10),
				"--rate", ftoa(c.e2eRate), "--size", "1024"}})
		h.procs.stop(srv, 15*time.Second)
		_ = os.RemoveAll(store) // frees the disk; the whole tree goes at the end anyway
	}
	srv, url, store, err = h.startNATS(round, true)
	if err != nil {
		h.fail(round, "nats.pub_1k_fsync", err)
		return
	}
	h.measure(ctx, round, measurement{figure: "nats.pub_1k_fsync", server: srv, cpu: true, bytes: c.recordsFsyncPeer * 1024,
		argv: []string{h.self, "nats-pub", "--url", url, "--stream", "PSYNC", "--count", strconv.FormatInt(c.recordsFsyncPeer, 10), "--size", "1024"}})
	h.procs.stop(srv, 15*time.Second)
	_ = os.RemoveAll(store) // frees the disk; the whole tree goes at the end anyway
}

// ---- Sluice, three storage nodes ----

func (h *harness) rf3Block(ctx context.Context, round int) {
	const fig = "sluice.rf3_produce_1k"
	var offsets []int
	for k := range 4 {
		for i := range 4 {
			offsets = append(offsets, 10*k+i)
		}
	}
	base, err := freeBlock(offsets)
	if err != nil {
		h.fail(round, fig, err)
		return
	}
	dir := filepath.Join(h.tmp, fmt.Sprintf("dev-r%d", round))
	argv := []string{filepath.Join(h.cfg.binDir, "sluice"), "dev", "--controllers", "1", "--storage-nodes", "3",
		"--base-port", strconv.Itoa(base), "--data-dir", dir, "--sluiced-arg=--log.level=warn"}
	srv, err := h.procs.start("sluice dev", filepath.Join(h.tmp, fmt.Sprintf("dev-r%d.log", round)), argv)
	if err != nil {
		h.fail(round, fig, err)
		return
	}
	h.servers["sluice dev"] = h.display(argv)
	defer func() {
		h.procs.stop(srv, 20*time.Second)
		_ = os.RemoveAll(dir) // frees the disk; the whole tree goes at the end anyway
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", base)
	// sluice dev starts its processes one after another; adopt them as they
	// appear so that none can outlive the harness.
	ready := make(chan error, 1)
	go func() { ready <- waitCluster(ctx, addr, 3, 120*time.Second) }()
	var werr error
	for done := false; !done; {
		select {
		case werr = <-ready:
			done = true
		case <-time.After(250 * time.Millisecond):
		}
		h.procs.adoptChildren(srv)
	}
	if werr != nil {
		h.fail(round, fig, werr)
		return
	}
	h.procs.adoptChildren(srv)
	c := h.cfg
	h.measure(ctx, round, measurement{figure: fig, sluicePerf: true, server: srv, cpu: true, bytes: c.recordsRF3 * 1024,
		argv: []string{filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "produce",
			"--topic", "p1k-rf3", "--partitions", strconv.Itoa(c.partitions), "--replication-factor", "3",
			"--topic-config", "min.insync.replicas=2", "--topic-config", "sluice.fsync.before.ack=false",
			"--num-records", strconv.FormatInt(c.recordsRF3, 10), "--record-size", "1024", "--acks", "all",
			"--batch-size", strconv.Itoa(c.batchSize)}})
}

// openHarness starts a side benchmark (txn, kafka): it checks binDir holds
// sluiced and sluice, makes it absolute, and returns a harness with its own
// temporary directory (named prefix*) and the machine's facts, and a
// function that stops the harness's processes and removes the directory.
func openHarness(binDir, tmpParent, prefix string, idle idleGate) (*harness, func(), error) {
	for _, name := range []string{"sluiced", "sluice"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, nil, fmt.Errorf("%s not found in %s: run `make build` first", name, binDir)
		}
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp(tmpParent, prefix)
	if err != nil {
		return nil, nil, err
	}
	h := &harness{cfg: config{binDir: abs}, tmp: tmp, procs: &processes{marker: tmp}, idle: idle, servers: map[string]string{}}
	cleanup := func() {
		h.procs.stopAll()
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(os.Stderr, "removing %s: %v\n", tmp, err)
		}
	}
	if h.self, err = os.Executable(); err != nil {
		cleanup()
		return nil, nil, err
	}
	h.facts = machineFacts(h.cfg, tmp)
	return h, cleanup, nil
}

// writeReport writes a side benchmark's report as <dir>/<date>Z-<suffix>.json
// (v, indented) and .md (markdown), and returns both paths.
func writeReport(dir, date, suffix string, v any, markdown string) (string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	stamp := strings.NewReplacer(" ", "-", ":", "").Replace(strings.TrimSuffix(date, " UTC")) + "Z-" + suffix
	md, js := filepath.Join(dir, stamp+".md"), filepath.Join(dir, stamp+".json")
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(md, []byte(markdown), 0o644); err != nil {
		return "", "", err
	}
	return md, js, nil
}
