package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// The Kafka-protocol benchmark (`sluice-bench kafka`, `make bench-kafka`):
// franz-go producing and consuming 1 KiB records through the Kafka listener
// against the native SDK over gRPC, side by side on one `sluiced
// --roles=all` in interleaved rounds, with the server's CPU per GB moved.
// The goal: the Kafka path at 90 % or more of the native figure both ways.

// kafkaVariant is one measurement of a round.
type kafkaVariant struct{ id, label string }

var kafkaVariants = []kafkaVariant{
	{"native_produce", "produce, SDK over gRPC"},
	{"kafka_produce", "produce, franz-go over Kafka"},
	{"native_consume", "consume, SDK over gRPC"},
	{"kafka_consume", "consume, franz-go over Kafka"},
	// The same two readers with 8 MiB per partition per fetch instead of
	// both clients' default 1 MiB: on one partition franz-go's default
	// makes one request and answer per MiB, where the SDK's fetch stream
	// keeps chunks coming without asking.
	{"native_consume_8m", "consume 8 MiB fetches, SDK over gRPC"},
	{"kafka_consume_8m", "consume 8 MiB fetches, franz-go over Kafka"},
	// Both clients at their defaults on a topic of several partitions, the
	// usual shape of a Kafka topic: franz-go asks for 1 MiB of every
	// partition in one request, the SDK streams each partition.
	{"native_produce_mp", "produce, N partitions, SDK over gRPC"},
	{"kafka_produce_mp", "produce, N partitions, franz-go over Kafka"},
	{"native_consume_mp", "consume, N partitions, SDK over gRPC"},
	{"kafka_consume_mp", "consume, N partitions, franz-go over Kafka"},
}

type kafkaConfig struct {
	binDir, outDir, tmpParent string
	rounds                    int
	records                   int64
	batchSize                 int
	partitions                int
	idleThreshold             float64
	idleMax, idleBudget       time.Duration
}

func kafkaMain(args []string) error {
	fs := flag.NewFlagSet("kafka", flag.ExitOnError)
	var c kafkaConfig
	fs.StringVar(&c.binDir, "bin", "bin", "directory with sluiced and sluice")
	fs.StringVar(&c.outDir, "out", "bench/results", "directory for <date>-kafka.md and <date>-kafka.json")
	fs.StringVar(&c.tmpParent, "tmp", "", "parent of the temporary data directory (default $TMPDIR)")
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds of every variant; figures are medians over rounds")
	fs.Int64Var(&c.records, "records", 1_000_000, "1 KiB records per measurement")
	fs.IntVar(&c.batchSize, "batch-size", 256<<10, "producer batch size, both clients")
	fs.IntVar(&c.partitions, "partitions", 4, "partitions of the topics of the *_mp variants")
	fs.Float64Var(&c.idleThreshold, "idle-threshold", 15, "CPU busy percent below which the machine counts as idle")
	fs.DurationVar(&c.idleMax, "idle-max", 10*time.Second, "longest wait for an idle CPU before one measurement")
	fs.DurationVar(&c.idleBudget, "idle-budget", time.Minute, "longest total wait for an idle CPU over the run")
	_ = fs.Parse(args) // ExitOnError
	if c.rounds < 1 || c.records < 1 || c.partitions < 1 {
		return fmt.Errorf("--rounds, --records and --partitions must be at least 1")
	}
	h, cleanup, err := openHarness(c.binDir, c.tmpParent, "sluice-bench-kafka-", idleGate{threshold: c.idleThreshold, maxWait: c.idleMax, budget: c.idleBudget})
	if err != nil {
		return err
	}
	defer cleanup()
	tmp := h.tmp
	c.binDir = h.cfg.binDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	loadStart := loadAvg()
	h.logf("sluice-bench kafka: %d rounds of %d records, data in %s (%s), load average %s", c.rounds, c.records, tmp, h.facts.Disk, loadStart)

	srv, addr, kafkaAddr, err := h.startSluicedKafka("sluiced", nil)
	if err != nil {
		return err
	}
	admin, err := client.New(client.Config{Bootstrap: []string{addr}, RequestTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer admin.Close()

	n := strconv.FormatInt(c.records, 10)
	batch := strconv.Itoa(c.batchSize)
	bytes := c.records * 1024
	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		native, viaKafka := fmt.Sprintf("native-r%d", r), fmt.Sprintf("kafka-r%d", r)
		nativeMP, viaKafkaMP := fmt.Sprintf("native-mp-r%d", r), fmt.Sprintf("kafka-mp-r%d", r)
		// Both topics alike: one partition, RF 1, no fsync before the ack
		// (the page cache), acks=all and idempotence in both clients.
		for _, topic := range []string{native, viaKafka} {
			if _, err := admin.CreateTopic(ctx, topic, 1, 1, map[string]string{"sluice.fsync.before.ack": "false"}); err != nil {
				return fmt.Errorf("creating %s: %w", topic, err)
			}
		}
		for _, topic := range []string{nativeMP, viaKafkaMP} {
			if _, err := admin.CreateTopic(ctx, topic, int32(c.partitions), 1, map[string]string{"sluice.fsync.before.ack": "false"}); err != nil {
				return fmt.Errorf("creating %s: %w", topic, err)
			}
		}
		argv := map[string][]string{
			"native_produce": {filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "produce", "--topic", native,
				"--num-records", n, "--record-size", "1024", "--acks", "all", "--batch-size", batch},
			"kafka_produce": {h.self, "kafka-produce", "--brokers", kafkaAddr, "--topic", viaKafka, "--count", n, "--size", "1024", "--batch-size", batch},
			// Both consumers read the topic the native producer wrote: the
			// same batches.
			"native_consume": {filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "consume", "--topic", native, "--messages", n},
			"kafka_consume":  {h.self, "kafka-consume", "--brokers", kafkaAddr, "--topic", native, "--count", n},
			"native_consume_8m": {filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "consume", "--topic", native, "--messages", n,
				"--fetch-max-bytes", strconv.Itoa(8 << 20)},
			"kafka_consume_8m": {h.self, "kafka-consume", "--brokers", kafkaAddr, "--topic", native, "--count", n, "--partition-max-bytes", strconv.Itoa(8 << 20)},
			"native_produce_mp": {filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "produce", "--topic", nativeMP,
				"--num-records", n, "--record-size", "1024", "--acks", "all", "--batch-size", batch},
			"kafka_produce_mp":  {h.self, "kafka-produce", "--brokers", kafkaAddr, "--topic", viaKafkaMP, "--count", n, "--size", "1024", "--batch-size", batch},
			"native_consume_mp": {filepath.Join(c.binDir, "sluice"), "--bootstrap", addr, "-o", "json", "perf", "consume", "--topic", nativeMP, "--messages", n},
			"kafka_consume_mp":  {h.self, "kafka-consume", "--brokers", kafkaAddr, "--topic", nativeMP, "--count", n},
		}
		// Produce before consume (the consumers read what was produced);
		// within each pair the order alternates by round.
		pairs := [][2]string{{"native_produce", "kafka_produce"}, {"native_consume", "kafka_consume"}, {"native_consume_8m", "kafka_consume_8m"},
			{"native_produce_mp", "kafka_produce_mp"}, {"native_consume_mp", "kafka_consume_mp"}}
		for _, pair := range pairs {
			if r%2 == 0 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			for _, id := range pair {
				if ctx.Err() != nil {
					break
				}
				h.measure(ctx, r, measurement{figure: "kafka." + id, sluicePerf: strings.HasPrefix(id, "native"), server: srv, cpu: true,
					bytes: bytes, argv: argv[id]})
			}
		}
		for _, topic := range []string{native, viaKafka, nativeMP, viaKafkaMP} {
			h.deleteTopic(ctx, admin, topic)
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; no report written")
	}
	if d := srv.died(); d != "" {
		h.logf("%s", d)
	}
	rep := buildKafkaReport(h, c, time.Since(start), loadStart, loadAvg())
	md, js, err := rep.write(c.outDir)
	if err != nil {
		return err
	}
	h.logf("report: %s and %s (%.1f min)", md, js, time.Since(start).Minutes())
	fmt.Print(rep.summaryText())
	return nil
}

// startSluicedKafka starts one `sluiced --roles=all` with a Kafka listener
// on free ports, with extra flags appended, and waits until it serves
// (over TLS with tlsConf when that is not nil); it returns the gRPC and
// Kafka addresses.
func (h *harness) startSluicedKafka(name string, tlsConf *tls.Config, extra ...string) (*server, string, string, error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, "", "", err
	}
	dir := filepath.Join(h.tmp, name)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", ports[4])
	argv := []string{filepath.Join(h.cfg.binDir, "sluiced"), "--roles=all", "--node-id=1", "--data-dir=" + dir,
		"--listen=" + addr, fmt.Sprintf("--http-listen=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--controller.etcd.client-listen=127.0.0.1:%d", ports[2]),
		fmt.Sprintf("--controller.etcd.peer-listen=127.0.0.1:%d", ports[3]), "--kafka-listen=" + kafkaAddr, "--log.level=warn"}
	argv = append(argv, extra...)
	srv, err := h.procs.start("sluiced", filepath.Join(h.tmp, name+".log"), argv)
	if err != nil {
		return nil, "", "", err
	}
	h.servers[name] = h.display(argv)
	if err := waitClusterTLS(context.Background(), addr, tlsConf, 1, 60*time.Second); err != nil {
		return nil, "", "", err
	}
	if err := waitPort(context.Background(), kafkaAddr, 30*time.Second); err != nil {
		return nil, "", "", err
	}
	return srv, addr, kafkaAddr, nil
}

// kafkaProduce is `sluice-bench kafka-produce`: franz-go (idempotent,
// acks=all, its defaults) produces count records of size bytes to one
// topic as fast as it can; prints records/s and MB/s from the first
// produce to the last acknowledgement.
func kafkaProduce(args []string) error {
	fs := flag.NewFlagSet("kafka-produce", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap addresses, comma-separated")
	topic := fs.String("topic", "", "topic (must exist)")
	count := fs.Int64("count", 1_000_000, "records")
	size := fs.Int("size", 1024, "value bytes per record")
	batch := fs.Int("batch-size", 256<<10, "producer batch bytes (ProducerBatchMaxBytes)")
	compression := fs.String("compression", "none", "batch compression: none or snappy (franz-go's own default)")
	tlsOpt := kafkaTLSFlags(fs)
	_ = fs.Parse(args) // ExitOnError
	if *topic == "" || *count < 1 || *size < 0 {
		return fmt.Errorf("--topic is required, --count must be positive and --size not negative")
	}
	// Uncompressed by default, as `sluice perf produce` sends: franz-go
	// compresses with snappy unless told otherwise, which would make the
	// two protocols move different bytes.
	codec := kgo.NoCompression()
	switch *compression {
	case "none":
	case "snappy":
		codec = kgo.SnappyCompression()
	default:
		return fmt.Errorf("--compression %q: want none or snappy", *compression)
	}
	opts, err := tlsOpt([]kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.DefaultProduceTopic(*topic),
		kgo.ProducerBatchMaxBytes(int32(*batch)), kgo.MaxBufferedBytes(64 << 20), kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchCompression(codec)})
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Warm up: metadata, the producer id and the connection.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return fmt.Errorf("warm-up record: %w", err)
	}
	value := letters(*size)
	var mu sync.Mutex
	var firstErr error
	var failed int64
	start := time.Now()
	for range *count {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	if firstErr != nil {
		return fmt.Errorf("%d records failed, the first: %w", failed, firstErr)
	}
	return printFigures(figures{"records_per_s": float64(*count) / elapsed, "mb_per_s": float64(*count) * float64(*size) / 1e6 / elapsed,
		"errors": 0, "elapsed_s": elapsed})
}

// kafkaConsume is `sluice-bench kafka-consume`: franz-go reads count
// records of one topic from its start (read_uncommitted, its default
// fetch sizes) and prints records/s and MB/s of the record values, from
// the first fetch request to the last record.
func kafkaConsume(args []string) error {
	fs := flag.NewFlagSet("kafka-consume", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap addresses, comma-separated")
	topic := fs.String("topic", "", "topic to read from its start")
	count := fs.Int64("count", 1_000_000, "records to read")
	partBytes := fs.Int("partition-max-bytes", 1<<20, "most bytes of one partition per fetch response (fetch.max.partition.bytes; franz-go's default 1 MiB)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of this client to the file (go tool pprof)")
	tlsOpt := kafkaTLSFlags(fs)
	_ = fs.Parse(args) // ExitOnError
	if *topic == "" || *count < 1 {
		return fmt.Errorf("--topic is required and --count must be positive")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	st := &fetchStats{}
	opts, err := tlsOpt([]kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxPartitionBytes(int32(*partBytes)), kgo.WithHooks(st)})
	if err != nil {
		return err
	}
	start := time.Now()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var n, b int64
	for n < *count {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %d of %d records: %w", n, *count, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			b += int64(len(r.Value))
		})
	}
	elapsed := time.Since(start).Seconds()
	f := figures{"records_per_s": float64(n) / elapsed, "mb_per_s": float64(b) / 1e6 / elapsed, "errors": 0, "elapsed_s": elapsed}
	st.addTo(f)
	return printFigures(f)
}

// kafkaTLSFlags registers --tls-ca, --tls-cert and --tls-key on fs and
// returns a function that, after parsing, adds a TLS dialer to a client's
// options when --tls-ca is set (with the client certificate when given).
func kafkaTLSFlags(fs *flag.FlagSet) func([]kgo.Opt) ([]kgo.Opt, error) {
	ca := fs.String("tls-ca", "", "PEM file of the cluster's CA; connects over TLS")
	cert := fs.String("tls-cert", "", "PEM file of a client certificate for mutual TLS (with --tls-key)")
	key := fs.String("tls-key", "", "PEM file of the key of --tls-cert")
	return func(opts []kgo.Opt) ([]kgo.Opt, error) {
		if *ca == "" {
			if *cert != "" || *key != "" {
				return nil, fmt.Errorf("--tls-cert and --tls-key need --tls-ca")
			}
			return opts, nil
		}
		conf, err := wire.ClientTLS(*ca, *cert, *key)
		if err != nil {
			return nil, err
		}
		return append(opts, kgo.DialTLSConfig(conf)), nil
	}
}

// ---- report ----

type kafkaRow struct {
	ID       string          `json:"id"`
	Label    string          `json:"label"`
	Stats    map[string]stat `json:"stats"`
	Command  string          `json:"command"`
	Failures []string        `json:"failures,omitempty"`
}

type kafkaReport struct {
	Date       string             `json:"date"`
	Minutes    float64            `json:"duration_min"`
	Facts      facts              `json:"machine"`
	Plan       map[string]any     `json:"plan"`
	LoadBefore string             `json:"load_average_before"`
	LoadAfter  string             `json:"load_average_after"`
	Servers    map[string]string  `json:"servers"`
	Rows       []kafkaRow         `json:"variants"`
	Ratios     map[string]float64 `json:"kafka_to_native_mb_per_s"`
	Goals      []condition        `json:"goals"`
	Samples    []sample           `json:"samples"`
}

func buildKafkaReport(h *harness, c kafkaConfig, d time.Duration, load0, load1 string) *kafkaReport {
	r := &kafkaReport{
		Date: time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), Minutes: math.Round(d.Minutes()*10) / 10,
		Facts: h.facts, Servers: h.servers, Samples: h.samples, LoadBefore: load0, LoadAfter: load1, Ratios: map[string]float64{},
		Plan: map[string]any{"rounds": c.rounds, "records": c.records, "record_size": 1024, "batch_size": c.batchSize,
			"acks": "all", "idempotent": true, "partitions": 1, "partitions_mp": c.partitions, "replication_factor": 1, "fsync_before_ack": false,
			"idle_threshold_pct": c.idleThreshold},
	}
	for _, v := range kafkaVariants {
		label := strings.Replace(v.label, "N partitions", fmt.Sprintf("%d partitions", c.partitions), 1)
		row := kafkaRow{ID: v.id, Label: label, Stats: map[string]stat{}}
		vals := map[string][]float64{}
		for _, s := range h.samples {
			if s.Figure != "kafka."+v.id {
				continue
			}
			if row.Command == "" {
				row.Command = s.Command
			}
			if s.Error != "" {
				row.Failures = append(row.Failures, fmt.Sprintf("round %d: %s", s.Round, firstLine(s.Error)))
				continue
			}
			for k, x := range s.Values {
				vals[k] = append(vals[k], x)
			}
		}
		for k, x := range vals {
			row.Stats[k] = summarize(x)
		}
		r.Rows = append(r.Rows, row)
	}
	medOf := func(id string) (float64, bool) {
		for _, row := range r.Rows {
			if s, ok := row.Stats["mb_per_s"]; ok && row.ID == id {
				return s.Median, true
			}
		}
		return 0, false
	}
	for _, way := range []string{"produce", "consume", "consume_8m", "produce_mp", "consume_mp"} {
		k, okK := medOf("kafka_" + way)
		nat, okN := medOf("native_" + way)
		known := okK && okN && nat > 0
		x := 0.0
		if known {
			x = k / nat
			r.Ratios[way] = x
		}
		r.Goals = append(r.Goals, cond(way+": Kafka at >= 90 % of the native MB/s", x, known, 0.9, true))
	}
	return r
}

func (r *kafkaReport) write(dir string) (string, string, error) {
	return writeReport(dir, r.Date, "kafka", r, r.markdown())
}

func (r *kafkaReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice Kafka-protocol benchmark, %s\n\n", r.Date)
	fmt.Fprintf(&b, "`sluice-bench kafka` (`make bench-kafka`), %.1f min. Commit %s; %s, %d cores, %s GiB; Linux %s; %s.\n",
		r.Minutes, r.Facts.Commit, r.Facts.CPU, r.Facts.Cores, r.Facts.MemoryGiB, r.Facts.Kernel, r.Facts.Go)
	fmt.Fprintf(&b, "Disk: %s. Load average (1, 5, 15 min) before: %s; after: %s.\n\n", r.Facts.Disk, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(&b, "One `sluiced --roles=all` with a Kafka listener; per round %v records of 1 KiB produced by the SDK over gRPC "+
		"(`sluice perf produce`) and by franz-go over Kafka (`sluice-bench kafka-produce`), both idempotent with acks=all and %v-byte batches "+
		"of the same uncompressed random capital letters, to fresh one-partition RF 1 topics without fsync before the ack; then the natively produced topic read by the SDK (`sluice perf consume`) "+
		"and by franz-go (`sluice-bench kafka-consume`). The *N partitions* variants do the same on topics of %v partitions, both clients at their "+
		"default fetch sizes. %v rounds, the order within each pair alternating. Medians over rounds; "+
		"server CPU is the sluiced process's user+system time over the measurement, per GB of record values moved.\n\n",
		r.Plan["records"], r.Plan["batch_size"], r.Plan["partitions_mp"], r.Plan["rounds"])
	b.WriteString("| variant | MB/s | ± | records/s | server CPU s/GB | client CPU s |\n|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		med := func(k string) string {
			if s, ok := row.Stats[k]; ok {
				return num(s.Median)
			}
			return "-"
		}
		spread := "-"
		if s, ok := row.Stats["mb_per_s"]; ok && s.Median != 0 {
			spread = fmt.Sprintf("±%.0f%%", 50*(s.Max-s.Min)/s.Median)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", row.Label, med("mb_per_s"), spread, med("records_per_s"),
			med("server_cpu_s_per_gb"), med("client_cpu_s"))
	}
	b.WriteString("\nfranz-go's fetch round trips (medians over rounds of per-run means): read wait is from the request written to the " +
		"answer's first byte (the server's part), read is from there to the answer's last byte.\n\n" +
		"| variant | fetches | bytes per fetch | batches per fetch | read wait ms | read ms |\n|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		if _, ok := row.Stats["fetches"]; !ok {
			continue
		}
		med := func(k string) string { return num(row.Stats[k].Median) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", row.Label, med("fetches"), med("fetch_bytes"), med("fetch_batches"),
			med("fetch_read_wait_ms"), med("fetch_read_ms"))
	}
	writeGoals(&b, "Goals", r.Goals)
	writeFailures(&b, r.Rows, func(row kafkaRow) (string, []string) { return row.ID, row.Failures })
	b.WriteString("\nCommands (round 1; later rounds differ in topic):\n\n```\n")
	for _, row := range r.Rows {
		b.WriteString(row.Command + "\n")
	}
	b.WriteString(r.Servers["sluiced"] + "\n```\n")
	return b.String()
}

func (r *kafkaReport) summaryText() string {
	var b strings.Builder
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-32s %8.1f MB/s  server %.2f CPU s/GB\n", row.Label, row.Stats["mb_per_s"].Median, row.Stats["server_cpu_s_per_gb"].Median)
	}
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "%s: met=%v (%.3fx; %s)\n", g.Text, g.Met, g.Value, g.Margin)
	}
	return b.String()
}

// fetchStats counts a consumer's fetch round trips as franz-go's hooks
// see them, so a report shows how many answers a read took, how full
// they were, and how much of each round trip was the server's (read
// wait: from the request written to the answer's first byte) against
// reading the answer.
type fetchStats struct {
	n, bytes, batches  atomic.Int64
	readWait, readTime atomic.Int64 // nanoseconds
}

func (s *fetchStats) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key != 1 { // Fetch
		return
	}
	s.n.Add(1)
	s.bytes.Add(int64(e.BytesRead))
	s.readWait.Add(int64(e.ReadWait))
	s.readTime.Add(int64(e.TimeToRead))
}

func (s *fetchStats) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	s.batches.Add(1)
}

// addTo adds the fetch count and per-fetch means to f.
func (s *fetchStats) addTo(f figures) {
	n := s.n.Load()
	if n == 0 {
		return
	}
	per := func(v int64) float64 { return float64(v) / float64(n) }
	f["fetches"] = float64(n)
	f["fetch_bytes"] = per(s.bytes.Load())
	f["fetch_batches"] = per(s.batches.Load())
	f["fetch_read_wait_ms"] = per(s.readWait.Load()) / 1e6
	f["fetch_read_ms"] = per(s.readTime.Load()) / 1e6
}

// letters returns size random capital letters, the payload `sluice perf
// produce` sends (as Kafka's perf tool does): all-zero values would shrink
// to almost nothing in any compressed batch.
func letters(size int) []byte {
	r := rand.New(rand.NewPCG(uint64(size), 0x5eed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('A' + r.IntN(26))
	}
	return b
}
