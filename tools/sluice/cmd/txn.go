package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// defaultHangingThreshold is transaction.max.timeout.ms's default: a
// transaction open longer than the longest timeout a producer may ask for
// should have been aborted by its coordinator.
const defaultHangingThreshold = 15 * time.Minute

func newTxnCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "txn",
		Aliases: []string{"txns", "transactions"},
		Short:   "List, describe and abort transactions; find transactions hanging on partitions",
	}
	cmd.AddCommand(newTxnListCmd(g), newTxnDescribeCmd(g), newTxnAbortCmd(g), newTxnFindHangingCmd(g))
	return cmd
}

// txnStates names transaction states as Kafka's tools do.
var txnStates = []struct {
	state txnv1.TransactionState
	name  string
}{
	{txnv1.TransactionState_TRANSACTION_STATE_EMPTY, "Empty"},
	{txnv1.TransactionState_TRANSACTION_STATE_ONGOING, "Ongoing"},
	{txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT, "PrepareCommit"},
	{txnv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT, "PrepareAbort"},
	{txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_COMMIT, "CompleteCommit"},
	{txnv1.TransactionState_TRANSACTION_STATE_COMPLETE_ABORT, "CompleteAbort"},
	{txnv1.TransactionState_TRANSACTION_STATE_DEAD, "Dead"},
	{txnv1.TransactionState_TRANSACTION_STATE_PREPARE_EPOCH_FENCE, "PrepareEpochFence"},
}

func txnStateName(s txnv1.TransactionState) string {
	for _, n := range txnStates {
		if n.state == s {
			return n.name
		}
	}
	return "Unknown"
}

// parseTxnStates reads --state values in any case, with or without
// separators (Ongoing, ongoing, PREPARE_COMMIT, prepare-commit).
func parseTxnStates(list []string) ([]txnv1.TransactionState, error) {
	var out []txnv1.TransactionState
	var names []string
	for _, n := range txnStates {
		names = append(names, n.name)
	}
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("-", "", "_", "", " ", "").Replace(s))
	}
	for _, s := range list {
		found := false
		for _, n := range txnStates {
			if norm(s) == norm(n.name) {
				out = append(out, n.state)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--state %q: want one of %s", s, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// txnJSON is a transaction in list and describe's JSON output, named in
// protojson's style as the rest of the CLI's JSON.
type txnJSON struct {
	TransactionalID      string   `json:"transactionalId"`
	ProducerID           int64    `json:"producerId"`
	ProducerEpoch        *int32   `json:"producerEpoch,omitempty"`
	State                string   `json:"state"`
	TransactionTimeoutMs *int32   `json:"transactionTimeoutMs,omitempty"`
	StartTimeMs          *int64   `json:"startTimeMs,omitempty"`
	DurationMs           *int64   `json:"durationMs,omitempty"`
	Partitions           []string `json:"partitions"`
	Error                string   `json:"error,omitempty"`
}

// txnRow joins a transaction's listing and, when it could be had, its
// description.
func txnRow(id string, producerID int64, state txnv1.TransactionState, d *txnv1.TransactionDescription, now time.Time) txnJSON {
	r := txnJSON{TransactionalID: id, ProducerID: producerID, State: txnStateName(state), Partitions: []string{}}
	if d == nil {
		return r
	}
	if e := errs.FromProto(d.GetError()); e != nil {
		r.Error = e.Error()
		return r
	}
	// The description is newer than the listing.
	r.ProducerID, r.State = d.GetProducerId(), txnStateName(d.GetState())
	epoch, timeout := d.GetProducerEpoch(), d.GetTransactionTimeoutMs()
	r.ProducerEpoch, r.TransactionTimeoutMs = &epoch, &timeout
	if start := d.GetStartTimeMs(); start >= 0 {
		dur := max(now.UnixMilli()-start, 0)
		r.StartTimeMs, r.DurationMs = &start, &dur
	}
	for _, tp := range d.GetPartitions() {
		r.Partitions = append(r.Partitions, tpText(tp))
	}
	return r
}

// txnOpen says whether a transaction in state s is open or ending.
func txnOpen(s txnv1.TransactionState) bool {
	switch s {
	case txnv1.TransactionState_TRANSACTION_STATE_ONGOING, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT,
		txnv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_EPOCH_FENCE:
		return true
	}
	return false
}

func tpText(tp *commonv1.TopicPartition) string {
	return fmt.Sprintf("%s-%d", tp.GetTopic(), tp.GetPartition())
}

// durationText renders an age: milliseconds below a second, else seconds.
func durationText(ms *int64) string {
	if ms == nil {
		return "-"
	}
	d := time.Duration(*ms) * time.Millisecond
	if d < time.Second {
		return d.String()
	}
	return d.Round(time.Second).String()
}

func partitionsText(list []string) string {
	if len(list) == 0 {
		return "-"
	}
	return strings.Join(list, ",")
}

func newTxnListCmd(g *globals) *cobra.Command {
	var states []string
	var producerIDs []int64
	var minDuration time.Duration
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List transactional ids with their producer id, state, age and partitions",
		Long: `List the transactional ids every transaction coordinator knows, with their
producer id and state, and for an open or ending transaction how long it has
been open and its partitions (from each id's coordinator).

  sluice txn list
  sluice txn list --state Ongoing --min-duration 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := parseTxnStates(states)
			if err != nil {
				return err
			}
			if minDuration < 0 {
				return fmt.Errorf("--min-duration %v must not be negative", minDuration)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			list, lerr := c.ListTransactions(ctx, client.TxnFilters{States: filters, ProducerIDs: producerIDs, MinDuration: minDuration})
			if lerr != nil && len(list) == 0 {
				return errors.New(errText(lerr))
			}
			// Only open transactions have an age and partitions worth a
			// call to their coordinator; a cluster may hold many ids at rest.
			var ids []string
			for _, l := range list {
				if txnOpen(l.GetState()) {
					ids = append(ids, l.GetTransactionalId())
				}
			}
			// A description that fails leaves its row with what the
			// listing said; its error is in the JSON output.
			descs, _ := c.DescribeTransactions(ctx, ids...)
			byID := map[string]*txnv1.TransactionDescription{}
			for _, d := range descs {
				byID[d.GetTransactionalId()] = d
			}
			now := time.Now()
			rows := make([]txnJSON, len(list))
			for i, l := range list {
				rows[i] = txnRow(l.GetTransactionalId(), l.GetProducerId(), l.GetState(), byID[l.GetTransactionalId()], now)
			}
			if err := printTxnRows(g, cmd.OutOrStdout(), rows, false); err != nil {
				return err
			}
			if lerr != nil {
				return fmt.Errorf("some transaction coordinators did not answer, so the list may be incomplete: %s", errText(lerr))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "Only transactions in these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence); comma-separated or repeated.")
	cmd.Flags().Int64SliceVar(&producerIDs, "producer-id", nil, "Only transactions of these producer ids; comma-separated or repeated.")
	cmd.Flags().DurationVar(&minDuration, "min-duration", 0, "Only transactions open at least this long (such as 5m).")
	return cmd
}

// printTxnRows prints transactions as a table (with the epoch and timeout
// columns when detailed) or as JSON.
func printTxnRows(g *globals, out io.Writer, rows []txnJSON, detailed bool) error {
	if g.output == "json" {
		return printJSON(out, struct {
			Transactions []txnJSON `json:"transactions"`
		}{rows})
	}
	return g.print(out, nil, func(w io.Writer) error {
		if detailed {
			fmt.Fprintln(w, "TRANSACTIONAL-ID\tPRODUCER-ID\tEPOCH\tSTATE\tTIMEOUT\tSTART-TIME\tAGE\tPARTITIONS")
		} else {
			fmt.Fprintln(w, "TRANSACTIONAL-ID\tPRODUCER-ID\tSTATE\tAGE\tPARTITIONS")
		}
		for _, r := range rows {
			if detailed {
				epoch, timeout, start := "-", "-", "-"
				if r.ProducerEpoch != nil {
					epoch = fmt.Sprint(*r.ProducerEpoch)
				}
				if r.TransactionTimeoutMs != nil {
					timeout = (time.Duration(*r.TransactionTimeoutMs) * time.Millisecond).String()
				}
				if r.StartTimeMs != nil {
					start = timestampText(*r.StartTimeMs)
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.TransactionalID, r.ProducerID, epoch, r.State, timeout, start,
					durationText(r.DurationMs), partitionsText(r.Partitions))
				continue
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", r.TransactionalID, r.ProducerID, r.State, durationText(r.DurationMs), partitionsText(r.Partitions))
		}
		return nil
	})
}

func newTxnDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TRANSACTIONAL-ID...",
		Short: "Describe transactions: producer id and epoch, state, timeout, start time, age and partitions",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			descs, _ := c.DescribeTransactions(cmd.Context(), args...) // each description carries its own error, reported below
			now := time.Now()
			var rows []txnJSON
			var failed []string
			for _, d := range descs {
				if e := errs.FromProto(d.GetError()); e != nil {
					if e.Code == errs.TransactionalIDNotFound {
						failed = append(failed, fmt.Sprintf("transactional id '%s' does not exist", d.GetTransactionalId()))
					} else {
						failed = append(failed, fmt.Sprintf("transactional id '%s' could not be described: %s", d.GetTransactionalId(), e.Error()))
					}
					if g.output != "json" {
						continue
					}
				}
				rows = append(rows, txnRow(d.GetTransactionalId(), d.GetProducerId(), d.GetState(), d, now))
			}
			if len(rows) > 0 || g.output == "json" {
				if err := printTxnRows(g, cmd.OutOrStdout(), rows, true); err != nil {
					return err
				}
			}
			switch len(failed) {
			case 0:
				return nil
			case 1:
				return errors.New(failed[0])
			}
			return fmt.Errorf("%d of %d transactional ids could not be described:\n  %s", len(failed), len(descs), strings.Join(failed, "\n  "))
		},
	}
}

func newTxnAbortCmd(g *globals) *cobra.Command {
	var topic string
	var partition int32
	var producerID int64
	var force bool
	cmd := &cobra.Command{
		Use:   "abort (TRANSACTIONAL-ID | --topic TOPIC --partition N --producer-id ID)",
		Short: "Abort a transaction at its coordinator, or a transaction hanging on a partition",
		Long: `With a transactional id: ask the id's coordinator to abort its open
transaction. The coordinator fences the id's producer (its next call fails
with PRODUCER_FENCED) and writes ABORT markers to every partition of the
transaction.

With --topic, --partition and --producer-id: end a transaction left open on
one partition that no coordinator will end (a hanging transaction, found with
"sluice txn find-hanging"). It holds back the partition's last stable offset,
so read_committed consumers stop there. The producer's epoch and coordinator
epoch are read from the partition leader's producer state and an ABORT marker
is written with them to that partition alone. Because aborting one partition
of a transaction its coordinator still runs would break that transaction's
atomicity, the coordinators are asked first and the abort is refused if one
of them runs it (abort it by its transactional id instead) or if not every
coordinator answered; --force skips that check.

  sluice txn abort payments-tx-1
  sluice txn abort --topic orders --partition 3 --producer-id 4001`,
		RunE: func(cmd *cobra.Command, args []string) error {
			byPartition := cmd.Flags().Changed("topic") || cmd.Flags().Changed("partition") || cmd.Flags().Changed("producer-id")
			switch {
			case byPartition && len(args) > 0:
				return errors.New("give either a transactional id or --topic, --partition and --producer-id, not both")
			case byPartition && (topic == "" || !cmd.Flags().Changed("partition") || !cmd.Flags().Changed("producer-id")):
				return errors.New("a transaction hanging on a partition is named by --topic, --partition and --producer-id together")
			case byPartition && (partition < 0 || producerID < 0):
				return errors.New("--partition and --producer-id must not be negative")
			case !byPartition && len(args) != 1:
				return errors.New("say which transaction to abort: a transactional id, or --topic, --partition and --producer-id for a transaction hanging on a partition")
			case !byPartition && force:
				return errors.New("--force applies to an abort by --topic, --partition and --producer-id")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if !byPartition {
				if err := c.AbortTransaction(ctx, args[0]); err != nil {
					if errs.Is(err, errs.TransactionalIDNotFound) {
						return fmt.Errorf("transactional id '%s' does not exist", args[0])
					}
					return err
				}
				if g.output == "json" {
					return printJSON(out, struct {
						TransactionalID string `json:"transactionalId"`
						Aborted         bool   `json:"aborted"`
					}{args[0], true})
				}
				fmt.Fprintf(out, "Aborted the transaction of '%s': its coordinator persisted the abort, fenced the producer and writes the ABORT markers to the transaction's partitions.\n", args[0])
				return nil
			}
			if !force {
				if err := refuseIfCoordinated(ctx, c, topic, partition, producerID); err != nil {
					return err
				}
			}
			p, err := c.AbortHangingTransaction(ctx, topic, partition, producerID)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, struct {
					Topic            string `json:"topic"`
					Partition        int32  `json:"partition"`
					ProducerID       int64  `json:"producerId"`
					ProducerEpoch    int32  `json:"producerEpoch"`
					CoordinatorEpoch int32  `json:"coordinatorEpoch"`
					StartOffset      int64  `json:"startOffset"`
				}{topic, partition, producerID, p.GetProducerEpoch(), max(p.GetCoordinatorEpoch(), 0), p.GetCurrentTxnStartOffset()})
			}
			fmt.Fprintf(out, "Aborted the transaction of producer %d (epoch %d, coordinator epoch %d) open on %s-%d since offset %d.\n",
				producerID, p.GetProducerEpoch(), max(p.GetCoordinatorEpoch(), 0), topic, partition, p.GetCurrentTxnStartOffset())
			return nil
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "Topic of the partition the transaction hangs on.")
	cmd.Flags().Int32Var(&partition, "partition", -1, "Partition the transaction hangs on.")
	cmd.Flags().Int64Var(&producerID, "producer-id", -1, "Producer id of the hanging transaction (see sluice producers describe).")
	cmd.Flags().BoolVar(&force, "force", false, "Abort on the partition without checking that no transaction coordinator runs the transaction.")
	return cmd
}

// refuseIfCoordinated returns an error if a transaction coordinator runs
// the producer's transaction open on the partition, or if that cannot be
// told because not every coordinator answered.
func refuseIfCoordinated(ctx context.Context, c *client.Client, topic string, partition int32, producerID int64) error {
	res, err := c.DescribeProducers(ctx, topic, partition, false)
	if err != nil {
		return err
	}
	var p *storagev1.ProducerState
	for _, q := range res.GetProducers() {
		if q.GetProducerId() == producerID {
			p = q
		}
	}
	if p == nil || p.GetCurrentTxnStartOffset() < 0 {
		// Nothing to abort: AbortHangingTransaction says so with what the
		// leader shows.
		return nil
	}
	descs, cerr := coordinatorTransactions(ctx, c, []int64{producerID})
	tp := &commonv1.TopicPartition{Topic: topic, Partition: partition}
	if d := txnOwner(descs, tp, p); d != nil {
		return fmt.Errorf("the transaction of producer %d open on %s-%d since offset %d is run by its coordinator as transactional id '%s' (state %s): abort it there with `sluice txn abort %s`, which ends it on all its partitions; --force aborts this partition alone",
			producerID, topic, partition, p.GetCurrentTxnStartOffset(), d.GetTransactionalId(), txnStateName(d.GetState()), d.GetTransactionalId())
	}
	if cerr != nil {
		return fmt.Errorf("could not ask every transaction coordinator whether it runs the transaction of producer %d (%s); --force aborts it on %s-%d anyway", producerID, errText(cerr), topic, partition)
	}
	return nil
}

// coordinatorTransactions describes the transactions the coordinators list
// for the producer ids. The error says which coordinators or descriptions
// failed; what was found is returned with it.
func coordinatorTransactions(ctx context.Context, c *client.Client, producerIDs []int64) ([]*txnv1.TransactionDescription, error) {
	list, lerr := c.ListTransactions(ctx, client.TxnFilters{ProducerIDs: producerIDs})
	if len(list) == 0 {
		return nil, lerr
	}
	ids := make([]string, len(list))
	for i, l := range list {
		ids[i] = l.GetTransactionalId()
	}
	descs, derr := c.DescribeTransactions(ctx, ids...)
	return descs, errors.Join(lerr, derr)
}

// txnOwner returns the description of the coordinator's transaction that
// will end p's transaction open on tp, or nil if none will: one of p's
// producer id, open (Ongoing at p's epoch) or ending (PrepareCommit,
// PrepareAbort or PrepareEpochFence, whose epoch is already bumped), that
// includes tp. A transaction the coordinator runs at a later epoch began
// after p's ended, whose markers this partition then never got.
func txnOwner(descs []*txnv1.TransactionDescription, tp *commonv1.TopicPartition, p *storagev1.ProducerState) *txnv1.TransactionDescription {
	for _, d := range descs {
		if d.GetError() != nil || d.GetProducerId() != p.GetProducerId() {
			continue
		}
		in := false
		for _, q := range d.GetPartitions() {
			if q.GetTopic() == tp.GetTopic() && q.GetPartition() == tp.GetPartition() {
				in = true
			}
		}
		if !in {
			continue
		}
		switch d.GetState() {
		case txnv1.TransactionState_TRANSACTION_STATE_ONGOING:
			if d.GetProducerEpoch() == p.GetProducerEpoch() {
				return d
			}
		case txnv1.TransactionState_TRANSACTION_STATE_PREPARE_COMMIT, txnv1.TransactionState_TRANSACTION_STATE_PREPARE_ABORT,
			txnv1.TransactionState_TRANSACTION_STATE_PREPARE_EPOCH_FENCE:
			if d.GetProducerEpoch() >= p.GetProducerEpoch() {
				return d
			}
		}
	}
	return nil
}

// hangingRow is one open transaction find-hanging reports.
type hangingRow struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	ProducerID       int64  `json:"producerId"`
	ProducerEpoch    int32  `json:"producerEpoch"`
	CoordinatorEpoch int32  `json:"coordinatorEpoch"`
	StartOffset      int64  `json:"startOffset"`
	LastTimestampMs  int64  `json:"lastTimestampMs"`
	DurationMs       int64  `json:"durationMs"`
	// TransactionalID is the id whose coordinator runs the transaction,
	// empty for a hanging one.
	TransactionalID string `json:"transactionalId,omitempty"`
	// Reason is "hanging" (no coordinator will end it) or "long-running"
	// (its coordinator runs it, but it has been open longer than the
	// threshold).
	Reason string `json:"reason"`
}

// openTxn is a transaction a partition shows open.
type openTxn struct {
	tp *commonv1.TopicPartition
	p  *storagev1.ProducerState
}

// classifyOpen decides which open transactions find-hanging reports: those
// no coordinator runs (hanging) and those open longer than threshold,
// judged by the producer's last write to the partition, as Kafka's tool
// does (long-running). The others are left out.
func classifyOpen(open []openTxn, descs []*txnv1.TransactionDescription, threshold time.Duration, now time.Time) []hangingRow {
	var out []hangingRow
	for _, o := range open {
		r := hangingRow{Topic: o.tp.GetTopic(), Partition: o.tp.GetPartition(), ProducerID: o.p.GetProducerId(), ProducerEpoch: o.p.GetProducerEpoch(),
			CoordinatorEpoch: o.p.GetCoordinatorEpoch(), StartOffset: o.p.GetCurrentTxnStartOffset(), LastTimestampMs: o.p.GetLastTimestampMs(),
			DurationMs: max(now.UnixMilli()-o.p.GetLastTimestampMs(), 0)}
		owner := txnOwner(descs, o.tp, o.p)
		switch {
		case owner == nil:
			r.Reason = "hanging"
		case time.Duration(r.DurationMs)*time.Millisecond > threshold:
			r.TransactionalID, r.Reason = owner.GetTransactionalId(), "long-running"
		default:
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.ProducerID < b.ProducerID
	})
	return out
}

func newTxnFindHangingCmd(g *globals) *cobra.Command {
	var topicFlags []string
	var threshold time.Duration
	cmd := &cobra.Command{
		Use:   "find-hanging [--topic TOPIC[:P,P]]...",
		Short: "Find transactions open on partitions that no coordinator will end, or open longer than a threshold",
		Long: `Read the producer state of partitions (every topic's, or those named) and
report each open transaction that either no transaction coordinator runs (it
is hanging: nothing will ever end it, and it holds back the partition's last
stable offset, so read_committed consumers are stuck there) or that has been
open longer than --threshold, judged by the producer's last write to the
partition (by default transaction.max.timeout.ms's default, 15 minutes, past
which a coordinator should have aborted it). A hanging transaction is ended
with "sluice txn abort --topic T --partition P --producer-id ID"; a
long-running one with "sluice txn abort TRANSACTIONAL-ID".

  sluice txn find-hanging
  sluice txn find-hanging --topic orders --threshold 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var specs []topicSpec
			for _, s := range topicFlags {
				ts, err := parseTopicSpec(s)
				if err != nil {
					return err
				}
				specs = append(specs, ts)
			}
			if threshold < 0 {
				return fmt.Errorf("--threshold %v must not be negative", threshold)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			rows, checked, nOpen, ferr := findHanging(ctx, c, specs, threshold)
			if ferr != nil && rows == nil && checked == 0 {
				return ferr
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				if rows == nil {
					rows = []hangingRow{}
				}
				if err := printJSON(out, struct {
					PartitionsChecked int          `json:"partitionsChecked"`
					OpenTransactions  int          `json:"openTransactions"`
					ThresholdMs       int64        `json:"thresholdMs"`
					Transactions      []hangingRow `json:"transactions"`
				}{checked, nOpen, threshold.Milliseconds(), rows}); err != nil {
					return err
				}
			} else if err := g.print(out, nil, func(w io.Writer) error {
				if len(rows) == 0 {
					fmt.Fprintf(w, "No hanging transaction: %d partitions checked, %d open transactions, each run by its coordinator and open less than %v.\n", checked, nOpen, threshold)
					return nil
				}
				fmt.Fprintln(w, "TOPIC\tPARTITION\tPRODUCER-ID\tEPOCH\tCOORDINATOR-EPOCH\tSTART-OFFSET\tLAST-TIMESTAMP\tDURATION\tTRANSACTIONAL-ID\tREASON")
				for _, r := range rows {
					d := r.DurationMs
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, r.ProducerID, r.ProducerEpoch, r.CoordinatorEpoch,
						r.StartOffset, timestampText(r.LastTimestampMs), durationText(&d), dash(r.TransactionalID), r.Reason)
				}
				return nil
			}); err != nil {
				return err
			}
			return ferr
		},
	}
	cmd.Flags().StringArrayVar(&topicFlags, "topic", nil, "Topic to check, all its partitions or only those listed (TOPIC or TOPIC:0,1,2); repeatable. Default: every topic, internal ones included.")
	cmd.Flags().DurationVar(&threshold, "threshold", defaultHangingThreshold, "Report transactions open longer than this even if their coordinator runs them.")
	return cmd
}

// findHanging reads the producer state of the partitions and classifies
// their open transactions. It returns the rows to report, how many
// partitions were read and how many open transactions they showed; the
// error names the partitions that could not be read and coordinators that
// did not answer (a transaction is then reported hanging only if the
// coordinators that did answer do not run it).
func findHanging(ctx context.Context, c *client.Client, specs []topicSpec, threshold time.Duration) ([]hangingRow, int, int, error) {
	if len(specs) == 0 {
		topics, err := c.ListTopics(ctx, true)
		if err != nil {
			return nil, 0, 0, err
		}
		for _, t := range topics.GetTopics() {
			// The coordinator's own log: no producer writes to it.
			if t.GetName() != "__transaction_state" {
				specs = append(specs, topicSpec{topic: t.GetName()})
			}
		}
	}
	tps, err := topicPartitions(ctx, c, specs)
	if err != nil {
		return nil, 0, 0, err
	}
	results, derr := c.DescribeProducersOf(ctx, tps...)
	var ordered []*storagev1.DescribeProducersResult
	for _, tp := range tps {
		if r, ok := results[tp]; ok {
			ordered = append(ordered, r)
		}
	}
	open := openTransactions(ordered)
	var rows []hangingRow
	var cerr error
	if len(open) > 0 {
		seen := map[int64]bool{}
		var pids []int64
		for _, o := range open {
			if !seen[o.p.GetProducerId()] {
				seen[o.p.GetProducerId()] = true
				pids = append(pids, o.p.GetProducerId())
			}
		}
		var descs []*txnv1.TransactionDescription
		descs, cerr = coordinatorTransactions(ctx, c, pids)
		rows = classifyOpen(open, descs, threshold, time.Now())
		rows = recheckHanging(ctx, c, rows)
	}
	var errList []error
	if derr != nil {
		errList = append(errList, fmt.Errorf("the producer state of some partitions could not be read: %s", errText(derr)))
	}
	if cerr != nil {
		errList = append(errList, fmt.Errorf("not every transaction coordinator answered, so a transaction shown hanging may be run by one that did not: %s", errText(cerr)))
	}
	return rows, len(results), len(open), errors.Join(errList...)
}

// openTransactions lists the open transactions the partitions show.
func openTransactions(results []*storagev1.DescribeProducersResult) []openTxn {
	var out []openTxn
	for _, r := range results {
		for _, p := range r.GetProducers() {
			if p.GetCurrentTxnStartOffset() >= 0 {
				out = append(out, openTxn{tp: r.GetPartition(), p: p})
			}
		}
	}
	return out
}

// recheckHanging reads the partitions of hanging rows again and keeps a
// row only if the same transaction is still open: one that ended between
// the partition's answer and the coordinators' (its coordinator then ran a
// newer transaction, or none) is not hanging. A partition that cannot be
// read again keeps its row.
func recheckHanging(ctx context.Context, c *client.Client, rows []hangingRow) []hangingRow {
	var tps []client.TopicPartition
	for _, r := range rows {
		if r.Reason == "hanging" {
			tps = append(tps, client.TopicPartition{Topic: r.Topic, Partition: r.Partition})
		}
	}
	if len(tps) == 0 {
		return rows
	}
	// Partitions not read again keep their rows; their error does not
	// change what the first read found.
	again, _ := c.DescribeProducersOf(ctx, tps...)
	out := rows[:0]
	for _, r := range rows {
		if res, ok := again[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}]; ok && r.Reason == "hanging" && !stillOpen(res, r.ProducerID, r.StartOffset) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func stillOpen(res *storagev1.DescribeProducersResult, producerID, start int64) bool {
	for _, p := range res.GetProducers() {
		if p.GetProducerId() == producerID && p.GetCurrentTxnStartOffset() == start {
			return true
		}
	}
	return false
}
