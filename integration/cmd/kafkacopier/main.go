// Command kafkacopier is an exactly-once copier written against the Kafka
// protocol with franz-go, for the Kafka-listener transaction tests: a
// kgo.GroupTransactSession that reads an input topic read_committed and,
// for every poll, writes each record's key and value to an output topic
// and commits the consumed offsets in the same transaction.
//
// A transaction that fails is aborted and the copier exits with status 2,
// so that a restart reads from the committed offsets again. It logs one
// JSON line per transaction outcome to --out:
//
//	{"kind":"start"|"commit"|"abort"|"group-error"|"exit","t":..,"records":..,"err":..}
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

	"github.com/twmb/franz-go/pkg/kgo"
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

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkacopier:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	bootstrap := flag.String("bootstrap", "", "comma-separated Kafka addresses of Sluice processes")
	group := flag.String("group", "", "consumer group id")
	in := flag.String("in", "", "input topic")
	out := flag.String("out-topic", "", "output topic")
	tid := flag.String("transactional-id", "", "transactional id")
	outPath := flag.String("out", "", "journal file")
	txnTimeout := flag.Duration("transaction-timeout", 10*time.Second, "transaction timeout")
	maxPoll := flag.Int("max-poll-records", 500, "records per transaction at most")
	logLevel := flag.String("log-level", "info", "franz-go's log level on stderr: none, error, warn, info or debug")
	flag.Parse()
	if *bootstrap == "" || *group == "" || *in == "" || *out == "" || *tid == "" || *outPath == "" {
		return 1, errors.New("--bootstrap, --group, --in, --out-topic, --transactional-id and --out are required")
	}
	if *maxPoll <= 0 {
		return 1, fmt.Errorf("--max-poll-records %d must be positive", *maxPoll)
	}
	levels := map[string]kgo.LogLevel{"none": kgo.LogLevelNone, "error": kgo.LogLevelError, "warn": kgo.LogLevelWarn, "info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug}
	level, ok := levels[*logLevel]
	if !ok {
		return 1, fmt.Errorf("--log-level %q is not one of none, error, warn, info, debug", *logLevel)
	}
	f, err := os.OpenFile(*outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1, err
	}
	defer f.Close()
	j := &journal{f: f}
	j.write(line{Kind: "start"})

	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.TransactionalID(*tid),
		kgo.TransactionTimeout(*txnTimeout),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Offsets committed by a transaction still writing its markers
		// are not handed out (KIP-447): the copier never starts from
		// offsets that may yet be aborted.
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(10*time.Second),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, nil)),
	)
	if err != nil {
		return 1, err
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := s.PollRecords(pctx, *maxPoll)
		cancel()
		if ctx.Err() != nil {
			break
		}
		var fetchErr error
		fetches.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			case topic == "":
				// A group-management error (a join or heartbeat that
				// failed): the client rejoins by itself.
				j.write(line{Kind: "group-error", Err: err.Error()})
			default:
				fetchErr = fmt.Errorf("fetching %s-%d: %w", topic, p, err)
			}
		})
		if fetchErr != nil {
			j.write(line{Kind: "abort", Err: fetchErr.Error()})
			return 2, fetchErr
		}
		n := fetches.NumRecords()
		if n == 0 {
			continue
		}
		committed, err := copyOnce(ctx, s, fetches, *out)
		switch {
		case err != nil:
			j.write(line{Kind: "abort", Records: n, Err: err.Error()})
			return 2, err
		case !committed:
			// Aborted (a rebalance, a failed record or offset commit):
			// the session rewound to the committed offsets.
			j.write(line{Kind: "abort", Records: n})
		default:
			j.write(line{Kind: "commit", Records: n})
		}
	}
	j.write(line{Kind: "exit"})
	return 0, nil
}

// copyOnce copies the polled records and commits their offsets in one
// transaction. It reports whether the transaction committed; an error means
// the transactional producer cannot go on.
func copyOnce(ctx context.Context, s *kgo.GroupTransactSession, fetches kgo.Fetches, out string) (bool, error) {
	if err := s.Begin(); err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	fetches.EachRecord(func(r *kgo.Record) {
		// A record that fails makes End abort; nothing to do per record.
		s.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, nil)
	})
	committed, err := s.End(ctx, kgo.TryCommit)
	if err != nil {
		return false, fmt.Errorf("end: %w", err)
	}
	return committed, nil
}
