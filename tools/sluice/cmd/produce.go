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

func parseCodec(s string) (record.Codec, error) {
	if c, ok := record.ParseCodec(s); ok {
		return c, nil
	}
	return 0, fmt.Errorf("--compression must be none, gzip, snappy, lz4 or zstd, got %q", s)
}

func newProduceCmd(g *globals) *cobra.Command {
	var acks, sep, compression string
	var partition int32
	var linger time.Duration
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per line of standard input",
		Long: `Produce one record per line of standard input. With --key-separator, the
text before the first separator is the record key. Exits non-zero if any
record was not acknowledged.

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
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			p := c.NewProducer(client.ProducerConfig{Acks: a, Compression: codec, Linger: linger, BatchBytes: 256 << 10})
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
