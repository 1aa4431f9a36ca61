package cmd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/client"
)

type perfConsumeOptions struct {
	topic         string
	messages      int64
	partition     int32
	group         string
	groupProtocol string
	fetchMax      int
	idleTimeout   time.Duration
	reuseBuffers  bool
}

func newPerfConsumeCmd(g *globals) *cobra.Command {
	o := &perfConsumeOptions{}
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Read records from the start of a topic and report the rate",
		Long: `Read --messages records from the earliest offset of every partition of
--topic (or of one --partition) and report records/s and MB/s, timed from the
assignment to the last record, and how long the first record took. It is
done with each record by its next poll, so it lets the consumer reuse the
memory records arrive in (--reuse-fetch-buffers=false measures the SDK's
default instead).

With --group the command joins that consumer group, subscribed to --topic,
as kafka-consumer-perf-test does with a group: it reads the partitions the
group assigns, from the group's committed offsets (from the earliest offset
where the group has none). It commits as the group consumer does with
automatic commit (enable.auto.commit): what Poll returned, every 5 s and
when it leaves the group at the end. records/s and MB/s are then timed from
creating the consumer, so they include the join; join_s is how long the
first assignment took, and fetch_records_per_s and fetch_mb_per_s leave the
join out (Kafka's fetch.MB.sec).`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error { return o.validate(cmd) },
		RunE: perfRunE(g, func(ctx context.Context, progress io.Writer) (*perfSummary, error) {
			return runPerfConsume(ctx, g, o, progress)
		}, func(s *perfSummary) error {
			return fmt.Errorf("read %d of %d records: %s", s.Records, o.messages, s.FirstError)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.topic, "topic", "", "Topic to read (required).")
	f.Int64Var(&o.messages, "messages", 1_000_000, "Records to read.")
	f.Int32Var(&o.partition, "partition", -1, "Read only this partition (-1: every partition); not with --group.")
	f.StringVar(&o.group, "group", "", "Read as a member of this consumer group (subscribed to --topic), committing automatically.")
	f.StringVar(&o.groupProtocol, "group-protocol", "", "With --group: the rebalance protocol, classic (default) or consumer (KIP-848).")
	f.IntVar(&o.fetchMax, "fetch-max-bytes", 1<<20, "Largest chunk of one partition per fetch response (max.partition.fetch.bytes).")
	f.DurationVar(&o.idleTimeout, "timeout", 30*time.Second, "Give up after this long without a record (with --group, the join included).")
	f.BoolVar(&o.reuseBuffers, "reuse-fetch-buffers", true,
		"Let the consumer reuse the memory records arrive in (ConsumerConfig.RecordsValidUntilNextPoll), as an application that is done "+
			"with a record by its next poll can: fetched bytes then need no fresh memory. false measures the SDK's default, where records "+
			"are the application's to keep.")
	return cmd
}

// validate rejects flags that make no sense together before anything
// connects.
func (o *perfConsumeOptions) validate(cmd *cobra.Command) error {
	if o.topic == "" {
		return errors.New("--topic is required")
	}
	if o.messages < 1 {
		return errors.New("--messages must be at least 1")
	}
	if o.fetchMax < 1 {
		return errors.New("--fetch-max-bytes must be positive")
	}
	if o.idleTimeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	if o.group == "" {
		if cmd.Flags().Changed("group") {
			return errors.New("--group must name a group")
		}
		if o.groupProtocol != "" {
			return errors.New("--group-protocol needs --group")
		}
		return nil
	}
	if cmd.Flags().Changed("partition") {
		return errors.New("--group reads the partitions the group assigns; it cannot be combined with --partition")
	}
	if _, err := client.ParseGroupProtocol(o.groupProtocol); err != nil {
		return fmt.Errorf("--group-protocol: %w", err)
	}
	return nil
}

// perfReader is what perf consume reads with: the plain consumer on
// assigned partitions, or a group consumer.
type perfReader struct {
	poll func(context.Context) ([]*client.ConsumedRecord, error)
	// joined returns when the group first assigned partitions (zero
	// before, and always for the plain consumer).
	joined func() time.Time
	// close leaves the group, committing; its error counts as the run's.
	close func() error
}

func runPerfConsume(ctx context.Context, g *globals, o *perfConsumeOptions, progress io.Writer) (*perfSummary, error) {
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Metadata(ctx, o.topic); err != nil {
		return nil, err
	}
	ccfg := client.ConsumerConfig{Reset: client.ResetEarliest, PartitionMaxBytes: o.fetchMax, RecordsValidUntilNextPoll: o.reuseBuffers}
	start := time.Now()
	var rd perfReader
	if o.group != "" {
		rd, err = perfGroupReader(ctx, c, o, ccfg, g.timeout)
	} else {
		rd, err = perfAssignReader(ctx, c, o, ccfg)
	}
	if err != nil {
		return nil, err
	}
	var records, bytes atomic.Int64
	stopProgress := startProgress(progress, start, func() (int64, int64, int64) { return records.Load(), bytes.Load(), 0 }, nil)
	var first time.Duration
	last := start
	var pollErr error
	for records.Load() < o.messages {
		pctx, cancel := context.WithTimeout(ctx, o.idleTimeout)
		recs, err := rd.poll(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				stopProgress()
				_ = rd.close()
				return nil, ctx.Err()
			}
			pollErr = err
			break
		}
		if first == 0 && len(recs) > 0 {
			first = time.Since(start)
		}
		var b int64
		for _, r := range recs {
			b += int64(len(r.Key) + len(r.Value))
		}
		records.Add(int64(len(recs)))
		bytes.Add(b)
		last = time.Now()
	}
	stopProgress()
	closeErr := rd.close()
	var nerr int64
	var firstErr string
	if pollErr != nil {
		nerr, firstErr = 1, pollErr.Error()
	}
	if closeErr != nil {
		if nerr == 0 {
			firstErr = closeErr.Error()
		}
		nerr++
	}
	s := newPerfSummary("consume", o.topic, records.Load(), bytes.Load(), nerr, last.Sub(start))
	s.FirstError = firstErr
	fr := roundTo(first.Seconds(), 4)
	s.FirstRecordSec = &fr
	s.Config = map[string]any{"messages": o.messages, "partition": o.partition, "fetch_max_bytes": o.fetchMax}
	if o.group != "" {
		delete(s.Config, "partition")
		s.Config["group"] = o.group
		proto, _ := client.ParseGroupProtocol(o.groupProtocol) // validated
		s.Config["group_protocol"] = proto.String()
		if j := rd.joined(); !j.IsZero() {
			js := roundTo(j.Sub(start).Seconds(), 4)
			s.JoinSec = &js
			if fetch := last.Sub(j).Seconds(); fetch > 0 {
				s.FetchRecordsPerSec = roundTo(float64(records.Load())/fetch, 1)
				s.FetchMBPerSec = roundTo(float64(bytes.Load())/fetch/1e6, 2)
			}
		}
	}
	return s, nil
}

// perfAssignReader reads every partition of the topic, or --partition,
// from the earliest offset.
func perfAssignReader(ctx context.Context, c *client.Client, o *perfConsumeOptions, cfg client.ConsumerConfig) (perfReader, error) {
	k := c.NewConsumer(cfg)
	if o.partition >= 0 {
		k.Assign(client.TopicPartition{Topic: o.topic, Partition: o.partition})
	} else if err := k.AssignTopic(ctx, o.topic); err != nil {
		k.Close()
		return perfReader{}, err
	}
	return perfReader{poll: k.Poll, joined: func() time.Time { return time.Time{} }, close: func() error { k.Close(); return nil }}, nil
}

// perfGroupReader joins --group subscribed to the topic, with automatic
// commit and the earliest offset where the group has committed nothing.
func perfGroupReader(ctx context.Context, c *client.Client, o *perfConsumeOptions, cfg client.ConsumerConfig, closeTimeout time.Duration) (perfReader, error) {
	proto, err := client.ParseGroupProtocol(o.groupProtocol)
	if err != nil {
		return perfReader{}, fmt.Errorf("--group-protocol: %w", err)
	}
	var joined time.Time // written and read on Poll's goroutine
	gc, err := c.NewGroupConsumer(client.GroupConsumerConfig{
		GroupID: o.group, Topics: []string{o.topic}, Protocol: proto,
		AutoCommit: true, Reset: client.ResetEarliest, Consumer: cfg,
		OnAssigned: func(_ context.Context, tps []client.TopicPartition) {
			if joined.IsZero() && len(tps) > 0 {
				joined = time.Now()
			}
		},
	})
	if err != nil {
		return perfReader{}, err
	}
	return perfReader{poll: gc.Poll, joined: func() time.Time { return joined }, close: func() error {
		// The command's context may be canceled: the commit and the leave
		// get a context of their own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := gc.Close(cctx); err != nil {
			return fmt.Errorf("leaving the group (committing what was read): %w", err)
		}
		return nil
	}}, nil
}

type perfE2EOptions struct {
	perfTopicFlags
	numRecords  int64
	recordSize  int
	rate        float64
	acks        string
	idempotence bool
	linger      time.Duration
	batchSize   int
	maxWait     time.Duration
}

// e2eHeader is the part of each e2e value that carries the send time
// (Unix nanoseconds) and a sequence number.
const e2eHeader = 16

func newPerfE2ECmd(g *globals) *cobra.Command {
	o := &perfE2EOptions{}
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "e2e",
		Short: "Measure end-to-end latency (send to consumer receipt) at a fixed rate",
		Long: `Send --num-records records at --rate records/s and read them back with a
consumer in the same process that started at the end of the topic. Each value
begins with its send time (Unix nanoseconds), so the end-to-end latency is
the time from the send to the consumer's Poll returning it, on one clock.
Reports that latency and the produce acknowledgement latency.

--linger 0 sends each record at once (batches still form while a request is
in flight).`,
		Args: cobra.NoArgs,
		RunE: perfRunE(g, func(ctx context.Context, progress io.Writer) (*perfSummary, error) {
			return runPerfE2E(ctx, g, o, progress, cmd)
		}, func(s *perfSummary) error {
			return fmt.Errorf("%d records failed or were not received; first error: %s", s.Errors, s.FirstError)
		}),
	}
	o.register(cmd)
	f := cmd.Flags()
	f.Int64Var(&o.numRecords, "num-records", 100_000, "Records to send.")
	f.IntVar(&o.recordSize, "record-size", 1024, fmt.Sprintf("Value bytes of each record (at least %d).", e2eHeader))
	f.Float64Var(&o.rate, "rate", 10_000, "Records per second.")
	f.StringVar(&o.acks, "acks", "1", "Acknowledgement level: all, 1 or 0.")
	f.BoolVar(&o.idempotence, "idempotence", true, idempotenceUsage)
	f.DurationVar(&o.linger, "linger", 0, "How long a batch waits for more records; 0 sends at once.")
	f.IntVar(&o.batchSize, "batch-size", 64<<10, "Batch size in bytes (batch.size).")
	f.DurationVar(&o.maxWait, "drain-timeout", 15*time.Second, "How long to wait for the last records after sending.")
	return cmd
}

func runPerfE2E(ctx context.Context, g *globals, o *perfE2EOptions, progress io.Writer, cmd *cobra.Command) (*perfSummary, error) {
	acks, err := parseAcks(o.acks)
	if err != nil {
		return nil, err
	}
	disable, err := disableIdempotence(cmd, acks, o.idempotence)
	if err != nil {
		return nil, err
	}
	if o.recordSize < e2eHeader || o.rate <= 0 || o.numRecords < 1 {
		return nil, fmt.Errorf("--record-size must be at least %d, --rate and --num-records positive", e2eHeader)
	}
	pc, err := g.client()
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	if err := o.ensure(ctx, pc); err != nil {
		return nil, err
	}
	n, err := awaitLeaders(ctx, pc, o.topic, 30*time.Second)
	if err != nil {
		return nil, err
	}
	cc, err := g.client()
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	k := cc.NewConsumer(client.ConsumerConfig{Reset: client.ResetLatest})
	defer k.Close()
	if err := k.AssignTopic(ctx, o.topic); err != nil {
		return nil, err
	}
	// Start sending only once the consumer knows where the end is.
	for p := range n {
		tp := client.TopicPartition{Topic: o.topic, Partition: p}
		deadline := time.Now().Add(30 * time.Second)
		for k.Position(tp) < 0 {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the consumer found no position on %s-%d within 30 s", o.topic, p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	linger := o.linger
	if linger <= 0 {
		linger = time.Microsecond // the producer reads 0 as its default
	}
	p := pc.NewProducer(client.ProducerConfig{Acks: acks, Linger: linger, BatchBytes: o.batchSize, MaxInFlight: 5, DisableIdempotence: disable})
	defer func() { _ = p.Close(context.Background()) }() // flushed below; Close only stops it

	e2e, ack := newLatencyRecorder(), newLatencyRecorder()
	var failures errorCounter
	var received, receivedBytes atomic.Int64
	seen := make([]bool, o.numRecords)
	allIn := make(chan struct{})
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var cwg sync.WaitGroup
	cwg.Go(func() {
		for {
			recs, err := k.Poll(cctx)
			if err != nil {
				if cctx.Err() != nil {
					return
				}
				// The consumer retries by itself (a new topic's leader may
				// not know it leads yet); records that never arrive are
				// counted as errors at the end.
				fmt.Fprintf(progress, "consumer: %v\n", err)
				continue
			}
			now := time.Now()
			for _, r := range recs {
				if len(r.Value) < e2eHeader {
					continue
				}
				seq := int64(binary.BigEndian.Uint64(r.Value[8:]))
				if seq < 0 || seq >= o.numRecords || seen[seq] {
					continue
				}
				seen[seq] = true
				e2e.record(now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(r.Value)))))
				receivedBytes.Add(int64(len(r.Value) + len(r.Key)))
				if received.Add(1) == o.numRecords {
					close(allIn)
				}
			}
		}
	})

	var outstanding sync.WaitGroup
	start := time.Now()
	stopProgress := startProgress(progress, start, func() (int64, int64, int64) {
		nerr, _ := failures.get()
		return received.Load(), receivedBytes.Load(), nerr
	}, e2e)
	pace := pacer{start: start, rate: o.rate}
	for sent := int64(0); sent < o.numRecords && ctx.Err() == nil; {
		due := pace.due(time.Now(), o.numRecords)
		for ; sent < due; sent++ {
			v := make([]byte, o.recordSize)
			now := time.Now()
			binary.BigEndian.PutUint64(v, uint64(now.UnixNano()))
			binary.BigEndian.PutUint64(v[8:], uint64(sent))
			outstanding.Add(1)
			err := p.Produce(ctx, &client.Record{Topic: o.topic, Partition: -1, Value: v}, func(r client.Result) {
				if r.Err != nil {
					failures.add(r.Err)
				} else {
					ack.record(time.Since(now))
				}
				outstanding.Done()
			})
			if err != nil {
				outstanding.Done()
				failures.add(err)
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	sendElapsed := time.Since(start)
	if err := p.Flush(ctx); err != nil {
		failures.add(err)
	}
	outstanding.Wait()
	select {
	case <-allIn:
	case <-time.After(o.maxWait):
	case <-ctx.Done():
	}
	stopConsumer()
	cwg.Wait()
	stopProgress()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	nerr, first := failures.get()
	if missing := o.numRecords - received.Load(); missing > 0 {
		nerr += missing
		if first == "" {
			first = fmt.Sprintf("%d records not received within %v", missing, o.maxWait)
		}
	}
	s := newPerfSummary("e2e", o.topic, received.Load(), receivedBytes.Load(), nerr, sendElapsed)
	s.FirstError = first
	l, a := e2e.summary(), ack.summary()
	s.Latency, s.AckLatency = &l, &a
	s.Config = map[string]any{"num_records": o.numRecords, "record_size": o.recordSize, "rate": o.rate, "acks": o.acks,
		"linger": o.linger.String(), "batch_size": o.batchSize, "partitions": n}
	return s, nil
}

// awaitLeaders waits until every partition of a topic has a leader (a
// topic just created gets them within moments) and returns how many
// partitions it has.
func awaitLeaders(ctx context.Context, c *client.Client, topic string, timeout time.Duration) (int32, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, led, err := topicLeaders(ctx, c, topic)
		if err == nil && led == n && n > 0 {
			return n, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("%d of %d partitions of %s have a leader after %v", led, n, topic, timeout)
			}
			return 0, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// topicLeaders returns how many partitions a topic has and how many of them
// have a leader.
func topicLeaders(ctx context.Context, c *client.Client, topic string) (n, led int32, err error) {
	md, err := c.Metadata(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range md.GetTopics() {
		if t.GetName() != topic {
			continue
		}
		if t.GetError() != nil && t.GetError().GetCode() != 0 {
			return 0, 0, fmt.Errorf("topic %s: %s", topic, t.GetError().GetMessage())
		}
		for _, p := range t.GetPartitions() {
			if p.GetLeaderId() >= 0 {
				led++
			}
		}
		return int32(len(t.GetPartitions())), led, nil
	}
	return 0, 0, fmt.Errorf("topic %s does not exist", topic)
}
