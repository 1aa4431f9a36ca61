package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// copySpec is the read-process-write copy of the run: transactional
// producers copy the input topic into the output topic through one classic
// consumer group.
type copySpec struct {
	group, in, out string
}

// runner holds one run's state.
type runner struct {
	// ctx is Run's context: when it ends, the run is interrupted.
	ctx    context.Context
	cfg    Config
	cl     *client.Client
	rec    check.Recorder
	topics []string
	copy   *copySpec
	procs  atomic.Int32
	// lastCopy is when a copier last copied records (UnixNano).
	lastCopy atomic.Int64
}

func (r *runner) now() int64 { return time.Now().UnixNano() }

// process returns a new process number.
func (r *runner) process() int { return int(r.procs.Add(1)) }

func (r *runner) copied() { r.lastCopy.Store(r.now()) }

// partitions lists every partition of every topic.
func (r *runner) partitions() []client.TopicPartition {
	var out []client.TopicPartition
	for _, t := range r.topics {
		for p := range r.cfg.Partitions {
			out = append(out, client.TopicPartition{Topic: t, Partition: p})
		}
	}
	return out
}

// readTopics are the topics group consumers subscribe to: all of them.
func (r *runner) readTopics() []string { return r.topics }

// writeTopics returns the topics producers of a kind write to. The copy's
// output is written by copies only; plain producers, which may duplicate,
// stay off the copy's input too.
func (r *runner) writeTopics(plain bool) []string {
	var out []string
	for _, t := range r.topics {
		if r.copy != nil && (t == r.copy.out || plain && t == r.copy.in) {
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		out = r.topics[:1]
	}
	return out
}

// ConnectError is returned by Run when the cluster cannot be reached or
// refuses to set up the run (no topic could be created).
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return "verify: " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// setup connects, picks the replication factor and creates the topics.
func (r *runner) setup(ctx context.Context) error {
	cl, err := client.New(client.Config{Bootstrap: r.cfg.Bootstrap, RequestTimeout: 15 * time.Second,
		DialOptions: r.cfg.DialOptions})
	if err != nil {
		return &ConnectError{Err: fmt.Errorf("client: %w", err)}
	}
	r.cl = cl
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	desc, err := cl.DescribeCluster(dctx)
	cancel()
	if err != nil {
		return &ConnectError{Err: fmt.Errorf("describing the cluster at %v: %w", r.cfg.Bootstrap, err)}
	}
	brokers := len(desc.GetBrokers())
	if brokers == 0 {
		return &ConnectError{Err: fmt.Errorf("the cluster at %v has no storage nodes registered", r.cfg.Bootstrap)}
	}
	if r.cfg.ReplicationFactor == 0 {
		r.cfg.ReplicationFactor = int16(min(3, brokers))
	}
	if int(r.cfg.ReplicationFactor) > brokers {
		return fmt.Errorf("verify: replication factor %d needs %d storage nodes; the cluster has %d",
			r.cfg.ReplicationFactor, r.cfg.ReplicationFactor, brokers)
	}
	configs := map[string]string{}
	if r.cfg.ReplicationFactor >= 3 {
		configs["min.insync.replicas"] = "2"
	}
	maps.Copy(configs, r.cfg.TopicConfigs)
	for i := range r.cfg.Topics {
		name := fmt.Sprintf("%s%d", r.cfg.TopicPrefix, i)
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cl.CreateTopic(tctx, name, r.cfg.Partitions, int32(r.cfg.ReplicationFactor), configs)
		cancel()
		if errs.Is(err, errs.TopicAlreadyExists) {
			return fmt.Errorf("verify: topic %s exists already: pick another --seed or topic prefix", name)
		}
		if err != nil {
			return &ConnectError{Err: fmt.Errorf("creating topic %s: %w", name, err)}
		}
		r.topics = append(r.topics, name)
	}
	if r.cfg.Topics >= 3 && r.cfg.Producers.Transactional > 0 {
		r.copy = &copySpec{group: r.cfg.TopicPrefix + "copy", in: r.topics[0], out: r.topics[len(r.topics)-1]}
	}
	// Every partition has a leader that answers before the clock starts.
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := cl.ListOffsets(lctx, storagev1.OffsetSpec_OFFSET_SPEC_LATEST, -1, r.partitions()...); err != nil {
		return &ConnectError{Err: fmt.Errorf("waiting for the new topics' leaders: %w", err)}
	}
	return nil
}

// Run runs the workload against the cluster for cfg.Duration, then the
// quiet phase and the final reads, checks the history and writes the
// report files in cfg.Out. The error is about the run (bad config, cluster
// unreachable (a *ConnectError), files not written); anomalies are in the
// Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &runner{ctx: ctx, cfg: cfg}
	defer func() {
		if r.cl != nil {
			_ = r.cl.Close() // the run is over; nothing is in flight
		}
	}()
	log := cfg.Logger
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	cfg = r.cfg
	log.Info("verify: topics created", slog.Any("topics", r.topics), slog.Int("partitions", int(cfg.Partitions)),
		slog.Int("replication_factor", int(cfg.ReplicationFactor)), slog.Int64("seed", cfg.Seed))

	start := time.Now()
	work, stopWork := context.WithTimeout(ctx, cfg.Duration)
	defer stopWork()
	if cfg.StopEarly != nil {
		go func() {
			select {
			case <-cfg.StopEarly:
				log.Info("verify: stopping the workload early; checking what ran")
				stopWork()
			case <-work.Done():
			}
		}()
	}
	readers, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	drain, stopDrain := context.WithCancel(ctx)
	defer stopDrain()

	// Readers first, so they are in their groups when records arrive.
	var readWG, prodWG sync.WaitGroup
	goRun := func(wg *sync.WaitGroup, f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	for range cfg.Consumers.AssignCommitted {
		proc := r.process()
		goRun(&readWG, func() { r.runAssigned(readers, proc, true) })
	}
	for range cfg.Consumers.AssignUncommitted {
		proc := r.process()
		goRun(&readWG, func() { r.runAssigned(readers, proc, false) })
	}
	var groups []string
	for _, gs := range []struct {
		n        int
		protocol client.GroupProtocol
	}{{cfg.Consumers.ClassicGroup, client.GroupProtocolClassic}, {cfg.Consumers.ConsumerGroup, client.GroupProtocolConsumer}} {
		if gs.n == 0 {
			continue
		}
		name := cfg.TopicPrefix + gs.protocol.String()
		groups = append(groups, name)
		for range gs.n {
			proc := r.process()
			goRun(&readWG, func() { r.runGroup(readers, name, gs.protocol, proc) })
		}
	}
	if r.copy != nil {
		groups = append(groups, r.copy.group)
	}
	fetcher := r.process()
	goRun(&readWG, func() { r.watchOffsets(readers, fetcher, groups) })

	p := cfg.Producers
	producers := p.Plain + p.Idempotent + p.Transactional
	share := float64(cfg.Rate) / float64(max(producers, 1))
	for range p.Plain {
		proc := r.process()
		goRun(&prodWG, func() { r.runPlain(work, proc, false, share, r.writeTopics(true)) })
	}
	for range p.Idempotent {
		proc := r.process()
		goRun(&prodWG, func() { r.runPlain(work, proc, true, share, r.writeTopics(false)) })
	}
	var txnWG sync.WaitGroup
	for i := range p.Transactional {
		proc := r.process()
		goRun(&txnWG, func() { r.runTxn(work, drain, proc, i, share, r.writeTopics(false)) })
	}

	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.progress(work, start)
	}()
	<-work.Done()
	end := time.Now()
	<-progressDone
	if ctx.Err() != nil {
		// Interrupted: every client stops (producers and transactions
		// end quickly, see closeTimeout) before the error goes back.
		stopDrain()
		stopReaders()
		prodWG.Wait()
		txnWG.Wait()
		readWG.Wait()
		return nil, fmt.Errorf("verify: interrupted before the checks: %w", ctx.Err())
	}
	log.Info("verify: workload done; quiet phase: ending transactions and draining the copy")
	prodWG.Wait()
	r.waitDrain(drain, stopDrain)
	txnWG.Wait()
	// Readers get a moment to catch up, then leave their groups.
	sleep(ctx, 2*time.Second)
	stopReaders()
	readWG.Wait()

	if err := r.final(ctx); err != nil {
		return nil, err
	}
	h := r.rec.History()
	if cfg.Faults != nil {
		h.Faults = append(h.Faults, cfg.Faults.Faults()...)
	}
	rep, err := checkHistory(h, cfg.Seed, start, end)
	if err != nil {
		return nil, err
	}
	if cfg.Out != "" {
		if err := rep.write(cfg.Out, h); err != nil {
			return rep, err
		}
	}
	log.Info("verify: " + rep.Verdict())
	return rep, nil
}

// progress logs a line every five seconds while the workload runs.
func (r *runner) progress(ctx context.Context, start time.Time) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := r.rec.History()
		ops := countOps(h)
		var ok, failed, info int
		for _, k := range writeOps {
			ok, failed, info = ok+ops[k].OK, failed+ops[k].Fail, info+ops[k].Info
		}
		r.cfg.Logger.Info("verify: progress", slog.Duration("elapsed", time.Since(start).Round(time.Second)),
			slog.Int("writes_ok", ok), slog.Int("writes_fail", failed), slog.Int("writes_info", info),
			slog.Int("polls", len(h.Polls)), slog.Int("generations", len(h.Generations)))
	}
}

// waitDrain lets the copiers run until none copied anything for two
// seconds (at most 20 s), then ends the drain.
func (r *runner) waitDrain(drain context.Context, stop context.CancelFunc) {
	defer stop()
	if r.copy == nil {
		return
	}
	r.copied()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && drain.Err() == nil {
		if time.Since(time.Unix(0, r.lastCopy.Load())) > 2*time.Second {
			return
		}
		sleep(drain, 200*time.Millisecond)
	}
}

// final waits for every partition to answer, fetches the groups' final
// offsets, and reads every partition from offset 0 to its end with both
// isolation levels (Poll.Final).
func (r *runner) final(ctx context.Context) error {
	tps := r.partitions()
	var ends map[client.TopicPartition]int64
	deadline := time.Now().Add(90 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		var err error
		ends, err = r.cl.ListOffsets(lctx, storagev1.OffsetSpec_OFFSET_SPEC_LATEST, -1, tps...)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return &ConnectError{Err: fmt.Errorf("the cluster did not answer for the final reads: %w", err)}
		}
		r.cfg.Logger.Warn("verify: waiting for the cluster before the final reads", slog.Any("err", err))
		sleep(ctx, time.Second)
	}
	proc := r.process()
	var copyCommitted map[client.TopicPartition]int64
	if r.copy != nil {
		// Every copy transaction has ended; the fetch answers stable
		// offsets once the markers are in (a transaction left open by a
		// lost producer is aborted at its timeout).
		deadline := time.Now().Add(30 * time.Second)
		for {
			var err error
			copyCommitted, err = r.fetchOffsets(ctx, proc, r.copy.group)
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			sleep(ctx, 500*time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	var rc check.Poll
	for _, readCommitted := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := r.finalRead(ctx, readCommitted, tps, ends)
			if readCommitted {
				rc = p
			}
			r.rec.Poll(p)
		}()
	}
	wg.Wait()
	if r.copy != nil && copyCommitted != nil {
		// Every committed input record below the group's committed offset
		// has been copied; the ones above are still to copy.
		var input []string
		seen := map[string]bool{}
		for _, rd := range rc.Reads {
			tp := client.TopicPartition{Topic: rd.Topic, Partition: rd.Partition}
			if rd.Topic != r.copy.in || rd.Offset >= copyCommitted[tp] || seen[rd.Value] {
				continue
			}
			seen[rd.Value] = true
			input = append(input, rd.Value)
		}
		r.rec.Copy(check.Copy{Input: input, Output: r.copy.out, Map: copyValueInput})
	}
	return nil
}

// finalRead reads every partition from 0 to ends with one consumer and
// returns it as one final poll; partitions not read to their end within a
// minute are left out of Ends, so they are judged by what was read only.
func (r *runner) finalRead(ctx context.Context, readCommitted bool, tps []client.TopicPartition, ends map[client.TopicPartition]int64) check.Poll {
	proc := r.process()
	k := r.cl.NewConsumer(client.ConsumerConfig{ReadCommitted: readCommitted, Reset: client.ResetEarliest})
	defer k.Close()
	k.Assign(tps...)
	p := check.Poll{Process: proc, Start: r.now(), Isolation: isolationOf(readCommitted), Final: true}
	for _, tp := range tps {
		k.Seek(tp, 0)
		p.Seeks = append(p.Seeks, check.Position{Topic: tp.Topic, Partition: tp.Partition, Offset: 0})
	}
	done := func() bool {
		for _, tp := range tps {
			if k.Position(tp) < ends[tp] {
				return false
			}
		}
		return true
	}
	truncated := map[client.TopicPartition]bool{}
	deadline := time.Now().Add(time.Minute)
	for !done() && time.Now().Before(deadline) && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		recs, err := k.Poll(pctx)
		cancel()
		var trunc *client.TruncationError
		if errors.As(err, &trunc) {
			// The consumer jumped to a position of its choosing: this
			// partition's reads are no full read from 0.
			truncated[client.TopicPartition{Topic: trunc.Topic, Partition: trunc.Partition}] = true
			r.cfg.Logger.Warn("verify: log truncated under the final read", slog.String("topic", trunc.Topic), slog.Int("partition", int(trunc.Partition)))
		}
		p.Reads = append(p.Reads, readsOf(recs)...)
	}
	p.End = r.now()
	for _, tp := range tps {
		if pos := k.Position(tp); pos >= ends[tp] && !truncated[tp] {
			p.Ends = append(p.Ends, check.Position{Topic: tp.Topic, Partition: tp.Partition, Offset: pos})
		} else {
			r.cfg.Logger.Warn("verify: final read did not reach the end", slog.String("isolation", isolationOf(readCommitted).String()),
				slog.String("topic", tp.Topic), slog.Int("partition", int(tp.Partition)), slog.Int64("position", pos), slog.Int64("end", ends[tp]))
		}
	}
	return p
}
