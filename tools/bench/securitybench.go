package main

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// The security benchmark (`sluice-bench security`, `make bench-security`):
// what TLS and ACL checks cost. Two `sluiced --roles=all` run side by side,
// one in plaintext and one with TLS on every listener, client certificates
// required and every call checked against ACLs; the client is User:bench,
// which holds only the ACLs it needs (Write and Read on the benchmark's
// topics), not a super user, so every produce and fetch goes through the
// authorizer. 1 KiB records are produced then consumed through the SDK over
// gRPC and through franz-go over the Kafka listener, the two sides
// interleaved in every round. The goal: the secured side at 85 % or more of
// the plaintext throughput. The negotiated suite's record cipher is
// measured in every round too (limit-aead), so the report can say how much
// of the plaintext rate the cipher alone leaves.

// securityWays are the measurements made on each side every round, in
// order (produce before the consume that reads it).
var securityWays = []kafkaVariant{
	{"grpc_produce", "produce, SDK over gRPC"},
	{"kafka_produce", "produce, franz-go over Kafka"},
	{"grpc_consume", "consume, SDK over gRPC"},
	{"kafka_consume", "consume, franz-go over Kafka"},
}

// securitySides are the two servers: plaintext and TLS with ACLs.
var securitySides = []string{"plain", "tls"}

// securityTopicPrefix is the prefix of the benchmark's topics, the
// resource of User:bench's prefixed ACLs.
const securityTopicPrefix = "bench-"

type securityConfig struct {
	binDir, outDir, tmpParent string
	rounds                    int
	records                   int64
	batchSize                 int
	otherACLs                 int
	idleThreshold             float64
	idleMax, idleBudget       time.Duration
}

// securityCerts are the files of the TLS side: its CA, the node's
// certificate, the super user's and the benchmark client's.
type securityCerts struct {
	ca, nodeCert, nodeKey, adminCert, adminKey, benchCert, benchKey string
}

func securityMain(args []string) error {
	fs := flag.NewFlagSet("security", flag.ExitOnError)
	var c securityConfig
	fs.StringVar(&c.binDir, "bin", "bin", "directory with sluiced and sluice")
	fs.StringVar(&c.outDir, "out", "bench/results", "directory for <date>-security.md and <date>-security.json")
	fs.StringVar(&c.tmpParent, "tmp", "", "parent of the temporary data directory (default $TMPDIR)")
	fs.IntVar(&c.rounds, "rounds", 5, "interleaved rounds; figures are medians over rounds")
	fs.Int64Var(&c.records, "records", 1_000_000, "1 KiB records per measurement")
	fs.IntVar(&c.batchSize, "batch-size", 256<<10, "producer batch size, both clients")
	fs.IntVar(&c.otherACLs, "other-acls", 100, "ACLs of other principals on other topics, so the authorizer looks through a realistic set")
	fs.Float64Var(&c.idleThreshold, "idle-threshold", 15, "CPU busy percent below which the machine counts as idle")
	fs.DurationVar(&c.idleMax, "idle-max", 10*time.Second, "longest wait for an idle CPU before one measurement")
	fs.DurationVar(&c.idleBudget, "idle-budget", time.Minute, "longest total wait for an idle CPU over the run")
	_ = fs.Parse(args) // ExitOnError
	if c.rounds < 1 || c.records < 1 || c.otherACLs < 0 {
		return fmt.Errorf("--rounds and --records must be at least 1, --other-acls not negative")
	}
	// The CLI reads data/dev/client.conf when it exists (a `sluice dev`
	// running in this directory): the measured commands must use exactly
	// the flags they are given.
	if err := os.Setenv("SLUICE_CONFIG", ""); err != nil {
		return err
	}
	h, cleanup, err := openHarness(c.binDir, c.tmpParent, "sluice-bench-security-", idleGate{threshold: c.idleThreshold, maxWait: c.idleMax, budget: c.idleBudget})
	if err != nil {
		return err
	}
	defer cleanup()
	c.binDir = h.cfg.binDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	loadStart := loadAvg()
	h.logf("sluice-bench security: %d rounds of %d records, data in %s (%s), load average %s", c.rounds, c.records, h.tmp, h.facts.Disk, loadStart)

	certs, err := writeSecurityCerts(filepath.Join(h.tmp, "tls"))
	if err != nil {
		return err
	}
	adminTLS, err := wire.ClientTLS(certs.ca, certs.adminCert, certs.adminKey)
	if err != nil {
		return err
	}
	benchTLS, err := wire.ClientTLS(certs.ca, certs.benchCert, certs.benchKey)
	if err != nil {
		return err
	}
	type side struct {
		srv             *server
		addr, kafkaAddr string
		admin           *client.Client
		// clientArgs are the TLS flags of the measured commands.
		clientArgs []string
	}
	sides := map[string]*side{}
	for _, name := range securitySides {
		s := &side{}
		var conf *tls.Config
		var extra []string
		if name == "tls" {
			conf = adminTLS
			extra = []string{"--tls.cert=" + certs.nodeCert, "--tls.key=" + certs.nodeKey, "--tls.ca=" + certs.ca,
				"--tls.client-auth=require", "--tls.principal-mapping-rules=" + devcluster.DevMappingRules,
				"--authz.enabled", "--authz.super-users=User:admin"}
			s.clientArgs = []string{"--tls-ca", certs.ca, "--tls-cert", certs.benchCert, "--tls-key", certs.benchKey}
		}
		if s.srv, s.addr, s.kafkaAddr, err = h.startSluicedKafka("sluiced-"+name, conf, extra...); err != nil {
			return fmt.Errorf("starting the %s server: %w", name, err)
		}
		if s.admin, err = client.New(client.Config{Bootstrap: []string{s.addr}, TLS: conf, RequestTimeout: 30 * time.Second}); err != nil {
			return err
		}
		defer s.admin.Close()
		sides[name] = s
	}
	if err := grantBench(ctx, sides["tls"].admin, sides["tls"].addr, benchTLS, c.otherACLs); err != nil {
		return err
	}
	// The record cipher the clients get is the one whose cost is measured
	// beside them (limit-aead): the floor of the TLS side.
	suite, err := negotiatedSuite(sides["tls"].kafkaAddr, benchTLS)
	if err != nil {
		return err
	}
	h.logf("the TLS side negotiates %s", suite)

	n := strconv.FormatInt(c.records, 10)
	batch := strconv.Itoa(c.batchSize)
	bytes := c.records * 1024
	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		grpcTopic, kafkaTopic := fmt.Sprintf("%sgrpc-r%d", securityTopicPrefix, r), fmt.Sprintf("%skafka-r%d", securityTopicPrefix, r)
		argv := map[string][]string{}
		for _, name := range securitySides {
			s := sides[name]
			// Alike on both sides: one partition, RF 1, no fsync before the
			// ack (the page cache), acks=all and idempotence in both clients.
			for _, topic := range []string{grpcTopic, kafkaTopic} {
				if _, err := s.admin.CreateTopic(ctx, topic, 1, 1, map[string]string{"sluice.fsync.before.ack": "false"}); err != nil {
					return fmt.Errorf("creating %s on the %s server: %w", topic, name, err)
				}
			}
			sl := append(append([]string{filepath.Join(c.binDir, "sluice"), "--bootstrap", s.addr}, s.clientArgs...), "-o", "json", "perf")
			kb := func(sub string) []string {
				return append([]string{h.self, sub, "--brokers", s.kafkaAddr}, s.clientArgs...)
			}
			argv[name+".grpc_produce"] = append(slices.Clone(sl), "produce", "--topic", grpcTopic, "--num-records", n, "--record-size", "1024",
				"--acks", "all", "--batch-size", batch)
			argv[name+".kafka_produce"] = append(kb("kafka-produce"), "--topic", kafkaTopic, "--count", n, "--size", "1024", "--batch-size", batch)
			argv[name+".grpc_consume"] = append(slices.Clone(sl), "consume", "--topic", grpcTopic, "--messages", n)
			argv[name+".kafka_consume"] = append(kb("kafka-consume"), "--topic", kafkaTopic, "--count", n)
		}
		h.measure(ctx, r, measurement{figure: securityAEADFigure, argv: []string{h.self, "limit-aead", "--suite", suite}})
		for _, way := range securityWays {
			order := securitySides
			if r%2 == 0 {
				order = []string{securitySides[1], securitySides[0]}
			}
			for _, name := range order {
				if ctx.Err() != nil {
					break
				}
				id := name + "." + way.id
				h.measure(ctx, r, measurement{figure: "security." + id, sluicePerf: strings.HasPrefix(way.id, "grpc"),
					server: sides[name].srv, cpu: true, bytes: bytes, argv: argv[id]})
			}
		}
		for _, name := range securitySides {
			for _, topic := range []string{grpcTopic, kafkaTopic} {
				h.deleteTopic(ctx, sides[name].admin, topic)
			}
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; no report written")
	}
	for _, name := range securitySides {
		if d := sides[name].srv.died(); d != "" {
			h.logf("%s", d)
		}
	}
	rep := buildSecurityReport(h, c, time.Since(start), loadStart, loadAvg())
	rep.Plan["cipher_suite"] = suite
	md, js, err := rep.write(c.outDir)
	if err != nil {
		return err
	}
	h.logf("report: %s and %s (%.1f min)", md, js, time.Since(start).Minutes())
	fmt.Print(rep.summaryText())
	return nil
}

// negotiatedSuite is the cipher suite a client with conf gets from the
// listener at addr.
func negotiatedSuite(addr string, conf *tls.Config) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return "", fmt.Errorf("a TLS handshake with %s: %w", addr, err)
	}
	defer conn.Close()
	return tls.CipherSuiteName(conn.ConnectionState().CipherSuite), nil
}

// writeSecurityCerts writes a throw-away CA, a node certificate with every
// role for 127.0.0.1, and client certificates for User:admin (the super
// user) and User:bench (the measured client) into dir.
func writeSecurityCerts(dir string) (securityCerts, error) {
	var c securityCerts
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, err
	}
	ca, err := tlsx.NewCA("Sluice bench CA", 24*time.Hour)
	if err != nil {
		return c, err
	}
	pair, err := ca.Pair()
	if err != nil {
		return c, err
	}
	if c.ca, _, err = pair.WriteFiles(dir, "ca"); err != nil {
		return c, err
	}
	issue := func(name string, roles []string, hosts ...string) (string, string, error) {
		p, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: name}, Roles: roles, Hosts: hosts, Validity: 24 * time.Hour})
		if err != nil {
			return "", "", fmt.Errorf("issuing %s's certificate: %w", name, err)
		}
		return p.WriteFiles(dir, name)
	}
	var roles []string
	for _, r := range role.All {
		roles = append(roles, string(r))
	}
	if c.nodeCert, c.nodeKey, err = issue("sluiced-1", roles, "127.0.0.1", "localhost"); err != nil {
		return c, err
	}
	if c.adminCert, c.adminKey, err = issue("admin", nil); err != nil {
		return c, err
	}
	if c.benchCert, c.benchKey, err = issue("bench", nil); err != nil {
		return c, err
	}
	return c, nil
}

// grantBench gives User:bench Write and Read on the benchmark's topics
// (prefixed ACLs; Describe is implied) and other principals others ACLs
// on other topics, then waits until the bench client sees a probe topic in
// metadata: the ACLs are in force.
func grantBench(ctx context.Context, admin *client.Client, addr string, benchTLS *tls.Config, others int) error {
	allow := func(principal string, rt controllerv1.ResourceType, name string, pt controllerv1.PatternType, op controllerv1.AclOperation) *controllerv1.AclBinding {
		return &controllerv1.AclBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: "*",
			Operation: op, Permission: controllerv1.AclPermission_ACL_PERMISSION_ALLOW}
	}
	topic, prefixed := controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, controllerv1.PatternType_PATTERN_TYPE_PREFIXED
	bindings := []*controllerv1.AclBinding{
		allow("User:bench", topic, securityTopicPrefix, prefixed, controllerv1.AclOperation_ACL_OPERATION_WRITE),
		allow("User:bench", topic, securityTopicPrefix, prefixed, controllerv1.AclOperation_ACL_OPERATION_READ),
	}
	for i := range others {
		bindings = append(bindings, allow(fmt.Sprintf("User:app-%d", i), topic, fmt.Sprintf("app-%d", i),
			controllerv1.PatternType_PATTERN_TYPE_LITERAL, controllerv1.AclOperation_ACL_OPERATION_WRITE))
	}
	if _, err := admin.CreateAcls(ctx, bindings...); err != nil {
		return fmt.Errorf("creating ACLs: %w", err)
	}
	probe := securityTopicPrefix + "probe"
	if _, err := admin.CreateTopic(ctx, probe, 1, 1, nil); err != nil {
		return fmt.Errorf("creating %s: %w", probe, err)
	}
	bench, err := client.New(client.Config{Bootstrap: []string{addr}, TLS: benchTLS, RequestTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer bench.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := bench.Metadata(ctx)
		if err == nil {
			for _, t := range resp.GetTopics() {
				if t.GetName() == probe {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("User:bench does not see %s after 30 s: the ACLs are not in force (last error: %v)", probe, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---- report ----

// securityAEADFigure is the record cipher's speed on one core, measured
// each round beside the clients (limit-aead).
const securityAEADFigure = "security.limit.aead"

// securityCeiling is the most of the plaintext rate TLS can keep when the
// CPU is the bound and the record cipher is the only cost TLS adds: every
// byte is sealed by its sender and opened by its receiver.
type securityCeiling struct {
	// CipherSPerGB is seal plus open, CPU seconds per GB, of which
	// ServerCipherSPerGB is the server's half (open for a produce, seal for
	// a consume).
	CipherSPerGB       float64 `json:"cipher_cpu_s_per_gb"`
	ServerCipherSPerGB float64 `json:"server_cipher_cpu_s_per_gb"`
	// PlainCoresBusy is the plaintext side's CPU over its run: near the
	// machine's cores, the run is CPU-bound and SharedCores applies.
	PlainCoresBusy float64 `json:"plaintext_cores_busy"`
	// SharedCores is P/(P+F): client and server on the same cores (P the
	// plaintext side's total CPU per GB, F the cipher's).
	SharedCores float64 `json:"shared_cores"`
	// ServerAlone is S/(S+Fs): a server on cores of its own, its clients
	// elsewhere (S its plaintext CPU per GB, Fs its half of the cipher).
	ServerAlone float64 `json:"server_alone"`
}

// securityCeilingFor works out a variant's ceiling from its plaintext
// medians and the cipher's; produce says the server opens (else it seals).
func securityCeilingFor(plain map[string]stat, sealSPerGB, openSPerGB float64, produce bool) (securityCeiling, bool) {
	total, okT := plain["total_cpu_s_per_gb"]
	server, okS := plain["server_cpu_s_per_gb"]
	rate, okR := plain["mb_per_s"]
	if !okT || !okS || !okR || sealSPerGB <= 0 || openSPerGB <= 0 {
		return securityCeiling{}, false
	}
	c := securityCeiling{CipherSPerGB: sealSPerGB + openSPerGB, ServerCipherSPerGB: sealSPerGB}
	if produce {
		c.ServerCipherSPerGB = openSPerGB
	}
	c.PlainCoresBusy = rate.Median / 1000 * total.Median
	c.SharedCores = total.Median / (total.Median + c.CipherSPerGB)
	c.ServerAlone = server.Median / (server.Median + c.ServerCipherSPerGB)
	return c, true
}

type securityRow struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	// Plain and TLS are the figures of each side (mb_per_s,
	// server_cpu_s_per_gb, client_cpu_s_per_gb, ...).
	Plain    map[string]stat  `json:"plaintext"`
	TLS      map[string]stat  `json:"tls_acls"`
	Ratio    float64          `json:"tls_to_plaintext_mb_per_s"`
	Ceiling  *securityCeiling `json:"ceiling,omitempty"`
	Commands []string         `json:"commands"`
	Failures []string         `json:"failures,omitempty"`
}

type securityReport struct {
	Date       string            `json:"date"`
	Minutes    float64           `json:"duration_min"`
	Facts      facts             `json:"machine"`
	Plan       map[string]any    `json:"plan"`
	LoadBefore string            `json:"load_average_before"`
	LoadAfter  string            `json:"load_average_after"`
	BusyMax    float64           `json:"cpu_busy_before_max_pct"`
	Servers    map[string]string `json:"servers"`
	Rows       []securityRow     `json:"variants"`
	// Cipher is limit-aead's figures over the rounds: the record cipher
	// on one core.
	Cipher  map[string]stat `json:"record_cipher"`
	Goals   []condition     `json:"goals"`
	Samples []sample        `json:"samples"`
}

func buildSecurityReport(h *harness, c securityConfig, d time.Duration, load0, load1 string) *securityReport {
	r := &securityReport{
		Date: time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), Minutes: math.Round(d.Minutes()*10) / 10,
		Facts: h.facts, Servers: h.servers, Samples: h.samples, LoadBefore: load0, LoadAfter: load1,
		Plan: map[string]any{"rounds": c.rounds, "records": c.records, "record_size": 1024, "batch_size": c.batchSize,
			"acks": "all", "idempotent": true, "partitions": 1, "replication_factor": 1, "fsync_before_ack": false,
			"other_acls": c.otherACLs, "bench_acls": 2, "idle_threshold_pct": c.idleThreshold},
	}
	gb := float64(c.records) * 1024 / 1e9
	cipher := map[string][]float64{}
	for _, s := range h.samples {
		r.BusyMax = max(r.BusyMax, s.BusyBefore)
		if s.Figure == securityAEADFigure && s.Error == "" {
			for k, x := range s.Values {
				if k != "client_cpu_s" {
					cipher[k] = append(cipher[k], x)
				}
			}
		}
	}
	r.Cipher = map[string]stat{}
	for k, x := range cipher {
		r.Cipher[k] = summarize(x)
	}
	for _, way := range securityWays {
		row := securityRow{ID: way.id, Label: way.label, Plain: map[string]stat{}, TLS: map[string]stat{}}
		for _, name := range securitySides {
			vals := map[string][]float64{}
			command := ""
			for _, s := range h.samples {
				if s.Figure != "security."+name+"."+way.id {
					continue
				}
				if command == "" {
					command = s.Command
				}
				if s.Error != "" {
					row.Failures = append(row.Failures, fmt.Sprintf("%s, round %d: %s", name, s.Round, firstLine(s.Error)))
					continue
				}
				for k, x := range s.Values {
					vals[k] = append(vals[k], x)
				}
				if cpu, ok := s.Values["client_cpu_s"]; ok {
					vals["client_cpu_s_per_gb"] = append(vals["client_cpu_s_per_gb"], cpu/gb)
					if srv, ok := s.Values["server_cpu_s_per_gb"]; ok {
						vals["total_cpu_s_per_gb"] = append(vals["total_cpu_s_per_gb"], srv+cpu/gb)
					}
				}
			}
			dst := row.Plain
			if name == "tls" {
				dst = row.TLS
			}
			for k, x := range vals {
				dst[k] = summarize(x)
			}
			row.Commands = append(row.Commands, command)
		}
		p, okP := row.Plain["mb_per_s"]
		t, okT := row.TLS["mb_per_s"]
		known := okP && okT && p.Median > 0
		if known {
			row.Ratio = t.Median / p.Median
		}
		if ceil, ok := securityCeilingFor(row.Plain, r.Cipher["seal_cpu_s_per_gb"].Median, r.Cipher["open_cpu_s_per_gb"].Median,
			strings.HasSuffix(way.id, "_produce")); ok {
			row.Ceiling = &ceil
		}
		r.Goals = append(r.Goals, cond(way.id+": TLS with ACLs at >= 85 % of the plaintext MB/s", row.Ratio, known, 0.85, true))
		r.Rows = append(r.Rows, row)
	}
	return r
}

func (r *securityReport) write(dir string) (string, string, error) {
	return writeReport(dir, r.Date, "security", r, r.markdown())
}

func (r *securityReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice security benchmark (TLS and ACLs against plaintext), %s\n\n", r.Date)
	fmt.Fprintf(&b, "`sluice-bench security` (`make bench-security`), %.1f min. Commit %s; %s, %d cores, %s GiB; Linux %s; %s.\n",
		r.Minutes, r.Facts.Commit, r.Facts.CPU, r.Facts.Cores, r.Facts.MemoryGiB, r.Facts.Kernel, r.Facts.Go)
	fmt.Fprintf(&b, "Disk: %s. Load average (1, 5, 15 min) before: %s; after: %s. Busiest CPU before a measurement: %.0f %%.\n\n",
		r.Facts.Disk, r.LoadBefore, r.LoadAfter, r.BusyMax)
	fmt.Fprintf(&b, "Two `sluiced --roles=all` with a Kafka listener side by side: one in plaintext, one with TLS on every listener "+
		"(ECDSA P-256 certificates, client certificates required) and `--authz.enabled` (User:admin the only super user). "+
		"The measured client is User:bench, with only Write and Read on the prefix %q (and %v ACLs of other principals in the cluster), "+
		"so every call is authorized. Per round and side: %v records of 1 KiB produced by the SDK over gRPC (`sluice perf produce`) and by "+
		"franz-go over Kafka (`sluice-bench kafka-produce`), idempotent, acks=all, %v-byte batches, to fresh one-partition RF 1 topics without "+
		"fsync before the ack; then each topic read back by the same client kind. %v rounds; within each measurement the two sides run one after "+
		"the other, the order alternating by round. Medians over rounds. Server CPU is the sluiced process's user+system time over the "+
		"measurement, client CPU the measuring process's; both per GB of record values.\n\n",
		securityTopicPrefix, r.Plan["other_acls"], r.Plan["records"], r.Plan["batch_size"], r.Plan["rounds"])
	b.WriteString("| variant | plaintext MB/s | TLS+ACLs MB/s | TLS / plaintext | server CPU s/GB (plain / TLS) | client CPU s/GB (plain / TLS) | total CPU s/GB (plain / TLS) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	med := func(m map[string]stat, k string) string {
		if s, ok := m[k]; ok {
			return num(s.Median)
		}
		return "-"
	}
	spread := func(m map[string]stat) string {
		if s, ok := m["mb_per_s"]; ok && s.Median != 0 {
			return fmt.Sprintf("%s ±%.0f%%", num(s.Median), 50*(s.Max-s.Min)/s.Median)
		}
		return "-"
	}
	for _, row := range r.Rows {
		ratio := "-"
		if row.Ratio > 0 {
			ratio = fmt.Sprintf("**%.2f**", row.Ratio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s / %s | %s / %s | %s / %s |\n", row.Label, spread(row.Plain), spread(row.TLS), ratio,
			med(row.Plain, "server_cpu_s_per_gb"), med(row.TLS, "server_cpu_s_per_gb"),
			med(row.Plain, "client_cpu_s_per_gb"), med(row.TLS, "client_cpu_s_per_gb"),
			med(row.Plain, "total_cpu_s_per_gb"), med(row.TLS, "total_cpu_s_per_gb"))
	}
	writeGoals(&b, "Goals", r.Goals)
	r.writeCeilings(&b)
	writeFailures(&b, r.Rows, func(row securityRow) (string, []string) { return row.ID, row.Failures })
	b.WriteString("\nCommands (round 1, plaintext then TLS; later rounds differ in topic):\n\n```\n")
	for _, row := range r.Rows {
		for _, cmd := range row.Commands {
			b.WriteString(cmd + "\n")
		}
	}
	for _, name := range securitySides {
		b.WriteString(r.Servers["sluiced-"+name] + "\n")
	}
	b.WriteString("```\n")
	return b.String()
}

// writeCeilings sets each ratio beside the most the record cipher leaves.
func (r *securityReport) writeCeilings(b *strings.Builder) {
	seal, okS := r.Cipher["seal_cpu_s_per_gb"]
	open, okO := r.Cipher["open_cpu_s_per_gb"]
	if !okS || !okO {
		b.WriteString("\nThe record cipher was not measured (limit-aead failed), so no ceiling is given.\n")
		return
	}
	fmt.Fprintf(b, "\n### What the record cipher leaves\n\n"+
		"`sluice-bench limit-aead --suite %v`, once per round beside the clients: the suite's record cipher, Go's implementation "+
		"(the one crypto/tls uses), on one core with 16 KiB records. Seal %s GB/s (%.3f CPU s/GB), open %s GB/s (%.3f CPU s/GB); medians "+
		"of %d. Every byte over TLS is sealed by its sender and opened by its receiver, so seal plus open per GB of record values is CPU that "+
		"no TLS stack built on Go's crypto avoids (an underestimate: the wire also carries batch and frame headers). Hence the most of "+
		"the plaintext rate TLS can keep, with nothing added but the cipher: P/(P+F) when client and server share these cores and the run "+
		"is CPU-bound (P the plaintext side's total CPU per GB, F seal plus open), and S/(S+Fs) for a server on cores of its own with its "+
		"clients elsewhere (S its plaintext CPU per GB, Fs its half: open for a produce, seal for a consume).\n\n",
		r.Plan["cipher_suite"], num(r.Cipher["seal_gb_per_s"].Median), seal.Median, num(r.Cipher["open_gb_per_s"].Median), open.Median, seal.N)
	b.WriteString("| variant | cipher CPU s/GB (seal + open) | plaintext cores busy | ceiling, shared cores | ceiling, server alone | measured TLS / plaintext |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		if row.Ceiling == nil {
			fmt.Fprintf(b, "| %s | - | - | - | - | - |\n", row.Label)
			continue
		}
		c := row.Ceiling
		fmt.Fprintf(b, "| %s | %.3f | %.2f of %d | %.2f | %.2f | %.2f |\n", row.Label, c.CipherSPerGB, c.PlainCoresBusy, r.Facts.Cores,
			c.SharedCores, c.ServerAlone, row.Ratio)
	}
}

func (r *securityReport) summaryText() string {
	var b strings.Builder
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-30s plaintext %7.1f MB/s  TLS+ACLs %7.1f MB/s  ratio %.3f  server CPU s/GB %.2f / %.2f\n", row.Label,
			row.Plain["mb_per_s"].Median, row.TLS["mb_per_s"].Median, row.Ratio,
			row.Plain["server_cpu_s_per_gb"].Median, row.TLS["server_cpu_s_per_gb"].Median)
		if c := row.Ceiling; c != nil {
			fmt.Fprintf(&b, "%-30s the cipher leaves at most %.3f (shared cores) / %.3f (server alone)\n", "", c.SharedCores, c.ServerAlone)
		}
	}
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "%s: met=%v (%.3fx; %s)\n", g.Text, g.Met, g.Value, g.Margin)
	}
	return b.String()
}
