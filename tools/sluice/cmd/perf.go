package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func newPerfCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Measure produce, consume and end-to-end performance",
		Long: `Load generators in the style of Kafka's producer and consumer perf tools.
Each prints progress every second on standard error and a summary on standard
output (--output json for a machine-readable one): records/s, MB/s (10^6
bytes of keys and values) and latency percentiles from an HdrHistogram.

  sluice perf produce --topic t --partitions 1 --num-records 1000000 --record-size 1024 --acks 1
  sluice perf consume --topic t --messages 1000000
  sluice perf e2e --topic t --rate 10000 --num-records 100000 --record-size 1024`,
	}
	cmd.PersistentFlags().StringVar(&perfProfiles.cpu, "cpu-profile", "", "Write a CPU profile of this client to the file (go tool pprof).")
	cmd.PersistentFlags().StringVar(&perfProfiles.allocs, "alloc-profile", "", "Write an allocation profile of this client to the file at the end.")
	cmd.PersistentFlags().StringVar(&perfProfiles.trace, "trace", "", "Write an execution trace of this client's run to the file (go tool trace).")
	cmd.PersistentFlags().BoolVar(&perfProfiles.runtime, "runtime-stats", false,
		"Print this client's scheduler latency and GC pause percentiles over the run (runtime/metrics) on standard error.")
	cmd.AddCommand(newPerfProduceCmd(g), newPerfConsumeCmd(g), newPerfE2ECmd(g))
	return cmd
}

// perfProfiles are the files the client's own profiles go to, if any.
var perfProfiles struct {
	cpu, allocs, trace string
	runtime            bool
}

// perfRunE is the RunE of a perf command: run under the client profiles
// the flags ask for, print the summary, and fail (with failed's words) when
// records failed.
func perfRunE(g *globals, run func(ctx context.Context, progress io.Writer) (*perfSummary, error),
	failed func(*perfSummary) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		var s *perfSummary
		err := profiled(func() (err error) {
			s, err = run(cmd.Context(), cmd.ErrOrStderr())
			return err
		})
		if err != nil {
			return err
		}
		if err := s.write(cmd.OutOrStdout(), g.output); err != nil {
			return err
		}
		if s.Errors > 0 {
			return failed(s)
		}
		return nil
	}
}

// profiled runs fn under the client profiles the flags ask for.
func profiled(fn func() error) error {
	if perfProfiles.cpu != "" {
		f, err := os.Create(perfProfiles.cpu)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if perfProfiles.allocs != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			f, err := os.Create(perfProfiles.allocs)
			if err != nil {
				fmt.Fprintf(os.Stderr, "alloc profile: %v\n", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(os.Stderr, "alloc profile: %v\n", err)
			}
		}()
	}
	if perfProfiles.trace != "" {
		f, err := os.Create(perfProfiles.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if perfProfiles.runtime {
		before := readRuntimeHists()
		defer func() { writeRuntimeStats(os.Stderr, before, readRuntimeHists()) }()
	}
	return fn()
}

// perfTopicFlags create the topic when asked to.
type perfTopicFlags struct {
	topic      string
	partitions int32
	rf         int32
	configs    []string
}

func (f *perfTopicFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.topic, "topic", "", "Topic to use (required).")
	cmd.Flags().Int32Var(&f.partitions, "partitions", 0, "Create the topic with this many partitions if it does not exist (0: use the topic as it is).")
	cmd.Flags().Int32Var(&f.rf, "replication-factor", 0, "Replication factor of a topic created by --partitions (0: the cluster default).")
	cmd.Flags().StringArrayVar(&f.configs, "topic-config", nil, "Config name=value of a topic created by --partitions, repeatable (min.insync.replicas=2, sluice.fsync.before.ack=true, ...).")
}

// ensure creates the topic if --partitions asks for it; an existing topic
// is used as it is.
func (f *perfTopicFlags) ensure(ctx context.Context, c *client.Client) error {
	if f.topic == "" {
		return errors.New("--topic is required")
	}
	if f.partitions <= 0 {
		return nil
	}
	cfg := map[string]string{}
	for _, kv := range f.configs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--topic-config wants name=value, got %q", kv)
		}
		cfg[k] = v
	}
	if _, err := c.CreateTopic(ctx, f.topic, f.partitions, f.rf, cfg); err != nil && !errs.Is(err, errs.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", f.topic, err)
	}
	return nil
}

type perfProduceOptions struct {
	perfTopicFlags
	numRecords      int64
	recordSize      int
	throughput      float64
	acks            string
	idempotence     bool
	batchSize       int
	linger          time.Duration
	compression     string
	producers       int
	maxInFlight     int
	maxRequestBytes int
	maxBatchBytes   int
	bufferBytes     int
	transactionalID string
	txnInterval     time.Duration
}

func newPerfProduceCmd(g *globals) *cobra.Command {
	o := &perfProduceOptions{}
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "produce",
		Short: "Produce records as fast as possible (or at --throughput) and report rate and latency",
		Long: `Produce --num-records records of --record-size bytes (random letters, no key)
from --producers producers, each with its own connections, and report
records/s, MB/s and the latency from Produce to acknowledgement
(p50/p95/p99/p99.9/max). Like kafka-producer-perf-test, the latency includes
the time a record waits in the producer's buffer. The producers are
idempotent by default (acks all), as Kafka's; --idempotence=false, or
--acks 1 or 0, measures without.

With --transactional-id each producer runs in transactions, as
kafka-producer-perf-test's --transaction-duration-ms does: begin, produce for
--txn-interval, commit, and again. The summary adds the commits per second
and the commit latency (from CommitTransaction's call, which first waits for
every record of the transaction, to its return) and the EndTxn part of it
(after the records are acknowledged).`,
		Args: cobra.NoArgs,
		RunE: perfRunE(g, func(ctx context.Context, progress io.Writer) (*perfSummary, error) {
			return runPerfProduce(ctx, g, o, progress, cmd)
		}, func(s *perfSummary) error {
			return fmt.Errorf("%d of %d records failed; first error: %s", s.Errors, o.numRecords, s.FirstError)
		}),
	}
	o.register(cmd)
	f := cmd.Flags()
	f.Int64Var(&o.numRecords, "num-records", 1_000_000, "Records to produce, over all producers.")
	f.IntVar(&o.recordSize, "record-size", 1024, "Value bytes of each record.")
	f.Float64Var(&o.throughput, "throughput", -1, "Records per second over all producers; -1 for no limit.")
	f.StringVar(&o.acks, "acks", "all", "Acknowledgement level: all, 1 or 0.")
	f.BoolVar(&o.idempotence, "idempotence", true, idempotenceUsage)
	f.IntVar(&o.batchSize, "batch-size", 64<<10, "Batch size in bytes (batch.size).")
	f.DurationVar(&o.linger, "linger", 5*time.Millisecond, "How long a batch waits for more records (linger.ms).")
	f.StringVar(&o.compression, "compression", "none", "Batch compression: none, gzip, snappy, lz4 or zstd.")
	f.IntVar(&o.producers, "producers", 1, "Concurrent producers, each with its own client and streams.")
	f.IntVar(&o.maxInFlight, "max-in-flight", 5, "Batches per partition sent and not yet answered (Kafka's default is 5, the most idempotence allows).")
	f.IntVar(&o.maxBatchBytes, "max-batch-bytes", 0, "Most a batch grows to while its partition has --max-in-flight batches unanswered (0: the SDK default, 1 MiB; the --batch-size value turns the growth off).")
	f.IntVar(&o.maxRequestBytes, "max-request-bytes", 1<<20, "Largest produce request (max.request.size).")
	f.IntVar(&o.bufferBytes, "buffer-bytes", 64<<20, "Producer buffer (buffer.memory).")
	f.StringVar(&o.transactionalID, "transactional-id", "", "Produce in transactions with this transactional id (with --producers N: ID-0 to ID-<N-1>); off when empty.")
	f.DurationVar(&o.txnInterval, "txn-interval", 100*time.Millisecond, "With --transactional-id: how long each transaction produces before it commits.")
	return cmd
}

func runPerfProduce(ctx context.Context, g *globals, o *perfProduceOptions, progress io.Writer, cmd *cobra.Command) (*perfSummary, error) {
	acks, err := parseAcks(o.acks)
	if err != nil {
		return nil, err
	}
	disable, err := disableIdempotence(cmd, acks, o.idempotence)
	if err != nil {
		return nil, err
	}
	codec, err := parseCodec(o.compression)
	if err != nil {
		return nil, err
	}
	if !disable && o.maxInFlight > 5 {
		return nil, fmt.Errorf("--max-in-flight %d: the idempotent producer allows at most 5; pass --idempotence=false for more", o.maxInFlight)
	}
	cfg := client.ProducerConfig{
		Acks: acks, Linger: o.linger, BatchBytes: o.batchSize, MaxBatchBytes: o.maxBatchBytes, MaxRequestBytes: o.maxRequestBytes,
		Compression: codec, MaxInFlight: o.maxInFlight, BufferBytes: o.bufferBytes, DisableIdempotence: disable,
	}
	txn := o.transactionalID != ""
	if txn {
		cfg.TransactionalID = o.transactionalID
		if o.txnInterval <= 0 {
			return nil, errors.New("--txn-interval must be positive")
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.producers < 1 || o.numRecords < 1 || o.recordSize < 0 {
		return nil, errors.New("--producers and --num-records must be at least 1, --record-size at least 0")
	}
	admin, err := g.client()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := o.ensure(ctx, admin); err != nil {
		return nil, err
	}
	lat := newLatencyRecorder()
	commitLat, endLat := newLatencyRecorder(), newLatencyRecorder()
	var commits atomic.Int64
	var failures errorCounter
	var acked, ackedBytes atomic.Int64
	var outstanding sync.WaitGroup

	type worker struct {
		c *client.Client
		p *client.Producer
		n int64
	}
	workers := make([]worker, o.producers)
	for i := range workers {
		c, err := g.client()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		pcfg := cfg
		if txn && o.producers > 1 {
			pcfg.TransactionalID = fmt.Sprintf("%s-%d", o.transactionalID, i)
		}
		p := c.NewProducer(pcfg)
		if txn {
			// Before the clock starts: the first InitProducerId may wait for
			// the coordinator to load its partition.
			if err := p.InitTransactions(ctx); err != nil {
				return nil, fmt.Errorf("initializing transactions of %s: %w", pcfg.TransactionalID, err)
			}
		}
		workers[i] = worker{c: c, p: p, n: o.numRecords / int64(o.producers)}
		if int64(i) < o.numRecords%int64(o.producers) {
			workers[i].n++
		}
	}
	// Leaders first, so the run measures producing, not the topic's
	// creation.
	if _, err := awaitLeaders(ctx, admin, o.topic, 30*time.Second); err != nil {
		return nil, err
	}

	start := time.Now()
	stopProgress := startProgress(progress, start, func() (int64, int64, int64) {
		n, _ := failures.get()
		return acked.Load(), ackedBytes.Load(), n
	}, lat)
	var wg sync.WaitGroup
	for i := range workers {
		w := workers[i]
		payload := randomPayload(o.recordSize, uint64(i))
		pace := pacer{start: start, rate: o.throughput / float64(o.producers)}
		wg.Go(func() {
			// The record's timestamp is its send time: one callback serves
			// every record, with no closure allocated per record.
			cb := func(r client.Result) {
				if r.Err != nil {
					failures.add(r.Err)
				} else {
					lat.record(time.Since(r.Record.Timestamp))
					acked.Add(1)
					ackedBytes.Add(int64(len(r.Record.Value) + len(r.Record.Key)))
				}
				outstanding.Done()
			}
			for sent := int64(0); sent < w.n; {
				// Without transactions, one pass sends everything; with them,
				// one pass is one transaction of --txn-interval.
				var deadline time.Time
				if txn {
					if err := w.p.BeginTransaction(); err != nil {
						failures.add(err)
						return
					}
					deadline = time.Now().Add(o.txnInterval)
				}
				for sent < w.n {
					if txn && !time.Now().Before(deadline) {
						break
					}
					due := pace.due(time.Now(), w.n)
					if due <= sent {
						time.Sleep(100 * time.Microsecond)
						continue
					}
					for ; sent < due; sent++ {
						now := time.Now()
						if txn && !now.Before(deadline) {
							break
						}
						rec := &client.Record{Topic: o.topic, Partition: -1, Value: payload, Timestamp: now}
						outstanding.Add(1)
						if err := w.p.Produce(ctx, rec, cb); err != nil {
							outstanding.Done()
							failures.add(err)
							if ctx.Err() != nil {
								return
							}
						}
					}
				}
				if txn && !commitTxn(ctx, w.p, commitLat, endLat, &commits, &failures) {
					return
				}
			}
			if err := w.p.Flush(ctx); err != nil {
				failures.add(err)
			}
		})
	}
	wg.Wait()
	outstanding.Wait()
	elapsed := time.Since(start)
	stopProgress()
	for _, w := range workers {
		_ = w.p.Close(context.Background()) // everything was flushed; Close only stops it
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	nerr, first := failures.get()
	s := newPerfSummary("produce", o.topic, acked.Load(), ackedBytes.Load(), nerr, elapsed)
	s.FirstError = first
	l := lat.summary()
	s.Latency = &l
	s.Config = map[string]any{
		"num_records": o.numRecords, "record_size": o.recordSize, "throughput": o.throughput, "acks": o.acks,
		"batch_size": o.batchSize, "linger": o.linger.String(), "compression": o.compression, "producers": o.producers,
		"max_in_flight": o.maxInFlight, "max_request_bytes": o.maxRequestBytes, "max_batch_bytes": o.maxBatchBytes, "partitions": o.partitions,
	}
	if txn {
		s.Config["transactional_id"], s.Config["txn_interval"] = o.transactionalID, o.txnInterval.String()
		cl, el := commitLat.summary(), endLat.summary()
		s.Transactions = &txnPerfSummary{Commits: commits.Load(), CommitsPerSec: roundTo(float64(commits.Load())/elapsed.Seconds(), 1),
			CommitLatency: &cl, EndTxnLatency: &el}
	}
	return s, nil
}

// commitTxn commits the open transaction and times it: the whole call, and
// its EndTxn part after the transaction's records are acknowledged. A
// failed commit counts as an error and its transaction is aborted; false
// means the producer cannot go on.
func commitTxn(ctx context.Context, p *client.Producer, commitLat, endLat *latencyRecorder, commits *atomic.Int64, failures *errorCounter) bool {
	start := time.Now()
	// CommitTransaction waits for the records itself; flushing first only
	// splits its time into the wait and the EndTxn round trip.
	err := p.Flush(ctx)
	end := time.Now()
	if err == nil {
		err = p.CommitTransaction(ctx)
	}
	if err == nil {
		now := time.Now()
		commitLat.record(now.Sub(start))
		endLat.record(now.Sub(end))
		commits.Add(1)
		return true
	}
	failures.add(fmt.Errorf("committing a transaction: %w", err))
	if aerr := p.AbortTransaction(ctx); aerr != nil {
		failures.add(fmt.Errorf("aborting a transaction: %w", aerr))
		return false
	}
	return ctx.Err() == nil
}

// randomPayload returns size random capital letters, as Kafka's perf tool
// sends: compressible a little, like text.
func randomPayload(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('A' + r.IntN(26))
	}
	return b
}

// startProgress prints a progress line every second until the returned
// function is called. counts returns the running totals of records, bytes
// and errors; lat, if not nil, gives each interval's latencies.
func startProgress(w io.Writer, start time.Time, counts func() (int64, int64, int64), lat *latencyRecorder) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := start
		var lastRecords, lastBytes int64
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				records, bytes, nerr := counts()
				var ls *latencySummary
				if lat != nil {
					s := lat.takeInterval()
					ls = &s
				}
				fmt.Fprintln(w, progressLine(now.Sub(start), records-lastRecords, bytes-lastBytes, now.Sub(last), ls, nerr))
				last, lastRecords, lastBytes = now, records, bytes
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
