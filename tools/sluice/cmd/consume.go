package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/client"
)

func newConsumeCmd(g *globals) *cobra.Command {
	var fromBeginning bool
	var partition int32
	var offset int64
	var maxMessages int
	var timeout time.Duration
	var format string
	var group, groupProtocol, assignor string
	var isolation string
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print records of a topic, one per line",
		Long: `Print records of a topic, one value per line by default. --format is a template
in the style of kcat, with %k key, %v value, %p partition, %o offset,
%T timestamp (ms), %h headers, %t topic, %% a percent sign, \n and \t.

  sluice consume orders --from-beginning --max-messages 100000
  sluice consume orders --format '%p:%o %k=%v\n'
  sluice consume orders --group billing --from-beginning

With --group the command joins the consumer group and reads the partitions
the group gives it, from the group's committed offsets; --from-beginning then
means "from the earliest offset where the group has committed nothing" (as
Kafka's console consumer), otherwise such partitions start at the end. It
commits the offsets of what it printed as it goes and before it exits, on
Ctrl-C, --max-messages or --timeout.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var readCommitted bool
			switch isolation {
			case "read_committed":
				readCommitted = true
			case "read_uncommitted":
			default:
				return fmt.Errorf("--isolation-level %q: want read_committed or read_uncommitted", isolation)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if group != "" {
				if partition >= 0 || offset >= 0 {
					return errors.New("--group reads the partitions the group assigns; it cannot be combined with --partition or --offset")
				}
				return consumeGroup(cmd, g, c, args[0], groupOptions{
					group: group, protocol: groupProtocol, assignor: assignor, fromBeginning: fromBeginning, readCommitted: readCommitted,
					maxMessages: maxMessages, timeout: timeout, format: format,
				})
			}
			if groupProtocol != "" || assignor != "" {
				return errors.New("--group-protocol and --assignor need --group")
			}
			reset := client.ResetLatest
			switch {
			case partition >= 0 && offset >= 0:
				// An explicit offset outside the log is an error to show
				// (OFFSET_OUT_OF_RANGE with the valid range), not a reason
				// to jump elsewhere and wait.
				reset = client.ResetNone
			case fromBeginning:
				reset = client.ResetEarliest
			}
			k := c.NewConsumer(client.ConsumerConfig{Reset: reset, ReadCommitted: readCommitted})
			defer k.Close()
			ctx := cmd.Context()
			if partition >= 0 {
				tp := client.TopicPartition{Topic: args[0], Partition: partition}
				k.Assign(tp)
				if offset >= 0 {
					k.Seek(tp, offset)
				}
			} else {
				if err := k.AssignTopic(ctx, args[0]); err != nil {
					return err
				}
				if offset >= 0 {
					return errors.New("--offset needs --partition")
				}
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer w.Flush()
			tmpl := format
			if tmpl == "" {
				tmpl = `%v\n`
			}
			n := 0
			for maxMessages <= 0 || n < maxMessages {
				recs, err := k.Poll(ctx)
				var trunc *client.TruncationError
				switch {
				case errors.As(err, &trunc):
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", err)
					continue
				case err != nil && ctx.Err() != nil:
					if timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
						w.Flush()
						if maxMessages > 0 {
							return fmt.Errorf("timed out after %v with %d of %d records", timeout, n, maxMessages)
						}
						return nil
					}
					return nil
				case err != nil:
					return err
				}
				for _, r := range recs {
					if maxMessages > 0 && n >= maxMessages {
						break
					}
					writeRecord(w, tmpl, r)
					n++
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&fromBeginning, "from-beginning", false, "Start at the earliest offset instead of the end.")
	cmd.Flags().StringVar(&isolation, "isolation-level", "read_uncommitted", "read_committed: only records of committed transactions, up to the last stable offset; read_uncommitted: every record.")
	cmd.Flags().Int32Var(&partition, "partition", -1, "Read only this partition.")
	cmd.Flags().Int64Var(&offset, "offset", -1, "Start at this offset (needs --partition).")
	cmd.Flags().IntVar(&maxMessages, "max-messages", 0, "Stop after this many records (0: run until Ctrl-C or --timeout).")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "Stop after this long (0: no limit).")
	cmd.Flags().StringVar(&format, "format", "", `Output template (default "%v\n").`)
	cmd.Flags().StringVar(&group, "group", "", "Consume as a member of this consumer group, committing what was printed.")
	cmd.Flags().StringVar(&groupProtocol, "group-protocol", "", "Group rebalance protocol: classic (default) or consumer (KIP-848).")
	cmd.Flags().StringVar(&assignor, "assignor", "", "Classic protocol: comma-separated assignors (range, roundrobin, sticky, cooperative-sticky; default range,cooperative-sticky). Consumer protocol: the server assignor (uniform or range).")
	return cmd
}

// writeRecord renders a record through a kcat-style template.
func writeRecord(w io.Writer, tmpl string, r *client.ConsumedRecord) {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		ch := tmpl[i]
		if ch == '\\' && i+1 < len(tmpl) {
			switch tmpl[i+1] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(tmpl[i+1])
			}
			i++
			continue
		}
		if ch != '%' || i+1 >= len(tmpl) {
			b.WriteByte(ch)
			continue
		}
		i++
		switch tmpl[i] {
		case 'k':
			b.Write(r.Key)
		case 'v':
			b.Write(r.Value)
		case 'p':
			b.WriteString(strconv.Itoa(int(r.Partition)))
		case 'o':
			b.WriteString(strconv.FormatInt(r.Offset, 10))
		case 'T':
			b.WriteString(strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
		case 't':
			b.WriteString(r.Topic)
		case 'h':
			for j, h := range r.Headers {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(h.Key)
				b.WriteByte('=')
				b.Write(h.Value)
			}
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(tmpl[i])
		}
	}
	_, _ = io.WriteString(w, b.String()) // a broken pipe ends the command anyway
}
