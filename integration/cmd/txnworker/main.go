// Command txnworker is an exactly-once copier for the transaction tests: a
// member of a consumer group that reads an input topic and, for every poll,
// writes each record's key and value to an output topic and commits the
// consumed positions in the same transaction (read-process-write, KIP-98
// with KIP-447's group-metadata fencing).
//
// A transaction that fails is aborted and the worker exits with status 2, so
// that a restart reads from the committed positions again (the records it
// polled are not replayed in place); a fenced worker exits with status 3.
// It logs one JSON line per transaction outcome to --out:
//
//	{"kind":"commit"|"abort"|"fenced"|"prepared"|"start"|"exit","t":..,"records":..,"err":..}
//
// --pause-before-commit makes it sleep between sending its offsets and
// committing, so a test can SIGSTOP it with a transaction open.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

type line struct {
	Kind    string `json:"kind"`
	T       int64  `json:"t"`
	Records int    `json:"records,omitempty"`
	Err     string `json:"err,omitempty"`
}

type journal struct {
	mu sync.Mutex
	f  *os.File
}

func (j *journal) write(l line) {
	l.T = time.Now().UnixNano()
	b, _ := json.Marshal(l) // always marshals
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.Write(append(b, '\n')) // a lost line only loses diagnostics
}

type journalKey struct{}

func journalOf(ctx context.Context) *journal { return ctx.Value(journalKey{}).(*journal) }

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "txnworker:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	bootstrap := flag.String("bootstrap", "", "comma-separated addresses of Sluice nodes")
	group := flag.String("group", "", "consumer group id")
	in := flag.String("in", "", "input topic")
	out := flag.String("out-topic", "", "output topic")
	tid := flag.String("transactional-id", "", "transactional id")
	outPath := flag.String("out", "", "journal file")
	txnTimeout := flag.Duration("transaction-timeout", 10*time.Second, "transaction timeout")
	pause := flag.Duration("pause-before-commit", 0, "sleep this long before each commit")
	fetchBytes := flag.Int("fetch-bytes", 0, "bytes per partition per fetch chunk (a poll returns one chunk): bounds records per transaction")
	flag.Parse()
	if *bootstrap == "" || *group == "" || *in == "" || *out == "" || *tid == "" || *outPath == "" {
		return 1, errors.New("--bootstrap, --group, --in, --out-topic, --transactional-id and --out are required")
	}
	f, err := os.OpenFile(*outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1, err
	}
	defer f.Close()
	j := &journal{f: f}
	j.write(line{Kind: "start"})

	cl, err := client.New(client.Config{Bootstrap: strings.Split(*bootstrap, ",")})
	if err != nil {
		return 1, err
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	p := cl.NewProducer(client.ProducerConfig{TransactionalID: *tid, TransactionTimeout: *txnTimeout, Linger: 2 * time.Millisecond})
	defer func() { _ = p.Close(context.Background()) }()
	if err := p.InitTransactions(ctx); err != nil {
		return 1, fmt.Errorf("init transactions: %w", err)
	}
	g, err := cl.NewGroupConsumer(client.GroupConsumerConfig{
		GroupID: *group, Topics: []string{*in}, Reset: client.ResetEarliest,
		// read_committed also makes the group fetch its positions with
		// require_stable, so it never starts from offsets a transaction
		// is still committing.
		Consumer:       client.ConsumerConfig{ReadCommitted: true, PartitionMaxBytes: *fetchBytes},
		SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second,
	})
	if err != nil {
		return 1, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(cctx)
	}()

	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		recs, err := g.Poll(pctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			j.write(line{Kind: "abort", Err: "poll: " + err.Error()})
			return 2, err
		}
		if len(recs) == 0 {
			continue
		}
		if code, err := copyOnce(context.WithValue(ctx, journalKey{}, j), p, g, recs, *out, *pause); err != nil {
			kind := "abort"
			if code == 3 {
				kind = "fenced"
			}
			j.write(line{Kind: kind, Records: len(recs), Err: err.Error()})
			return code, err
		}
		j.write(line{Kind: "commit", Records: len(recs)})
	}
	j.write(line{Kind: "exit"})
	return 0, nil
}

// copyOnce copies records to the output topic and commits their positions
// in one transaction. On failure it aborts and says how to exit.
func copyOnce(ctx context.Context, p *client.Producer, g *client.GroupConsumer, recs []*client.ConsumedRecord, out string, pause time.Duration) (int, error) {
	if err := p.BeginTransaction(); err != nil {
		return exitCode(err), err
	}
	next := map[client.TopicPartition]int64{}
	for _, r := range recs {
		if err := p.Produce(ctx, &client.Record{Topic: out, Partition: -1, Key: r.Key, Value: r.Value}, nil); err != nil {
			return abort(ctx, p, err)
		}
		next[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	}
	if err := p.SendOffsetsToTransaction(ctx, next, g.GroupMetadata()); err != nil {
		return abort(ctx, p, err)
	}
	if pause > 0 {
		// Sent first, so the open transaction is on the output partitions
		// while the worker waits.
		if err := p.Flush(ctx); err != nil {
			return abort(ctx, p, err)
		}
		journalOf(ctx).write(line{Kind: "prepared", Records: len(recs)})
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
	if err := p.CommitTransaction(ctx); err != nil {
		return abort(ctx, p, err)
	}
	return 0, nil
}

func abort(ctx context.Context, p *client.Producer, cause error) (int, error) {
	if code := exitCode(cause); code == 3 {
		return code, cause
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.AbortTransaction(actx); err != nil {
		return exitCode(err), fmt.Errorf("%w; then abort: %v", cause, err)
	}
	return 2, cause
}

func exitCode(err error) int {
	switch errs.CodeOf(err) {
	case errs.ProducerFenced, errs.InvalidProducerEpoch:
		return 3
	}
	return 2
}
