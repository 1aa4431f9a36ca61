package cmd

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
)

func newProducersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "producers",
		Aliases: []string{"producer"},
		Short:   "Describe the producer state of partitions",
	}
	cmd.AddCommand(newProducersDescribeCmd(g))
	return cmd
}

func newProducersDescribeCmd(g *globals) *cobra.Command {
	var anyReplica bool
	var node int32
	cmd := &cobra.Command{
		Use:   "describe TOPIC PARTITION",
		Short: "List a partition's active producer ids: epoch, last sequence, last timestamp, open transaction, and the last stable offset",
		Long: `List the producer ids a partition keeps state for (KIP-664), as its leader
holds it: each producer's epoch, the sequence of its latest batch, the latest
timestamp it wrote (its producer id expires producer.id.expiration.ms after
it), the epoch of the transaction coordinator that wrote its latest marker,
and the first offset of its open transaction on the partition, if any. The
partition's last stable offset (LSO) is the first offset of its oldest open
transaction, or the high watermark if none is open: read_committed consumers
read up to it.

With --any-replica a follower may answer (when the leader is not available),
from its own copy of the log; with --node the replica on that node answers,
so replicas can be compared. Followers do not know the LSO.

  sluice producers describe orders 3
  sluice producers describe orders 3 --node 2`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			part, err := parsePartitionArg(args[1])
			if err != nil {
				return err
			}
			onNode := cmd.Flags().Changed("node")
			if onNode && anyReplica {
				return errors.New("--node names the replica to ask; --any-replica lets any answer: give one of them")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			var res *storagev1.DescribeProducersResult
			if onNode {
				res, err = c.DescribeProducersOn(cmd.Context(), args[0], part, node)
			} else {
				res, err = c.DescribeProducers(cmd.Context(), args[0], part, anyReplica)
			}
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), res, func(w io.Writer) error {
				writeProducers(w, res)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&anyReplica, "any-replica", false, "Let a follower answer from its own replica if the leader does not (followers do not know the LSO).")
	cmd.Flags().Int32Var(&node, "node", -1, "Ask the replica on this node id, leader or follower, to compare replicas.")
	return cmd
}

// parsePartitionArg reads a partition number argument.
func parsePartitionArg(s string) (int32, error) {
	p, err := strconv.ParseInt(s, 10, 32)
	if err != nil || p < 0 {
		return 0, fmt.Errorf("partition %q: want a partition number (0, 1, ...)", s)
	}
	return int32(p), nil
}

// writeProducers renders a partition's producer state: a summary line,
// then one row per producer id.
func writeProducers(w io.Writer, res *storagev1.DescribeProducersResult) {
	lso := "-"
	if res.GetLastStableOffset() >= 0 {
		lso = fmt.Sprint(res.GetLastStableOffset())
	}
	fmt.Fprintf(w, "Partition: %s-%d  Answered by: node %d  Last stable offset: %s  Producers: %d\n",
		res.GetPartition().GetTopic(), res.GetPartition().GetPartition(), res.GetNodeId(), lso, len(res.GetProducers()))
	if len(res.GetProducers()) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PRODUCER-ID\tEPOCH\tLAST-SEQUENCE\tLAST-TIMESTAMP\tCOORDINATOR-EPOCH\tTXN-START-OFFSET")
	for _, p := range res.GetProducers() {
		fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%d\t%s\n", p.GetProducerId(), p.GetProducerEpoch(), p.GetLastSequence(),
			timestampText(p.GetLastTimestampMs()), p.GetCoordinatorEpoch(), offsetText(p.GetCurrentTxnStartOffset()))
	}
}

// timestampText renders Unix milliseconds as UTC time, "-" when unset.
func timestampText(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
