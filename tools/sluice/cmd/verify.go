package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/verify"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// Exit statuses of `sluice verify`.
const (
	verifyAnomalies = 1 // the history has anomalies
	verifyUsage     = 2 // bad flags, unreachable cluster, unreadable file
)

func newVerifyCmd(g *globals) *cobra.Command {
	var (
		against, out, checkOnly, producers, consumers, acks string
		duration                                            time.Duration
		seed                                                int64
		topics, rate                                        int
		partitions                                          int32
		rf                                                  int16
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Run a checked workload against a cluster and report anomalies",
		Long: `Runs producers (plain, idempotent, transactional with read-process-write
copies) and consumers (assigned with both isolation levels, group members of
both protocols) against a cluster for --duration, records every operation,
reads every partition to its end, and checks the history for lost writes,
duplicates, aborted or torn reads, offset and ownership anomalies.

Writes summary.txt (verdict first), result.json, history.json and
timeline.svg into --out. Exit status: 0 valid, 1 anomalies, 2 usage or
connection error.

  sluice verify --against 127.0.0.1:9090 --duration 60s
  sluice verify --check-only verify-20261201-103000/history.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if checkOnly != "" {
				return verifyCheckOnly(cmd.OutOrStdout(), g.output, checkOnly, out)
			}
			cfg := verify.Config{Duration: duration, Seed: seed, Topics: topics, Partitions: partitions,
				ReplicationFactor: rf, Acks: acks, Rate: rate, Out: out}
			if against == "" {
				against = g.bootstrap
			}
			for _, a := range strings.Split(against, ",") {
				if a = strings.TrimSpace(a); a != "" {
					cfg.Bootstrap = append(cfg.Bootstrap, a)
				}
			}
			var err error
			if cfg.Producers, err = parseProducers(producers); err != nil {
				return usageError(err)
			}
			if cfg.Consumers, err = parseConsumers(consumers); err != nil {
				return usageError(err)
			}
			if cfg.Out == "" {
				cfg.Out = "verify-" + time.Now().UTC().Format("20060102-150405")
			}
			cfg.Logger = progressLogger(cmd.ErrOrStderr())
			fmt.Fprintf(cmd.ErrOrStderr(), "verify: against %s for %s, report in %s\n", strings.Join(cfg.Bootstrap, ","), duration, cfg.Out)
			// The first Ctrl-C ends the workload early and still checks and
			// reports what ran; a second one abandons the run.
			ctx, abandon := context.WithCancel(context.Background())
			defer abandon()
			stopEarly := make(chan struct{})
			cfg.StopEarly = stopEarly
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			go func() {
				select {
				case <-sigs:
				case <-ctx.Done():
					return
				}
				fmt.Fprintln(cmd.ErrOrStderr(), "verify: interrupted: ending the workload and checking what ran (interrupt again to abandon the run)")
				close(stopEarly)
				select {
				case <-sigs:
					abandon()
				case <-ctx.Done():
				}
			}()
			rep, err := verify.Run(ctx, cfg)
			if err != nil {
				return &exitError{code: verifyUsage, err: err}
			}
			return printVerdict(cmd.OutOrStdout(), g.output, rep)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	f := cmd.Flags()
	f.StringVar(&against, "against", "", "Comma-separated addresses of the cluster to verify (default: --bootstrap).")
	f.DurationVar(&duration, "duration", 60*time.Second, "How long the workload runs, before the quiet phase and the final reads.")
	f.Int64Var(&seed, "seed", 0, "Seed of the workload's random choices and topic names (default: the time).")
	f.StringVar(&out, "out", "", "Directory for the report files (default ./verify-<time>); with --check-only, where to write the new report (default: none).")
	f.StringVar(&producers, "producers", "plain=1,idempotent=2,transactional=2", "Producer mix.")
	f.StringVar(&consumers, "consumers", "assign-committed=1,assign-uncommitted=1,classic=2,consumer=2", "Consumer mix.")
	f.IntVar(&topics, "topics", 3, "Number of topics.")
	f.Int32Var(&partitions, "partitions", 3, "Partitions per topic.")
	f.Int16Var(&rf, "rf", 0, "Replication factor (default min(3, storage nodes)); 3 or more sets min.insync.replicas=2.")
	f.IntVar(&rate, "rate", 500, "Records per second, over all producers together.")
	f.StringVar(&acks, "acks", "all", "Acks of the plain producers: all, 1 (the leader alone) or 0; idempotent and transactional producers always use all.")
	f.StringVar(&checkOnly, "check-only", "", "Check a saved history.json instead of running a workload.")
	return cmd
}

// exitError ends the CLI with a status other than 1; err (if any) is
// printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{code: verifyUsage, err: err} }

// verifyCheckOnly re-checks a saved history.
func verifyCheckOnly(w io.Writer, format, path, out string) error {
	f, err := os.Open(path)
	if err != nil {
		return usageError(err)
	}
	defer f.Close()
	h, err := check.ReadHistory(f)
	if err != nil {
		return usageError(fmt.Errorf("reading %s: %w", path, err))
	}
	rep, err := verify.CheckHistory(h, out)
	if err != nil {
		return usageError(err)
	}
	return printVerdict(w, format, rep)
}

// printVerdict prints the summary (verdict first) and where the files are,
// or with --output json the report as result.json holds it; anomalies end
// the CLI with status 1.
func printVerdict(w io.Writer, format string, rep *verify.Report) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(w, rep.Summary())
		if rep.Files.Summary != "" {
			fmt.Fprintf(w, "\nreport: %s %s %s %s\n", rep.Files.Summary, rep.Files.Result, rep.Files.History, rep.Files.Timeline)
		}
	}
	if !rep.Valid() {
		return &exitError{code: verifyAnomalies}
	}
	return nil
}

// progressLogger prints the run's progress lines without timestamps.
func progressLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
}

// parseMix parses "name=n,name=n" into counts for the names allowed.
func parseMix(flag, s string, names []string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, num, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--%s %q: want name=count, names %s", flag, part, strings.Join(names, ", "))
		}
		found := false
		for _, n := range names {
			found = found || n == name
		}
		if !found {
			return nil, fmt.Errorf("--%s: unknown kind %q; want %s", flag, name, strings.Join(names, ", "))
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > 64 {
			return nil, fmt.Errorf("--%s %s: count %q is not a number from 0 to 64", flag, name, num)
		}
		out[name] = n
	}
	total := 0
	for _, n := range out {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("--%s %q: at least one count must be above 0", flag, s)
	}
	return out, nil
}

func parseProducers(s string) (verify.Producers, error) {
	m, err := parseMix("producers", s, []string{"plain", "idempotent", "transactional"})
	if err != nil {
		return verify.Producers{}, err
	}
	return verify.Producers{Plain: m["plain"], Idempotent: m["idempotent"], Transactional: m["transactional"]}, nil
}

func parseConsumers(s string) (verify.Consumers, error) {
	m, err := parseMix("consumers", s, []string{"assign-committed", "assign-uncommitted", "classic", "consumer"})
	if err != nil {
		return verify.Consumers{}, err
	}
	return verify.Consumers{AssignCommitted: m["assign-committed"], AssignUncommitted: m["assign-uncommitted"],
		ClassicGroup: m["classic"], ConsumerGroup: m["consumer"]}, nil
}
