package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/record"
)

func parseAcks(s string) (client.Acks, error) {
	switch s {
	case "all", "-1":
		return client.AcksAll, nil
	case "1":
		return client.AcksLeader, nil
	case "0":
		return client.AcksNone, nil
	}
	return 0, fmt.Errorf("--acks must be all, 1 or 0, got %q", s)
}

// disableIdempotence resolves --idempotence against --acks as Kafka's
// producer does (KAFKA-13598): the producer is idempotent by default;
// --acks 0 or 1 without --idempotence turns idempotence off (noted on
// standard error when --acks was given), and together with an explicit
// --idempotence is an error, since idempotence needs every in-sync
// replica's acknowledgement.
func disableIdempotence(cmd *cobra.Command, acks client.Acks, idempotence bool) (bool, error) {
	if !idempotence || acks == client.AcksAll {
		return !idempotence, nil
	}
	if cmd.Flags().Changed("idempotence") {
		return false, fmt.Errorf("--idempotence needs --acks all; pass --idempotence=false to produce with --acks %s", cmd.Flag("acks").Value)
	}
	if cmd.Flags().Changed("acks") {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: --acks %s turns idempotence off (it needs --acks all)\n", cmd.Flag("acks").Value)
	}
	return true, nil
}

// idempotenceUsage is the help of the --idempotence flag.
const idempotenceUsage = "Idempotent producer (enable.idempotence): a retried batch is written once and order holds across retries. Needs --acks all; --acks 0 or 1 alone turns it off."

func parseCodec(s string) (record.Codec, error) {
	if c, ok := record.ParseCodec(s); ok {
		return c, nil
	}
	return 0, fmt.Errorf("--compression must be none, gzip, snappy, lz4 or zstd, got %q", s)
}

func newProduceCmd(g *globals) *cobra.Command {
	var acks, sep, compression string
	var idempotence bool
	var partition int32
	var linger time.Duration
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per line of standard input",
		Long: `Produce one record per line of standard input. With --key-separator, the
text before the first separator is the record key. Exits non-zero if any
record was not acknowledged.

The producer is idempotent by default, as Kafka's: a batch retried after a
lost answer or a leader change is written once, and each partition keeps the
order of standard input across retries. --idempotence=false turns that off;
so does --acks 0 or 1, which idempotence cannot work with.

  seq 1 100000 | sluice produce orders --acks all`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseAcks(acks)
			if err != nil {
				return err
			}
			codec, err := parseCodec(compression)
			if err != nil {
				return err
			}
			disable, err := disableIdempotence(cmd, a, idempotence)
			if err != nil {
				return err
			}
			cfg := client.ProducerConfig{Acks: a, Compression: codec, Linger: linger, BatchBytes: 256 << 10, DisableIdempotence: disable}
			if err := cfg.Validate(); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			p := c.NewProducer(cfg)
			ctx := cmd.Context()
			var failed, acked atomic.Int64
			var firstErr error
			var once sync.Once
			cb := func(r client.Result) {
				if r.Err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = r.Err })
					return
				}
				acked.Add(1)
			}
			sc := bufio.NewScanner(cmd.InOrStdin())
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			n := 0
			for sc.Scan() {
				line := sc.Bytes()
				rec := &client.Record{Topic: args[0], Partition: partition}
				if sep != "" {
					if k, v, ok := bytes.Cut(line, []byte(sep)); ok {
						rec.Key = append([]byte(nil), k...)
						line = v
					}
				}
				rec.Value = append([]byte(nil), line...)
				if err := p.Produce(ctx, rec, cb); err != nil {
					_ = p.Close(context.Background()) // reporting the produce error
					return err
				}
				n++
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading standard input: %w", err)
			}
			if err := p.Close(ctx); err != nil {
				return err
			}
			if g.output == "json" {
				return printJSONLine(cmd.OutOrStdout(), map[string]any{"records": n, "acknowledged": acked.Load(), "failed": failed.Load()})
			}
			if failed.Load() > 0 {
				return fmt.Errorf("%d of %d records were not acknowledged; first error: %w", failed.Load(), n, firstErr)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d records acknowledged\n", acked.Load())
			return nil
		},
	}
	cmd.Flags().StringVar(&acks, "acks", "all", "Acknowledgement level: all, 1 or 0.")
	cmd.Flags().BoolVar(&idempotence, "idempotence", true, idempotenceUsage)
	cmd.Flags().StringVar(&sep, "key-separator", "", "Split each line into key and value at the first occurrence of this separator.")
	cmd.Flags().Int32Var(&partition, "partition", -1, "Partition to produce to; -1 lets the partitioner choose (by key hash, or sticky without a key).")
	cmd.Flags().StringVar(&compression, "compression", "none", "Batch compression: none, gzip, snappy, lz4 or zstd.")
	cmd.Flags().DurationVar(&linger, "linger", 5*time.Millisecond, "How long a batch waits for more records.")
	return cmd
}

func printJSONLine(w io.Writer, v map[string]any) error {
	var sb strings.Builder
	sb.WriteString("{")
	first := true
	for _, k := range []string{"records", "acknowledged", "failed"} {
		if !first {
			sb.WriteString(",")
		}
		first = false
		fmt.Fprintf(&sb, "%q:%v", k, v[k])
	}
	sb.WriteString("}\n")
	_, err := io.WriteString(w, sb.String())
	return err
}
